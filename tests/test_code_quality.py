"""Checks from the style guide that a script can make (STYLE.md §7), and lint and types."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = [ROOT / "platform" / "thinwire", ROOT / "server", ROOT / "clients", ROOT / "topologies"]


def library_files() -> list[Path]:
    return sorted(
        p
        for folder in LIBRARY
        for p in folder.rglob("*.py")
        if not p.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    )


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is a test extra")
def test_ruff_lint_and_format_are_clean():
    lint = subprocess.run(
        ["ruff", "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run(
        ["ruff", "format", "--check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_is_clean_on_the_core():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_library_modules_do_not_print():
    offenders = []
    for path in library_files():
        if path.parent.name == "cli":
            continue  # the command's own console output (rich)
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                offenders.append(f"{relative(path)}:{node.lineno}")
    assert not offenders, f"use logging, not print: {offenders}"


def test_library_code_has_no_assert_statements():
    # Untrusted data gets typed errors (WireError, ConfigError); `python -O` drops asserts.
    offenders = [
        f"{relative(path)}:{node.lineno}"
        for path in library_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert not offenders, f"raise a typed error instead of assert: {offenders}"


FORBIDDEN = {
    r"\btorch\.manual_seed\(|\bnp\.random\.seed\(|\brandom\.seed\(": "global RNG seeding (rule 4)",
    r"(?<![.\w])(eval|exec)\(|importlib\.import_module\(": "code from strings (rule 12)",
    r"allow_pickle\s*=\s*True|pickle\.loads?\(": "unrestricted pickle (rule 13)",
    r"torch\.load\((?!.*weights_only=True)": "torch.load without weights_only=True (rule 13)",
}


# The one module that imports by name: plugin modules the user lists or installs (rule 12
# forbids choosing components by import string; a plugin's kinds are still chosen by `kind`).
PLUGIN_LOADER = ROOT / "platform" / "thinwire" / "plugins.py"


@pytest.mark.parametrize("pattern", FORBIDDEN)
def test_forbidden_calls(pattern):
    offenders = [
        f"{relative(path)}:{n}"
        for path in library_files()
        if not (path == PLUGIN_LOADER and "importlib" in pattern)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(pattern, line) and not line.lstrip().startswith((">>>", "#"))
    ]
    assert not offenders, f"{FORBIDDEN[pattern]}: {offenders}"


def test_no_state_on_objects_we_do_not_own():
    pattern = re.compile(r"\b(model|module|optimizer)\.[a-z_]+\s*=(?!=)")
    offenders = [
        f"{relative(path)}:{n}"
        for path in library_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and "self." not in line.split("=")[0]
    ]
    assert not offenders, f"state set on a module/optimizer (rule 6): {offenders}"


def test_modules_stay_small_or_say_why():
    long = []
    for path in library_files():
        text = path.read_text()
        if text.count("\n") > 500:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if "lines" not in docstring:
                long.append(f"{relative(path)} ({text.count(chr(10))} lines)")
    assert not long, f"over 500 lines without a reason in the module docstring (rule 7): {long}"


def test_public_packages_declare_all():
    missing = [
        relative(path)
        for path in library_files()
        if path.name == "__init__.py"
        and path.read_text().strip()
        and "__all__" not in path.read_text()
    ]
    assert not missing, missing


def test_every_package_is_listed_in_pyproject():
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    roots = {
        "thinwire": ROOT / "platform" / "thinwire",
        "thinwire.server": ROOT / "server",
        "thinwire.clients": ROOT / "clients",
        "thinwire.topologies": ROOT / "topologies",
    }
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if name == "thinwire" and parts[:1] in {("server",), ("clients",), ("topologies",)}:
                continue
            found.add(".".join((name, *parts)))
    assert found == listed, f"missing {sorted(found - listed)}, stale {sorted(listed - found)}"
