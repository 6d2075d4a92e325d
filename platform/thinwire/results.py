"""Run folders read back as a paper's results: runs grouped by configuration, mean ± std.

`load_runs` reads run folders (or sweep folders, whose runs it lists) and says what state
each is in; `group_runs` puts runs that differ only in their seed together and names each
group by the settings that tell it apart from the others (`density=0.01`); `group_rows` gives
one row of statistics per group. Accuracy is a fraction here; tables print it in percent.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from thinwire.metrics import RoundRecord, load_records, schema, summarize

__all__ = [
    "Group",
    "GroupRow",
    "RunFolder",
    "Stat",
    "bytes_to_accuracy",
    "common_target",
    "group_rows",
    "group_runs",
    "load_runs",
]

_NOT_CONFIG = ("name", "seed", "seeds", "sweep", "output")


@dataclass(frozen=True)
class RunFolder:
    """One run folder as compare sees it."""

    dir: Path
    name: str
    status: str  # finished, running, interrupted, failed
    error: str | None
    config: dict[str, Any]  # the resolved config.yaml
    records: list[RoundRecord]

    @property
    def complete(self) -> bool:
        """Finished, with every planned round recorded."""
        planned = self.config.get("train", {}).get("rounds")
        return self.status == "finished" and (planned is None or len(self.records) >= planned)


@dataclass(frozen=True)
class Group:
    """Runs of one configuration (they differ only in their seed)."""

    label: str  # the settings that set this group apart, or the experiment's name
    runs: list[RunFolder]


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation and count of one quantity over a group's runs."""

    mean: float
    std: float  # NaN for fewer than two values
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        """The statistics of the finite values."""
        kept = [v for v in values if not math.isnan(v)]
        if not kept:
            return cls(math.nan, math.nan, 0)
        std = statistics.stdev(kept) if len(kept) > 1 else math.nan
        return cls(statistics.fmean(kept), std, len(kept))


@dataclass(frozen=True)
class GroupRow:
    """A group's line of the results table."""

    label: str
    runs: int
    incomplete: int
    final_accuracy: Stat
    best_accuracy: Stat
    uplink_to_target: Stat  # cumulative uplink bytes when the target was first reached
    total_to_target: Stat  # the same, uplink plus downlink
    uplink_per_round: Stat
    downlink_per_round: Stat
    rounds: Stat


def load_runs(paths: Iterable[str | Path]) -> tuple[list[RunFolder], list[str]]:
    """Reads run folders (a sweep folder stands for its runs); returns them and notes.

    Failed runs and folders with no record are left out, each with a note saying why.

    Raises:
        FileNotFoundError: a path that is neither a run folder nor a sweep folder.
    """
    runs: list[RunFolder] = []
    notes: list[str] = []
    for path in map(Path, paths):
        for folder in _run_folders(path):
            run = _read_run(folder)
            if run.status == "failed":
                notes.append(f"{folder}: failed ({run.error or 'no error recorded'}); skipped")
            elif not run.records:
                notes.append(f"{folder}: {run.status}, no round recorded yet; skipped")
            else:
                if not run.complete:
                    notes.append(
                        f"{folder}: {run.status} after {len(run.records)} of "
                        f"{run.config.get('train', {}).get('rounds', '?')} rounds; marked *"
                    )
                runs.append(run)
    return runs, notes


def group_runs(runs: Sequence[RunFolder]) -> list[Group]:
    """Runs grouped by configuration, ignoring seed and name, in first-seen order."""
    keyed: dict[str, list[RunFolder]] = {}
    for run in runs:
        keyed.setdefault(_config_key(run.config), []).append(run)
    flat = {key: _flatten(members[0].config) for key, members in keyed.items()}
    differing = sorted(
        {k for f in flat.values() for k in f}
        - {k for k in set.intersection(*(set(f) for f in flat.values())) if _same(flat, k)}
    )
    groups = []
    for key, members in keyed.items():
        label = ", ".join(f"{_short(k, differing)}={_show(flat[key].get(k))}" for k in differing)
        groups.append(Group(label or _common_name(members), members))
    return groups


