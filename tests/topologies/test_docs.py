"""Docstring examples run, and every gRPC call in the package carries a deadline."""

from __future__ import annotations

import ast
import doctest
import importlib
from pathlib import Path

import pytest

import thinwire.topologies

PACKAGE = Path(thinwire.topologies.__file__).parent
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py")
    if p.stem != "__init__" and not p.stem.endswith(("_pb2", "_pb2_grpc"))
)
PACKAGES = ["", *sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"thinwire.topologies.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def _stub_calls(name: str) -> list[ast.Call]:
    """The gRPC stub invocations (`.future`, `.with_call`, `.__call__`) in a module."""
    tree = ast.parse((PACKAGE / f"{name.replace('.', '/')}.py").read_text())
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"future", "with_call", "__call__"}
    ]


@pytest.mark.parametrize("name", MODULES)
def test_stub_calls_pass_a_timeout(name):
    for node in _stub_calls(name):
        keywords = {k.arg for k in node.keywords}
        assert "timeout" in keywords, (
            f"{name}:{node.lineno} calls {node.func.attr} without timeout="
        )


def test_the_timeout_check_sees_the_transports_push():
    # Guards the check above against going blind (a renamed call would match nothing).
    assert _stub_calls("transport.client")


@pytest.mark.parametrize("sub", PACKAGES)
def test_public_names_are_exported(sub):
    package = importlib.import_module(".".join(filter(None, ("thinwire.topologies", sub))))
    for name in package.__all__:
        assert hasattr(package, name), name
