"""Repetitions and grids: one experiment, expanded into the runs of a sweep.

An experiment with `seeds: [0, 1, 2]` and `sweep: {codec.select.density: [0.01, 0.001]}`
stands for 2 x 3 = 6 runs. `sweep_points` expands it: every combination of the grid's
values, each once per seed, applied to the file as `--set` overrides would be (a `kind`
switches the section), validated, and named by what sets it apart:
`quickstart-density_0.01-seed_1`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import yaml

from thinwire.config._base import ConfigError
from thinwire.config._experiment import Experiment
from thinwire.config._loading import parse_config
from thinwire.config._overrides import parse_override, set_field

__all__ = ["SweepPoint", "override_name", "parse_sweep_options", "sweep_points"]

_NAME_LIMIT = 100


class SweepPoint(NamedTuple):
    """One run of a sweep."""

    name: str  # the run's name and its folder's
    settings: dict[str, Any]  # dotted key -> value that sets this run apart (seed included)
    experiment: Experiment


def sweep_points(experiment: Experiment, *, source: str = "<config>") -> list[SweepPoint]:
    """The runs `experiment.seeds` and `experiment.sweep` stand for, grid-major.

    An experiment with neither is one point, itself.

    Raises:
        ConfigError: a point does not validate (the message names the point's settings).
    """
    if experiment.seeds is None and experiment.sweep is None:
        return [SweepPoint(experiment.name, {}, experiment)]
    raw: dict[str, Any] = experiment.model_dump(mode="json", exclude_unset=True)
    raw.pop("seeds", None)
    grid: dict[str, list[Any]] = raw.pop("sweep", None) or {}
    seeds = experiment.seeds if experiment.seeds is not None else [experiment.seed]
    points = []
    for values in itertools.product(*grid.values()):
        for seed in seeds:
            settings = {**dict(zip(grid, values, strict=True)), "seed": seed}
            point: dict[str, Any] = yaml.safe_load(yaml.safe_dump(raw))
            name = override_name(experiment.name, settings)
            where = f"{source} (sweep point {_describe(settings)})"
            try:
                for key, value in settings.items():
                    set_field(point, key, value)
            except ValueError as exc:
                raise ConfigError(where, [str(exc)]) from None
            point["name"] = name
            points.append(SweepPoint(name, settings, parse_config(point, where)))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise ConfigError(source, ["two sweep points share a name; their values look alike"])
    return points


def parse_sweep_options(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--sweep key=v1,v2` options as a grid (values parsed as YAML, commas in [ ] kept).

    Raises:
        ValueError: an option that is not `dotted.key=values`.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, text = item.split("=", 1) if "=" in item else (item, "")
        parse_override(f"{key}=0")  # the key's form
        values = [yaml.safe_load(v) for v in _split_top_level(text) if v.strip()]
        if not values:
            raise ValueError(f"--sweep {item!r}: give values, such as {key}=0.01,0.001")
        grid[key.strip()] = values
    return grid


def override_name(name: str, settings: Mapping[str, Any]) -> str:
    """`name` extended by each setting: `quickstart-density_0.001-optimizer_adam`.

    Where the run folder goes (`output`) does not set a run apart and is left out.
    """
    parts = [name] + [
        f"{_label(k)}_{_text(v)}" for k, v in settings.items() if k.split(".")[0] != "output"
    ]
    full = "-".join(parts)
    if len(full) <= _NAME_LIMIT:
        return full
    digest = hashlib.sha1(full.encode()).hexdigest()[:10]
    return f"{full[: _NAME_LIMIT - 11]}-{digest}"


def _label(key: str) -> str:
    parts = key.split(".")
    if len(parts) > 1 and (parts[-1] == "kind" or parts[-1].isdigit()):
        return parts[-2] + ("" if parts[-1] == "kind" else parts[-1])
    return parts[-1]


def _text(value: Any) -> str:
    if value is None:
        text = "none"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, list):
        text = "x".join(_text(v) for v in value)
    elif isinstance(value, dict):
        text = "_".join(f"{k}_{_text(v)}" for k, v in value.items())
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text).strip("_") or "none"


def _describe(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def _split_top_level(text: str) -> list[str]:
    """Splits at commas outside brackets and braces."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]