def bytes_to_accuracy(records: Sequence[RoundRecord], target: float) -> tuple[float, float]:
    """Cumulative (uplink, uplink + downlink) bytes at the first round reaching `target`.

    NaN, NaN when the run never reaches it.
    """
    for r in records:
        accuracy = float(r.get(schema.ACCURACY, math.nan))
        if not math.isnan(accuracy) and accuracy >= target:
            up = float(r[schema.CUM_BYTES_UP])
            return up, up + float(r[schema.CUM_BYTES_DOWN])
    return math.nan, math.nan


def common_target(groups: Sequence[Group]) -> float:
    """A target every group reaches on average: the lowest mean best accuracy, floored to 1%."""
    bests = [
        Stat.of(float(summarize(r.records)[schema.BEST_ACCURACY]) for r in g.runs).mean
        for g in groups
    ]
    finite = [b for b in bests if not math.isnan(b)]
    return math.floor(100 * min(finite)) / 100 if finite else math.nan


def group_rows(groups: Sequence[Group], target: float) -> list[GroupRow]:
    """One row of statistics per group (bytes to reach `target` accuracy among them)."""
    rows = []
    for group in groups:
        summaries = [summarize(r.records) for r in group.runs]
        reached = [bytes_to_accuracy(r.records, target) for r in group.runs]
        rows.append(
            GroupRow(
                label=group.label,
                runs=len(group.runs),
                incomplete=sum(not r.complete for r in group.runs),
                final_accuracy=Stat.of(s[schema.FINAL_ACCURACY] for s in summaries),
                best_accuracy=Stat.of(s[schema.BEST_ACCURACY] for s in summaries),
                uplink_to_target=Stat.of(up for up, _ in reached),
                total_to_target=Stat.of(total for _, total in reached),
                uplink_per_round=Stat.of(
                    s[schema.TOTAL_BYTES_UP] / s[schema.ROUNDS] for s in summaries
                ),
                downlink_per_round=Stat.of(
                    s[schema.TOTAL_BYTES_DOWN] / s[schema.ROUNDS] for s in summaries
                ),
                rounds=Stat.of(s[schema.ROUNDS] for s in summaries),
            )
        )
    return rows


def _run_folders(path: Path) -> list[Path]:
    if (path / "metrics.jsonl").is_file() or (path / "summary.json").is_file():
        return [path]
    if path.is_dir():
        inner = sorted(p for p in path.iterdir() if p.is_dir() and (p / "config.yaml").is_file())
        if inner:
            return inner
    raise FileNotFoundError(f"{path} is not a thinwire run folder (no metrics.jsonl)")


def _read_run(folder: Path) -> RunFolder:
    summary = _json(folder / "summary.json")
    status = summary.get(schema.STATUS)
    records = load_records(folder) if (folder / "metrics.jsonl").is_file() else []
    if not isinstance(status, str):
        # folders written before runs recorded a status: an empty summary was a failure
        status = "finished" if summary.get(schema.ROUNDS) else "failed"
    config_path = folder / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    error = summary.get(schema.ERROR)
    return RunFolder(
        dir=folder,
        name=str(config.get("name", folder.name)) if isinstance(config, dict) else folder.name,
        status=status,
        error=error if isinstance(error, str) else None,
        config=config if isinstance(config, dict) else {},
        records=records,
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _config_key(config: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in config.items() if k not in _NOT_CONFIG}
    return json.dumps(kept, sort_keys=True, default=str)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, Mapping):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if not prefix and key in _NOT_CONFIG:
                continue
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def _same(flat: Mapping[str, Mapping[str, Any]], key: str) -> bool:
    values = [json.dumps(f.get(key), sort_keys=True, default=str) for f in flat.values()]
    return len(set(values)) == 1


def _short(key: str, keys: Sequence[str]) -> str:
    """The shortest dotted suffix of `key` that no other differing key ends with."""
    parts = key.split(".")
    for size in range(1, len(parts) + 1):
        tail = ".".join(parts[-size:])
        if tail != "kind" and not any(o != key and o.endswith("." + tail) for o in keys):
            return tail
    return key


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _common_name(runs: Sequence[RunFolder]) -> str:
    names = {r.name for r in runs}
    if len(names) == 1:
        return names.pop()
    seedless = {n.rsplit("-seed_", 1)[0] for n in names}
    return seedless.pop() if len(seedless) == 1 else runs[0].name
