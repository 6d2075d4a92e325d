"""The architecture's import rules, read from the installed package's source with `ast`.

Imports point down: cli -> runtimes -> roles -> core. `LAYERS` is the one description of
which module sits in which layer; a module may import only modules of its own layer or a
layer below. Every import counts, also one inside a function or under `TYPE_CHECKING`: a
lazy import is still a dependency, only a later one. Besides the direction: no cycles
between packages (there, imports that only type checkers run are left out), private
modules stay inside their package, and the core imports light.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Layers, lowest first. A pattern names a module or package (and everything under it), or
# a shell-style pattern; the longest matching pattern decides. Adjust it when modules move.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "thinwire",
        "thinwire.channel",
        "thinwire.checkpoint",
        "thinwire.codecs",
        "thinwire.config",
        "thinwire.ddp",  # the communication hook; its runtime is below
        "thinwire.learning",
        "thinwire.metrics",
        "thinwire.plugins",
        "thinwire.policies",
        "thinwire.privacy",
        "thinwire.reference",
        "thinwire.registry",
        "thinwire.results",
        "thinwire.seeding",
        "thinwire.statetree",
        "thinwire.tensorboard",
        "thinwire.voting",
        "thinwire.wire",
    ),
    "role": (
        "thinwire.clients",
        "thinwire.server",
        "thinwire.topologies",
    ),
    "runtime": (
        "thinwire.runtimes",
        "thinwire.preflight",  # builds every role of a config to check it before a run
        "thinwire.sweep",
        "thinwire.topologies.runtime",
        "thinwire.topologies.transport",
    ),
    "cli": (
        "thinwire.cli",
        "thinwire.__main__",
    ),
}

# Imports that break the rules today and belong to another branch of the restructuring
# (issue 12). Each must still exist: delete an entry once its move has been merged.
PENDING: dict[tuple[str, str], str] = {}

# The packages the library's source lives in; each is found through the import system, so
# the installed package is read (a role folder maps into `thinwire` from outside platform/).
ROOTS = ("thinwire", "thinwire.clients", "thinwire.server", "thinwire.topologies")

HEAVY = ("grpc", "flwr", "matplotlib", "opacus", "scipy", "sklearn")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    package: str  # the package the module's file lies in (itself, for an __init__)


@cache
def modules() -> dict[str, Module]:
    """Every module of the installed package, by dotted name (generated protobuf excluded)."""
    found: dict[str, Module] = {}
    for root in ROOTS:
        spec = importlib.util.find_spec(root)
        assert spec and spec.submodule_search_locations, root
        for folder in map(Path, spec.submodule_search_locations):
            for path in sorted(folder.rglob("*.py")):
                parts = path.relative_to(folder).with_suffix("").parts
                if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                    continue
                if not all(
                    (folder / Path(*parts[:i]) / "__init__.py").exists() for i in range(len(parts))
                ):
                    continue  # not inside a package (a stray folder)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                name = ".".join((root, *parts))
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                found.setdefault(name, Module(name, path, package))
    return found


def _target(name: str) -> str:
    """The module an imported name resolves to: itself, or the nearest enclosing module."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name


@cache
def imports(name: str, *, runtime_only: bool = False) -> frozenset[tuple[str, int]]:
    """(thinwire module, line) of every import in module `name`.

    With `runtime_only`, imports under `if TYPE_CHECKING:` are left out (they never run).
    """
    module = modules()[name]
    found = _imports(module.path, module.package)
    return frozenset(
        (target, line)
        for target, line, typing_only in found
        if target != name and not (runtime_only and typing_only)
    )


