"""Project-level promises: the layout, the README's two commands, CI."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_platform_folder_does_not_shadow_the_standard_library():
    assert not (ROOT / "platform" / "__init__.py").exists()
    out = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.system())"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() in {"Linux", "Darwin", "Windows"}


def test_role_folders_map_into_the_thinwire_package():
    import thinwire.clients
    import thinwire.server
    import thinwire.topologies

    assert Path(thinwire.server.__file__).parent == ROOT / "server"
    assert Path(thinwire.clients.__file__).parent == ROOT / "clients"
    assert Path(thinwire.topologies.__file__).parent == ROOT / "topologies"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block, "README must open with a code block holding the two set-up commands"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert "thinwire run examples/" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci
