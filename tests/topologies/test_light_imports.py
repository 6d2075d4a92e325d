"""The graphs and the gossip methods import without the transport, TLS or plotting libraries.

Each import runs in a fresh interpreter, so what another test loaded cannot hide a heavy
import; the AST check names the module that breaks the layering, which `sys.modules` cannot.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import thinwire.topologies

PACKAGE = Path(thinwire.topologies.__file__).parent
HEAVY = [
    "grpc",
    "cryptography",
    "matplotlib",
    "thinwire.topologies.transport",
    "thinwire.topologies.runtime",
]
# Which subpackages each one's modules may not import: round logic knows nothing of how
# bytes travel, and the graph maths nothing of the methods built on it.
FORBIDDEN = {
    "graph": {"methods", "transport", "runtime"},
    "methods": {"transport", "runtime"},
    "transport": {"methods", "runtime"},
}
LAZY = {("graph/summary.py", "matplotlib")}
"""Heavy imports allowed inside a function: `draw_graph` loads matplotlib when it draws."""


@pytest.mark.parametrize(
    "module", ["thinwire.topologies", "thinwire.topologies.graph", "thinwire.topologies.methods"]
)
def test_importing_loads_no_transport_tls_or_plotting(module):
    probe = (
        f"import sys, json, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == [], f"importing {module} loads them"


def _imported(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("sub", sorted(FORBIDDEN))
def test_subpackages_import_only_down(sub):
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted((PACKAGE / sub).glob("*.py"))
        for name in sorted(_imported(path))
        if name.split(".")[:2] == ["thinwire", "topologies"]
        and len(name.split(".")) > 2
        and name.split(".")[2] in FORBIDDEN[sub]
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("sub", ["graph", "methods"])
def test_graphs_and_methods_import_no_grpc_tls_or_plotting_even_lazily(sub):
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted((PACKAGE / sub).glob("*.py"))
        for name in sorted(_imported(path))
        if name.split(".")[0] in {"grpc", "cryptography", "matplotlib"}
        and (str(path.relative_to(PACKAGE)), name.split(".")[0]) not in LAZY
    ]
    assert not offenders, offenders
