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
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Sequence

__all__ = ["ENTRY_POINT_GROUP", "PluginError", "import_modules", "load_entry_points"]

ENTRY_POINT_GROUP = "thinwire.plugins"

_entry_points_loaded = False


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
    for index, name in enumerate(names):
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
