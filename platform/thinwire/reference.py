"""The configuration reference, generated from the schema itself.

Every section of `thinwire.config.Experiment` and every kind of a tagged union becomes one
table: each field's type, default, allowed range and docstring (the docstring written under
the field in the config classes). `thinwire schema [FIELD]` prints it; `reference_markdown`
is `docs/config-reference.md`, which a test keeps identical to what the schema says. The
page ends with the on-disk layout each data set reads from `data.root`.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

import thinwire.learning.datasets  # noqa: F401  (registers the data sets' layouts)
from thinwire.config import Experiment
from thinwire.registry import DATASETS, NameRegistry, Registry

__all__ = ["Entry", "SectionDoc", "find", "reference_markdown", "sections"]

# What the config's validator functions allow, by function name (thinwire.config._base and
# thinwire.config._runtime), so the reference can state it.
_VALIDATED = {
    "_unit_interval": "(0, 1]",
    "_probability": "[0, 1]",
    "_positive": "> 0",
    "_non_negative": ">= 0",
    "_device": "auto, cpu, cuda, cuda:<index>",
    "_peer_address": "host:port",
    "_peer_pattern": "host:port containing {i}",
    "_listen_address": "host:port; {port} and {i} are filled in",
}


class Entry(NamedTuple):
    """One field of a section."""

    path: str  # dotted: codec.select.density
    type: str
    default: str
    range: str
    doc: str


class SectionDoc(NamedTuple):
    """One section (or one kind of a tagged union) and its fields."""

    path: str  # dotted; "" for the top level
    kind: str | None  # the kind this table describes, for a tagged union
    doc: str  # the section class's docstring
    entries: list[Entry]


def sections() -> list[SectionDoc]:
    """Every section of the schema, depth first, each union kind as its own section."""
    return list(_walk(Experiment, "", None))


def find(field: str) -> list[SectionDoc]:
    """The sections at or under dotted `field`, or the one entry it names.

    Raises:
        KeyError: no section or field has that path (the message suggests close ones).
    """
    everything = sections()
    field = field.strip(".")
    inside = [s for s in everything if s.path == field or s.path.startswith(field + ".")]
    if inside:
        return inside
    for section in everything:
        hits = [e for e in section.entries if e.path == field]
        if hits:
            return [section._replace(entries=hits)]
    import difflib

    paths = sorted({e.path for s in everything for e in s.entries} | {s.path for s in everything})
    close = difflib.get_close_matches(field, paths, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise KeyError(f"no config field {field!r}{hint}")


def reference_markdown() -> str:
    """The whole reference as a Markdown page (`docs/config-reference.md`)."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from the schema (`thinwire schema --markdown > docs/config-reference.md`;",
        "a test checks that this page is current). One table per section, and one per kind",
        "of a section that has kinds: each field's type, default, allowed range and meaning.",
        "`thinwire schema FIELD` prints the same for one field or section.",
        "",
    ]
    for section in sections():
        title = f"`{section.path}`" if section.path else "Top level"
        if section.kind is not None:
            title += f", kind `{section.kind}`"
        lines += [f"## {title}", "", section.doc, ""]
        if section.entries:
            lines += ["| field | type | default | range | meaning |", "|---|---|---|---|---|"]
            for e in section.entries:
                name = e.path.rsplit(".", 1)[-1]
                cells = [f"`{name}`", _cell(e.type), _cell(e.default), _cell(e.range), e.doc]
                lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
            lines.append("")
    lines += [
        "## Data layouts",
        "",
        "Every registered `data.dataset`, and what `data.root` must hold for it.",
        "",
    ]
    for name, entry in DATASETS.entries().items():
        lines += [f"- **{name}**: {entry.layout}"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return f"`{text}`" if text else ""


def _walk(model: type[BaseModel], path: str, kind: str | None) -> Iterator[SectionDoc]:
    entries = []
    nested: list[tuple[str, list[type[BaseModel]]]] = []
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        annotation = _annotation(field)
        members = _models(annotation)
        doc = _doc(field)
        if not doc and len(members) == 1 and _kind(members[0]) is None:
            doc = _clean(inspect.getdoc(members[0]) or "")  # a plain section: its own doc
        elif not doc and members:
            doc = "One of the kinds below."
        entries.append(Entry(dotted, _type(annotation), _default(field), _range(field), doc))
        if members:
            nested.append((dotted, members))
    yield SectionDoc(path, kind, _clean(inspect.getdoc(model) or ""), entries)
    for dotted, members in nested:
        tagged = len(members) > 1 or _kind(members[0]) is not None
        for member in members:
            yield from _walk(member, dotted, _kind(member) if tagged else None)


def _kind(model: type[BaseModel]) -> str | None:
    """The kinds a section configures ("fp16 | bf16" for one of two), None for no kind."""
    field = model.model_fields.get("kind")
    if field is None:
        return None
    if typing.get_origin(field.annotation) is typing.Literal:
        return " | ".join(str(v) for v in typing.get_args(field.annotation))
    return str(field.default)


def _annotation(field: FieldInfo) -> Any:
    # pydantic moves a field's Annotated metadata (a Registry among it) onto the FieldInfo.
    if any(isinstance(item, Registry | NameRegistry) for item in field.metadata):
        return typing.Annotated[(field.annotation, *field.metadata)]
    return field.annotation


def _members(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        registry = next((m for m in metadata if isinstance(m, Registry)), None)
        if registry is not None:
            return list(registry.sections())  # every kind registered now, plugins included
        return _members(inner)
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _models(annotation: Any) -> list[type[BaseModel]]:
    return [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        if any(isinstance(m, Registry) for m in metadata):
            return "section, kind " + " | ".join(str(_kind(m)) for m in _models(annotation))
        names = next((m for m in metadata if isinstance(m, NameRegistry)), None)
        if names is not None:
            return " | ".join(names.entries())  # every name registered now, plugins included
        bound = _bounds(metadata)
        return f"{_type(inner)} ({bound})" if bound else _type(inner)
    if origin in (typing.Union, types.UnionType):
        models = _models(annotation)
        rest = [_plain(a) for a in typing.get_args(annotation) if not _models(a)]
        parts = [_type(m) for m in rest]
        if len(models) > 1 or (models and _kind(models[0]) is not None):
            parts.insert(0, "section, kind " + " | ".join(str(_kind(m)) for m in models))
        elif models:
            parts.insert(0, "section")
        return " | ".join("null" if p == "NoneType" else p for p in parts)
    if origin is typing.Literal:
        return " | ".join(str(v) for v in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return f"list of {_type(item)}"
    if origin is dict:
        key, value = typing.get_args(annotation) or (Any, Any)
        return f"mapping of {_type(key)} to {_type(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        kind = _kind(annotation)
        return f"section, kind {kind}" if kind is not None else "section"
    if annotation is Path:
        return "path"
    if annotation is Any:
        return "any value"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(str(v.value) for v in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _plain(annotation: Any) -> Any:
    """The annotation without its constraints (they go to the range column)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def _bounds(metadata: Sequence[Any]) -> str:
    """Constraints as `[1, 100)`, `>= 0`, `(0, 1]`, or a validator's description."""
    low = high = ""
    notes = []
    for item in metadata:
        if isinstance(item, FieldInfo):
            return _bounds(item.metadata)
        if isinstance(item, annotated_types.Ge):
            low = f"[{_number(item.ge)}"
        elif isinstance(item, annotated_types.Gt):
            low = f"({_number(item.gt)}"
        elif isinstance(item, annotated_types.Le):
            high = f"{_number(item.le)}]"
        elif isinstance(item, annotated_types.Lt):
            high = f"{_number(item.lt)})"
        elif isinstance(item, annotated_types.MinLen):
            notes.append(f"at least {item.min_length} item(s)")
        elif isinstance(item, annotated_types.MaxLen):
            notes.append(f"at most {item.max_length} characters")
        else:
            func = getattr(item, "func", None)
            pattern = getattr(item, "pattern", None)
            if func is not None:
                notes.append(_VALIDATED.get(func.__name__, "checked on load"))
            elif pattern is not None:
                notes.append(f"matches {pattern}")
    if low and high:
        notes.insert(0, f"{low}, {high}")
    elif low:
        notes.insert(0, (">= " if low[0] == "[" else "> ") + low[1:])
    elif high:
        notes.insert(0, ("<= " if high[-1] == "]" else "< ") + high[:-1])
    return ", ".join(notes)


def _number(value: Any) -> str:
    if isinstance(value, int) and value >= 2**32 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def _range(field: FieldInfo) -> str:
    """The field's constraints; for an optional value, those of the value."""
    bounds = _bounds(field.metadata)
    if bounds or typing.get_origin(field.annotation) not in (typing.Union, types.UnionType):
        return bounds
    for arg in typing.get_args(field.annotation):
        if typing.get_origin(arg) is typing.Annotated:
            return _bounds(typing.get_args(arg)[1:])
    return ""


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        kind = getattr(value, "kind", None)
        return f"kind {kind}" if kind is not None else "defaults below"
    if isinstance(value, Path):
        return str(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _doc(field: FieldInfo) -> str:
    return _clean(field.description or "")


def _clean(text: str) -> str:
    return " ".join(text.split())
