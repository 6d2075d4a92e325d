"""Round records, the run folder, the live progress display, and plots.

Every runtime reports one *round record* per round: a flat mapping of metric names to
numbers. The core keys below are always present; a runtime or policy adds its own (e.g.
`censored`, `epsilon`, `consensus_distance`). A `RunRecorder` writes them to the run folder:

    runs/<name>-<YYYYmmdd-HHMMSS>/
        config.yaml     the resolved experiment
        metrics.jsonl   one JSON record per round, appended as rounds finish
        metrics.csv     the same table, written when the run closes
        summary.json    the run's status, then final and best accuracy and totals
        curves.png      accuracy, loss and bytes against rounds and cumulative bytes

`summary.json` is written when the run starts, with `status: running`, and rewritten when it
ends: `finished`, or `failed` / `interrupted` with the `error`, beside the summary of the
rounds that did finish. A folder never claims a result its run did not reach.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import yaml

from thinwire.config import Experiment

__all__ = [
    "CORE_KEYS",
    "RUN_STATUSES",
    "Record",
    "RoundProgress",
    "RunRecorder",
    "format_bytes",
    "load_records",
    "new_run_dir",
    "round_line",
    "summarize",
]

Record = dict[str, float | int]

CORE_KEYS = (
    "round",  # 1-based round number
    "accuracy",  # test accuracy of the global (or average) model, NaN when not evaluated
    "loss",  # test loss, NaN when not evaluated
    "train_loss",  # mean local training loss of the round's senders
    "bytes_up",  # serialized update bytes that crossed the uplink this round
    "bytes_down",  # serialized bytes sent down this round (all recipients)
    "cum_bytes_up",
    "cum_bytes_down",
    "updates_sent",  # updates that were sent (not censored / silent)
    "sim_time_s",  # simulated network time of the round (channel model)
    "compute_s",  # measured compute time of the round (slowest participant)
    "wall_s",  # measured wall-clock time of the round
)


RUN_STATUSES = ("running", "finished", "failed", "interrupted")
"""The `status` of a run folder's `summary.json`."""


