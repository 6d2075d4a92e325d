"""Figures of runs: one run's `curves.png`, and groups of runs as mean curves with bands.

Accuracy is plotted in percent, as every table prints it. Byte axes are logarithmic (a
compressed run and its dense baseline differ by orders of magnitude). A group's line is the
mean over its runs (seeds) at each round, its band the mean ± one standard deviation; against
bytes, a round sits at the group's mean cumulative bytes of that round.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

from thinwire.metrics import schema
from thinwire.metrics.schema import RoundRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_comparison", "plot_groups", "plot_run"]

_Curve = tuple[list[float], list[float], list[float]]  # x, mean, std
_Records = Sequence[RoundRecord]

_CUM_BYTES_TOTAL = "cum_bytes_total"  # an x axis: cumulative uplink plus downlink bytes


def plot_run(records: _Records, path: Path, *, title: str = "") -> None:
    """One run's four panels: accuracy (rounds, uplink bytes), loss, bytes per round."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (by_round, by_bytes), (loss, traffic) = axes
    rounds = [float(r[schema.ROUND]) for r in records]
    accuracy = _evaluated(records, schema.ACCURACY)
    by_round.plot(*_pairs(rounds, accuracy, scale=100), marker=".", markersize=3)
    cum_up = [float(r[schema.CUM_BYTES_UP]) for r in records]
    by_bytes.plot(*_pairs(cum_up, accuracy, scale=100), marker=".", markersize=3)
    _label(by_round, "round", "test accuracy (%)")
    _label(by_bytes, "cumulative uplink bytes", "test accuracy (%)", log_x=any(cum_up))
    loss.plot(*_pairs(rounds, _evaluated(records, schema.LOSS)), label="test")
    loss.plot(rounds, [float(r[schema.TRAIN_LOSS]) for r in records], label="train (clients)")
    _label(loss, "round", "loss")
    loss.legend(fontsize=8)
    for key, name in ((schema.BYTES_UP, "uplink"), (schema.BYTES_DOWN, "downlink")):
        values = [float(r[key]) for r in _rows(records)]
        if any(values):
            traffic.plot(rounds, values, label=name)
    _label(traffic, "round", "bytes per round", log_y=True)
    if traffic.get_legend_handles_labels()[0]:
        traffic.legend(fontsize=8)
    _save(plt, fig, path, title)


def plot_groups(groups: Mapping[str, Sequence[_Records]], path: Path, *, title: str = "") -> None:
    """Mean curves with ± std bands per group.

    Panels: accuracy against rounds, cumulative uplink bytes and cumulative total bytes;
    test loss against rounds. `groups` maps a line's label to its runs' records.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (by_round, by_up), (by_total, loss) = axes
    for label, runs in groups.items():
        color = by_round.plot([], [])[0].get_color()
        for ax, x_key, y_key, scale in (
            (by_round, schema.ROUND, schema.ACCURACY, 100.0),
            (by_up, schema.CUM_BYTES_UP, schema.ACCURACY, 100.0),
            (by_total, _CUM_BYTES_TOTAL, schema.ACCURACY, 100.0),
            (loss, schema.ROUND, schema.LOSS, 1.0),
        ):
            x, mean, std = _mean_curve(runs, x_key, y_key)
            if not x or (x_key != schema.ROUND and not any(x)):
                continue
            shown = [m * scale for m in mean]
            ax.plot(x, shown, color=color, label=label if ax is by_round else None)
            if len(runs) > 1:
                low = [(m - s) * scale for m, s in zip(mean, std, strict=True)]
                high = [(m + s) * scale for m, s in zip(mean, std, strict=True)]
                ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
    _label(by_round, "round", "test accuracy (%)")
    _label(by_up, "cumulative uplink bytes", "test accuracy (%)", log_x=True)
    _label(by_total, "cumulative bytes, uplink + downlink", "test accuracy (%)", log_x=True)
    _label(loss, "round", "test loss")
    handles, labels = by_round.get_legend_handles_labels()
    if len(labels) > 1:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=9)
        fig.tight_layout(rect=(0, 0.02 + 0.03 * math.ceil(len(labels) / 3), 1, 0.97))
    _save(plt, fig, path, title, layout=len(labels) <= 1)


def plot_comparison(runs: Mapping[str, _Records], path: Path, *, title: str = "") -> None:
    """`plot_groups` with one run per line."""
    plot_groups({label: [records] for label, records in runs.items()}, path, title=title)


def _mean_curve(runs: Sequence[_Records], x_key: str, y_key: str) -> _Curve:
    by_round: dict[int, list[tuple[float, float]]] = {}
    for records in runs:
        for r in _rows(records):
            y = float(r.get(y_key, math.nan))
            if math.isnan(y):
                continue
            x = (
                float(r[schema.CUM_BYTES_UP]) + float(r[schema.CUM_BYTES_DOWN])
                if x_key == _CUM_BYTES_TOTAL
                else float(r[x_key])
            )
            by_round.setdefault(int(r[schema.ROUND]), []).append((x, y))
    xs, means, stds = [], [], []
    for round in sorted(by_round):
        points = by_round[round]
        ys = [y for _, y in points]
        xs.append(statistics.fmean(x for x, _ in points))
        means.append(statistics.fmean(ys))
        stds.append(statistics.stdev(ys) if len(ys) > 1 else 0.0)
    return xs, means, stds


def _evaluated(records: _Records, key: str) -> list[float]:
    return [float(r.get(key, math.nan)) for r in _rows(records)]


def _rows(records: _Records) -> Sequence[Mapping[str, float]]:
    """Records as mappings, to be read by a key chosen at run time."""
    return cast(Sequence[Mapping[str, float]], records)


def _pairs(xs: Sequence[float], ys: Sequence[float], scale: float = 1.0) -> list[list[float]]:
    kept = [(x, y * scale) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
    return [[x for x, _ in kept], [y for _, y in kept]]


def _label(ax: Axes, x: str, y: str, *, log_x: bool = False, log_y: bool = False) -> None:
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if x == "round":
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: ModuleType, fig: Figure, path: Path, title: str, *, layout: bool = True) -> None:
    if title:
        fig.suptitle(title)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
