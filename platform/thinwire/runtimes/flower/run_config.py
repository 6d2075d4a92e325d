"""An experiment as Flower run-config keys, one per field, so `flwr run -c` can set one.

The generated app's `[tool.flwr.app.config]` holds the experiment's YAML (the base) and,
beside it, every field of the experiment as its own dotted key (`"train.rounds" = 60`), so

    flwr run . local -c 'train.rounds=10 codec.select.density=0.001'

changes just those fields. Flower's run config holds only booleans, numbers and strings,
so a list, a mapping or a null travels as its YAML text (`"model.hidden" = "[64]"`).
Reading applies every key whose value differs from the base's, as `--set` would (setting a
`kind` replaces its section), then validates the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from thinwire.config import Experiment, set_field

__all__ = ["apply_field_keys", "field_keys"]

RunValue = bool | int | float | str


def field_keys(experiment: Experiment) -> dict[str, RunValue]:
    """Every field of `experiment` as a dotted run-config key."""
    keys: dict[str, RunValue] = {}
    _flatten(experiment.model_dump(mode="json"), "", keys)
    return keys


def apply_field_keys(
    raw: dict[str, Any], run_config: Mapping[str, Any], reserved: tuple[str, ...]
) -> dict[str, Any]:
    """`raw` with every run-config field key that differs from it applied (in place).

    Keys are applied in the order Flower gives them, after a `kind` key of the same section,
    so a switched kind drops the old kind's fields before the new fields are set.

    Raises:
        ValueError: a key that is not an experiment field, or a value that is not valid YAML.
    """
    base: dict[str, RunValue] = {}
    _flatten(raw, "", base)
    changed = [
        (key, value)
        for key, value in run_config.items()
        if key not in reserved and base.get(key, _MISSING) != value
    ]
    changed.sort(key=lambda item: (not item[0].endswith(".kind"), item[0].count(".")))
    for key, value in changed:
        set_field(raw, key, _parse(key, value, base.get(key, _MISSING)))
    return raw


_MISSING = object()


def _flatten(tree: Any, prefix: str, out: dict[str, RunValue]) -> None:
    if isinstance(tree, Mapping) and tree:
        for key, value in tree.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(tree, bool | int | float | str):
        out[prefix] = tree
    else:  # a list, an empty mapping or a null: YAML text
        text = yaml.safe_dump(tree, default_flow_style=True).strip()
        out[prefix] = text.removesuffix("...").strip()


def _parse(key: str, value: Any, base: Any) -> Any:
    if not isinstance(value, str) or isinstance(base, str) and not _is_yaml_text(key, base):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ValueError(f"run config {key!r}: {value!r} is not valid YAML ({exc})") from None


def _is_yaml_text(key: str, base: str) -> bool:
    """Whether the base value of `key` is YAML text (a list, mapping or null), not a string."""
    del key
    text = base.strip()
    return text.startswith(("[", "{")) or text in ("null", "")
