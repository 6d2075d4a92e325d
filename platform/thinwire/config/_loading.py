"""Reading an experiment: YAML, dotted overrides, validation, errors in plain words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from thinwire.config._base import ConfigError
from thinwire.config._experiment import Experiment
from thinwire.config._overrides import override
from thinwire.config._yaml import read_yaml


def _dotted(loc: tuple[int | str, ...], raw: Any) -> str:
    # pydantic puts a tagged union's tag into the path (codec.select.topk.density) and
    # validator names for function-validated types; keep only keys present in the input.
    # A registered family's field (thinwire.registry) adds no tag: codec.transform.wavelet
    # is the field `wavelet` of kind wavelet, where the union would say wavelet.wavelet.
    parts: list[str] = []
    node = raw
    tagged: Any = None  # the mapping whose union tag was just skipped
    for i, item in enumerate(loc):
        following = loc[i + 1] if i + 1 < len(loc) else None
        if (
            isinstance(node, Mapping)
            and node.get("kind") == item
            and tagged is not node
            and (item not in node or following in node)
        ):
            tagged = node  # the tag comes first, even where a field shares its name
            continue
        if isinstance(node, Mapping) and item in node:
            node = node[item]
            parts.append(str(item))
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
            parts.append(f"[{item}]")
        elif isinstance(item, str) and (
            item.startswith(("function-", "list[", "tagged-union[", "literal["))
            or item in ("int", "float", "str", "bool", "list")
        ):
            continue
        else:
            parts.append(str(item))
            node = None
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] in ("union_tag_not_found", "missing_kind"):
        return "missing 'kind'"
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx", {})
        return f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    msg = msg[0].lower() + msg[1:] if msg else msg
    if error["type"] not in (
        "model_type",
        "union_tag_invalid",
        "union_tag_not_found",
        "unknown_kind",
        "plugin_import",
    ):
        value = error.get("input")
        if not isinstance(value, Mapping | list):
            msg += f", got {value!r}"
    return msg


def parse_config(raw: Any, source: str = "<config>") -> Experiment:
    """Validates an already-parsed YAML document.

    Raises:
        ConfigError: listing each invalid field as `dotted.path: problem, got value`.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(source, [f"expected a mapping of sections, got {type(raw).__name__}"])
    try:
        return Experiment.model_validate(raw)
    except ValidationError as exc:
        problems = [f"{_dotted(e['loc'], raw)}: {_message(e)}" for e in exc.errors()]
        raise ConfigError(source, problems) from None


def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    unset: Sequence[str] = (),
    notes: list[str] | None = None,
) -> Experiment:
    """Reads an experiment YAML file, applies `key=value` overrides and validates it.

    Args:
        path: the YAML file.
        overrides: dotted overrides such as `codec.select.density=0.001`
            (`thinwire.config._overrides` says what each form does).
        unset: dotted keys to remove, so their defaults apply.
        notes: receives what the overrides dropped (a switched kind's old fields).

    Raises:
        ConfigError: naming the file and each bad field (see `read_yaml` for what the
            reading itself refuses).
    """
    source = str(path)
    raw = read_yaml(path)
    if overrides or unset:
        try:
            raw, dropped = override(raw if isinstance(raw, dict) else {}, overrides, unset)
        except ValueError as exc:
            raise ConfigError(source, [str(exc)]) from None
        if notes is not None:
            notes.extend(dropped)
    return parse_config(raw, source)
