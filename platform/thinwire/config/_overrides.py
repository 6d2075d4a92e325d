"""Dotted overrides of an experiment's raw YAML: `--set`, `--unset` and sweep points.

An override edits the document before validation, the way a user would edit the file:

- `train.rounds=9` sets a field; the value is parsed as YAML (`[64, 64]`, `{kind: adam}`).
- a new `kind` (`train.optimizer.kind` set to `adam`) switches the section: it becomes
  `{kind: adam}`, since the old kind's fields (`momentum`) mean nothing to the new one; a
  note names the fields that were dropped.
- `model.hidden.0=128` indexes a list (the schema's default list when the file has none).
- `runtime.checkpoint_every=5` in a file without a `runtime` section starts from the
  default section's kind (`simulation`), as if the file had spelled it out.
- `--unset codec` (or a list item, `--unset model.hidden.1`), or `codec=null` for a field
  that cannot be null, removes the key, so the default applies; `privacy=null` sets null
  where null means "none" (privacy off).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Sequence
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel

from thinwire.config._experiment import Experiment
from thinwire.registry import Registry

__all__ = ["Overridden", "apply_overrides", "override", "parse_override", "set_field"]

_KEY = re.compile(r"[A-Za-z_]\w*(\.(\d+|[A-Za-z_]\w*))*")


class Overridden(NamedTuple):
    """A document after overrides, and notes on what they dropped."""

    raw: dict[str, Any]
    notes: list[str]


def parse_override(item: str) -> tuple[str, Any]:
    """Splits `dotted.key=value` and parses the value as YAML (empty means null).

    Raises:
        ValueError: `item` is not of that form.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not _KEY.fullmatch(key):
        raise ValueError(
            f"override {item!r} is not of the form dotted.key=value "
            "(list items by index: model.hidden.0=128)"
        )
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise ValueError(f"override {item!r}: the value is not valid YAML ({exc})") from None
    return key, value


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Returns a copy of `raw` with `key=value` overrides applied (see the module docstring).

    Raises:
        ValueError: an override that is malformed, walks into a value, or indexes past a
            list's end.
    """
    return override(raw, overrides).raw


def override(
    raw: dict[str, Any], overrides: Sequence[str] = (), unset: Sequence[str] = ()
) -> Overridden:
    """`apply_overrides`, then removes each dotted key of `unset`; also returns the notes.

    Raises:
        ValueError: as `apply_overrides`, or an `unset` key that is not dotted.
    """
    result: dict[str, Any] = yaml.safe_load(yaml.safe_dump(raw)) or {}
    notes: list[str] = []
    for item in overrides:
        key, value = parse_override(item)
        notes += set_field(result, key, value)
    for key in unset:
        if not _KEY.fullmatch(key.strip()):
            raise ValueError(f"--unset {key!r} is not a dotted key")
        _remove(result, key.strip().split("."))
    return Overridden(result, notes)


def set_field(raw: dict[str, Any], key: str, value: Any) -> list[str]:
    """Sets dotted `key` to `value` in `raw` (in place); returns notes on dropped fields.

    Raises:
        ValueError: the path walks into a value or past a list's end.
    """
    parts = key.split(".")
    node: Any = raw
    schema: Any = Experiment
    for i, part in enumerate(parts[:-1]):
        field = _field(schema, part, node)
        node = _step(node, part, ".".join(parts[: i + 1]), item=key, start=field.default)
        schema = field.annotation
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, key)] = value
        return []
    if value is None and not _accepts_none(_field(schema, last, node).annotation):
        node.pop(last, None)  # no null here: removing the key restores the default
        return []
    if last == "kind" and node.get("kind") not in (None, value):
        dropped = sorted(k for k in node if k != "kind")
        node.clear()
        node["kind"] = value
        if dropped:
            section = ".".join(parts[:-1])
            return [f"{section}: kind is now {value!r}; dropped {', '.join(dropped)}"]
        return []
    node[last] = value
    return []


def _step(node: Any, part: str, where: str, *, item: str, start: Any) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, item)]
    if not isinstance(node, dict):
        raise ValueError(f"override {item!r}: {where.rsplit('.', 1)[0]} is a value, not a section")
    child = node.get(part)
    if child is None:
        child = _starting(start)
        node[part] = child
    if not isinstance(child, dict | list):
        raise ValueError(f"override {item!r}: {where} is a value, not a section")
    return child


def _index(node: list[Any], part: str, item: str) -> int:
    if not part.isdigit():
        raise ValueError(f"override {item!r}: {part!r} is not a list index")
    index = int(part)
    if index >= len(node):
        raise ValueError(f"override {item!r}: index {index} is past the list's {len(node)} items")
    return index


def _remove(raw: dict[str, Any], parts: list[str]) -> None:
    node: Any = raw
    for part in parts[:-1]:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return  # nothing there: already the default
    last = parts[-1]
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        del node[int(last)]


# --- what the schema says about a path -------------------------------------------------


def _members(annotation: Any) -> list[Any]:
    """The types an annotation admits (unions and Annotated unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        registry = next((m for m in metadata if isinstance(m, Registry)), None)
        return list(registry.sections()) if registry is not None else _members(inner)
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _accepts_none(schema: Any) -> bool:
    return schema is _NULLABLE or any(m is type(None) for m in _members(schema))


_NULLABLE = object()  # the schema of a path it does not know: null stays null


class _Field(NamedTuple):
    annotation: Any  # what the schema admits at this path (_NULLABLE when unknown)
    default: Any  # the schema's default value there (None when required or unknown)


def _field(schema: Any, part: str, node: Any) -> _Field:
    """Field `part` under `schema`, in the model of the node's kind."""
    if part.isdigit():
        args = [typing.get_args(m) for m in _members(schema) if typing.get_origin(m) is list]
        return _Field(args[0][0] if args and args[0] else _NULLABLE, None)
    models = [m for m in _members(schema) if isinstance(m, type) and issubclass(m, BaseModel)]
    kind = node.get("kind") if isinstance(node, dict) else None
    model = next((m for m in models if kind in _kind_of(m)), models[0] if models else None)
    field = model.model_fields.get(part) if model is not None else None
    if field is None:
        return _Field(_NULLABLE, None)
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    annotation: Any = field.annotation
    if any(isinstance(item, Registry) for item in field.metadata):
        # pydantic keeps a field's Annotated metadata, the registry, on the FieldInfo.
        annotation = typing.Annotated[(annotation, *field.metadata)]
    return _Field(annotation, default)


def _kind_of(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("kind")
    if field is not None and typing.get_origin(field.annotation) is typing.Literal:
        return typing.get_args(field.annotation)  # the kinds it admits
    return ()


def _starting(default: Any) -> dict[str, Any] | list[Any]:
    """What a section missing from the file starts as: its default kind, or default list."""
    if isinstance(default, BaseModel):
        kind = getattr(default, "kind", None)
        return {"kind": kind} if kind is not None else {}
    if isinstance(default, list):
        return list(yaml.safe_load(yaml.safe_dump(default)))
    return {}