def _imports(path: Path, package: str) -> set[tuple[str, int, bool]]:
    """(thinwire module, line, under TYPE_CHECKING) of every import in the file at `path`."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found: set[tuple[str, int, bool]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import submodule` imports the submodule too.
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _target(target) if target.split(".")[0] == "thinwire" else ""
            if resolved:
                found.add((resolved, node.lineno, id(node) in typing_only))
    return found


def layer_of(name: str) -> str | None:
    """The layer of the longest pattern in LAYERS that matches `name`, or None."""
    matches = [
        (len(pattern), layer)
        for layer, patterns in LAYERS.items()
        for pattern in patterns
        if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    ]
    return max(matches)[1] if matches else None


RANK = {layer: rank for rank, layer in enumerate(LAYERS)}


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in modules() if layer_of(name) is None)
    assert not unplaced, f"add these to LAYERS in {__file__}: {unplaced}"


def test_every_layer_pattern_names_a_module_that_exists():
    # A moved module must leave the table, or the table would place a module that is gone.
    names = list(modules())
    stale = [
        pattern
        for patterns in LAYERS.values()
        for pattern in patterns
        if not any(
            fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(n, pattern + ".*") for n in names
        )
    ]
    assert not stale, f"delete from LAYERS in {__file__}: {stale}"


def _violations() -> dict[tuple[str, str], str]:
    found = {}
    for name in modules():
        low = layer_of(name)
        for target, line in imports(name):
            high = layer_of(target)
            if low and high and RANK[high] > RANK[low]:
                found[(name, target)] = f"{name}:{line} ({low}) imports {target} ({high})"
    return found


def test_imports_point_down():
    violations = _violations()
    new = [text for key, text in sorted(violations.items()) if key not in PENDING]
    assert not new, "an import points up a layer:\n" + "\n".join(new)


def _role(name: str) -> str | None:
    """The role package a role-layer module belongs to (its pattern in LAYERS["role"])."""
    if layer_of(name) != "role":
        return None
    return max(
        p for p in LAYERS["role"] if fnmatch.fnmatchcase(name, p) or name.startswith(p + ".")
    )


def test_roles_do_not_import_each_other():
    # Client, server and gossip node share only the core: what two roles both need (a
    # message schema, a state format) lives below them.
    crossings = [
        f"{name}:{line} imports {target}"
        for name in modules()
        for target, line in imports(name)
        if _role(name) and _role(target) and _role(name) != _role(target)
    ]
    assert not crossings, crossings


def test_pending_violations_still_exist():
    # Keeps PENDING honest: a fixed violation must leave the list.
    gone = sorted(set(PENDING) - set(_violations()))
    assert not gone, f"fixed, delete from PENDING: {gone}"


def _unit(name: str) -> str:
    """What a cycle is counted between: a module's package, or a top-level module itself."""
    package = modules()[name].package
    return name if package == "thinwire" else package


def test_no_import_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    edges: list[tuple[str, str, str]] = []  # (from unit, to unit, where)
    for name in modules():
        for target, line in imports(name, runtime_only=True):
            if _unit(name) != _unit(target) and (name, target) not in PENDING:
                graph.setdefault(_unit(name), set()).add(_unit(target))
                edges.append((_unit(name), _unit(target), f"{name}:{line} -> {target}"))
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    where = [e for c in cycles for a, b, e in sorted(edges) if a in c and b in c]
    assert not cycles, f"packages that import each other: {cycles}\n" + "\n".join(where)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of a directed graph (iterative, so deep chains cannot overflow)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_private_modules_stay_inside_their_package():
    # The rule: `_name.py` is internal to the package it lies in (and that package's
    # subpackages). Code elsewhere imports the public names the package's `__init__`
    # re-exports in `__all__`. Tests and benchmarks may import internals (white-box checks).
    offenders = []
    for name in modules():
        for target, line in imports(name):
            private = target.rpartition(".")[2].startswith("_") and not target.endswith("__")
            owner = modules()[target].package
            if private and not (name == owner or name.startswith(owner + ".")):
                offenders.append(f"{name}:{line} imports {target}")
    assert not offenders, "import the package, not its private module:\n" + "\n".join(offenders)


def test_examples_use_only_the_public_api():
    # A user's code starts from an example (plugins included): it must not need internals.
    examples = Path(__file__).resolve().parents[1] / "examples"
    offenders = [
        f"{path.relative_to(examples)}:{line} imports {target}"
        for path in sorted(examples.rglob("*.py"))
        for target, line, _ in _imports(path, "")
        if any(part.startswith("_") for part in target.split("."))
    ]
    assert not offenders, offenders


def test_packages_with_private_modules_export_what_they_import_from_them():
    missing = []
    for module in modules().values():
        if module.path.name != "__init__.py":
            continue
        tree = ast.parse(module.path.read_text())
        exported = _all(tree)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                module.name + "._"
            ):
                for alias in node.names:
                    public = alias.asname or alias.name
                    if not public.startswith("_") and public not in exported:
                        missing.append(f"{module.name}: {public} (from {node.module})")
    assert not missing, "re-exported but not in __all__:\n" + "\n".join(missing)


def _all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value:
                return set(ast.literal_eval(node.value))
    return set()


LIGHT = ("thinwire.config", "thinwire.wire", "thinwire.codecs")


def test_core_packages_import_without_the_heavy_dependencies():
    # One fresh interpreter (this process has imported everything already) imports each in
    # turn; a heavy module is charged to the first import that loaded it.
    code = (
        "import importlib, sys\n"
        f"for name in {LIGHT!r}:\n"
        "    importlib.import_module(name)\n"
        f"    print(name, *sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = [line for line in out.stdout.splitlines() if len(line.split()) > 1]
    assert not loaded, f"{HEAVY} must stay out of the core: {loaded}"