def format_bytes(n: float) -> str:
    """Human-readable byte count (decimal units, as link speeds are)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def new_run_dir(output: Path, name: str) -> Path:
    """Creates and returns a fresh `<output>/<name>-<timestamp>[-n]` run folder."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = output / f"{name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = output / f"{name}-{stamp}-{suffix}"
    path.mkdir(parents=True)
    return path


def summarize(records: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Final and best accuracy and totals of a run's records."""
    if not records:
        return {}
    evaluated = [r for r in records if not math.isnan(float(r.get("accuracy", math.nan)))]
    last = records[-1]
    summary = {
        "rounds": float(last["round"]),
        "final_accuracy": float(evaluated[-1]["accuracy"]) if evaluated else math.nan,
        "best_accuracy": max((float(r["accuracy"]) for r in evaluated), default=math.nan),
        "final_loss": float(evaluated[-1]["loss"]) if evaluated else math.nan,
        "total_bytes_up": float(last["cum_bytes_up"]),
        "total_bytes_down": float(last["cum_bytes_down"]),
        "updates_sent": float(sum(r["updates_sent"] for r in records)),
        "sim_time_s": float(sum(r["sim_time_s"] for r in records)),
        "wall_s": float(sum(r["wall_s"] for r in records)),
    }
    for key in sorted(set().union(*records) - set(CORE_KEYS)):
        values = [float(r[key]) for r in records if key in r]
        summary[f"last_{key}"] = values[-1]
    return summary


class RunRecorder:
    """Writes a run folder: the resolved config up front, then records as rounds finish.

    Used as a context manager, it marks the folder `failed` (or `interrupted`) with the
    error when the block raises, and `finished` when `close` is called.
    """

    def __init__(
        self,
        experiment: Experiment,
        *,
        run_dir: Path | None = None,
        keep_rounds: int | None = None,
    ) -> None:
        """Opens a run folder for writing.

        Args:
            experiment: the run's resolved experiment.
            run_dir: the folder; a fresh `<output>/<name>-<timestamp>` one by default.
            keep_rounds: continue an existing folder (a resumed run): its records up to
                and including this round are kept, later ones dropped, and its
                `config.yaml` is left as it is.
        """
        self.experiment = experiment
        self.dir = run_dir or new_run_dir(Path(experiment.output), experiment.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        jsonl = self.dir / "metrics.jsonl"
        if keep_rounds is None:
            self.records: list[Record] = []
            config = experiment.model_dump(mode="json")
            (self.dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        else:
            kept = load_records(self.dir) if jsonl.is_file() else []
            self.records = [r for r in kept if int(r["round"]) <= keep_rounds]
        self._jsonl = jsonl.open("w")
        for record in self.records:
            self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
        self._jsonl.flush()
        self._write_summary("running")

    def add(self, record: Mapping[str, float | int]) -> None:
        """Appends one round's record (flushed at once, so a crash keeps finished rounds)."""
        missing = [k for k in CORE_KEYS if k not in record]
        if missing:
            raise ValueError(f"round record lacks {missing}")
        self.records.append(dict(record))
        self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
        self._jsonl.flush()

    def close(self) -> dict[str, float]:
        """Marks the run finished; writes the CSV, the summary and the plot; returns the summary."""
        return self._finish("finished")

    def _finish(self, status: str, error: str | None = None) -> dict[str, float]:
        self._jsonl.close()
        keys = list(CORE_KEYS) + sorted(set().union(*self.records) - set(CORE_KEYS))
        with (self.dir / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.records)
        summary = self._write_summary(status, error)
        if self.records:
            from thinwire.plots import plot_run  # matplotlib loads only when a run ends

            plot_run(self.records, self.dir / "curves.png", title=self.experiment.name)
        return summary

    def _write_summary(self, status: str, error: str | None = None) -> dict[str, float]:
        summary = summarize(self.records)
        document: dict[str, Any] = {
            "status": status,
            "rounds_planned": self.experiment.train.rounds,
            **summary,
        }
        if error is not None:
            document["error"] = error
        path = self.dir / "summary.json"
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(document, indent=2, allow_nan=True))
        partial.replace(path)
        return summary

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._jsonl.closed:
            return
        if exc is None:
            self.close()
        elif isinstance(exc, KeyboardInterrupt):
            self._finish("interrupted", "interrupted (Ctrl-C or a signal)")
        else:
            self._finish("failed", f"{type(exc).__name__}: {exc}")


def load_records(run_dir: str | Path) -> list[Record]:
    """The records of a run folder (from metrics.jsonl)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a thinwire run folder (no metrics.jsonl)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RoundProgress:
    """Live progress of a run: a rich bar on a terminal, one line per round off it.

    `mode="bar"` shows the live round, accuracy, loss and cumulative bytes; `"lines"` prints
    the same as one flushed line per round (for nohup, batch systems, CI logs, where a bar
    shows nothing until the end); `"off"` prints nothing. All go to stderr.
    """

    def __init__(
        self,
        total_rounds: int,
        *,
        description: str,
        mode: Literal["bar", "lines", "off"] = "bar",
    ) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.mode = mode
        self.total = total_rounds
        self.description = description
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=mode != "bar",
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total_rounds, status="")

    def update(self, record: Mapping[str, float]) -> None:
        """Advances to the record's round and shows its numbers."""
        if self.mode == "lines":
            sys.stderr.write(round_line(record, self.total, self.description) + "\n")
            sys.stderr.flush()
            return
        acc = float(record.get("accuracy", math.nan))
        status = (
            f"acc {acc:6.2%}  loss {float(record.get('loss', math.nan)):.3f}  "
            f"up {format_bytes(float(record['cum_bytes_up']))}"
            if not math.isnan(acc)
            else f"up {format_bytes(float(record['cum_bytes_up']))}"
        )
        self._progress.update(self._task, completed=int(record["round"]), status=status)

    def __enter__(self) -> RoundProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()


def round_line(record: Mapping[str, float], total_rounds: int, name: str) -> str:
    """One round as a log line: `name round r/R acc .. loss .. up .. down .. time`."""
    acc, loss = float(record.get("accuracy", math.nan)), float(record.get("loss", math.nan))
    measured = f"acc {acc:6.2%}  loss {loss:.4f}  " if not math.isnan(acc) else ""
    return (
        f"{name}  round {int(record['round'])}/{total_rounds}  {measured}"
        f"up {format_bytes(float(record['cum_bytes_up']))}  "
        f"down {format_bytes(float(record['cum_bytes_down']))}  "
        f"{float(record.get('wall_s', 0.0)):.2f} s"
    )
