"""Loading plugins: modules that register kinds of their own when imported.

Two ways in, both before an experiment is validated:

- an experiment file's `plugins:` list names importable modules (`plugins:
  [my_lab.codecs]`); `thinwire.config` imports them before it validates the rest of the
  file, through `import_modules`;
- installed distributions declare modules under the `thinwire.plugins` entry-point group;
  `load_entry_points` imports them once, the first time any registry is consulted.

A plugin module registers its kinds at import (`SELECTORS.register(...)`, see
`thinwire.registry`). This is the one place thinwire imports a module by name: the name
selects code to load, never a component (components are chosen by registered `kind`,
STYLE rule 12). Only modules the user installed or put on the path can be named.

Where the experiment comes from someone else (a Flower SuperNode validates the run config
the server sends), `allowing(names)` narrows `plugins:` to the modules its operator allowed
(`thinwire client --allow-plugin NAME`) and the installed entry points' modules: otherwise
a run config could make every client import any installed module.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "allowing",
    "import_modules",
    "load_entry_points",
]

ENTRY_POINT_GROUP = "thinwire.plugins"

_entry_points_loaded = False

_allowed: ContextVar[frozenset[str] | None] = ContextVar("thinwire_plugins_allowed", default=None)
"""The modules a `plugins:` list may name here, or None for any importable module."""


class PluginError(ImportError):
    """A plugin module that could not be imported; `str()` names it and why."""

    def __init__(self, module: str, reason: str, *, index: int | None = None) -> None:
        self.module = module
        self.reason = reason
        self.index = index  # its position in a `plugins:` list
        super().__init__(f"cannot import plugin module {module!r}: {reason}")


def import_modules(names: Sequence[str]) -> None:
    """Imports each plugin module of an experiment's `plugins:` list, in order.

    Raises:
        PluginError: for the first module that is missing or fails while importing.
    """
    allowed = _allowed.get()
    for index, name in enumerate(names):
        if allowed is not None and name not in allowed | _entry_point_modules():
            raise PluginError(
                name,
                "this node does not allow it (start the client with --allow-plugin "
                f"{name}, or install it as a {ENTRY_POINT_GROUP!r} entry point)",
                index=index,
            )
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            reason = "no such module" if exc.name == name else f"it needs {exc.name!r}"
            raise PluginError(name, reason, index=index) from exc
        except Exception as exc:  # a plugin's own bug: name the plugin, keep the cause
            raise PluginError(name, f"{type(exc).__name__}: {exc}", index=index) from exc


def load_entry_points() -> None:
    """Imports every `thinwire.plugins` entry point, once per process.

    Raises:
        PluginError: for an entry point that fails to import (it is not retried).
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # first: a plugin that validates at import must not recurse
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as exc:
            raise PluginError(
                entry.value, f"entry point {entry.name!r}: {type(exc).__name__}: {exc}"
            ) from exc


@contextmanager
def allowing(names: Iterable[str]) -> Iterator[None]:
    """Within the block, a `plugins:` list may name only `names` and entry-point modules.

    Example:
        >>> with allowing(["my_lab.codecs"]):
        ...     pass  # validate an experiment that arrived from elsewhere
    """
    token = _allowed.set(frozenset(names))
    try:
        yield
    finally:
        _allowed.reset(token)


def _entry_point_modules() -> frozenset[str]:
    """The modules the installed `thinwire.plugins` entry points name."""
    return frozenset(
        entry.module for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )
