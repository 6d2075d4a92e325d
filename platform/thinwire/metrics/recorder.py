"""The run folder: a run's config, its round records as they come, its summary and curves.

A `RunRecorder` writes the round records (`thinwire.metrics.schema.RoundRecord`) every
runtime reports to the run folder:

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import yaml

from thinwire.config import Experiment
from thinwire.metrics import schema
from thinwire.metrics.schema import CORE_KEYS, RoundRecord, undefined_keys

__all__ = ["RUN_STATUSES", "RunRecorder", "load_records", "new_run_dir", "summarize"]


RUN_STATUSES = ("running", "finished", "failed", "interrupted")
"""The `status` of a run folder's `summary.json`."""


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


def summarize(records: Sequence[RoundRecord]) -> dict[str, float]:
    """Final and best accuracy and totals of a run's records (`schema.SUMMARY_KEYS`)."""
    if not records:
        return {}
    rows = cast(Sequence[Mapping[str, float]], records)
    evaluated = [r for r in rows if not math.isnan(float(r.get(schema.ACCURACY, math.nan)))]
    last = records[-1]
    summary = {
        schema.ROUNDS: float(last[schema.ROUND]),
        schema.FINAL_ACCURACY: (float(evaluated[-1][schema.ACCURACY]) if evaluated else math.nan),
        schema.BEST_ACCURACY: max((float(r[schema.ACCURACY]) for r in evaluated), default=math.nan),
        schema.FINAL_LOSS: float(evaluated[-1][schema.LOSS]) if evaluated else math.nan,
        schema.TOTAL_BYTES_UP: float(last[schema.CUM_BYTES_UP]),
        schema.TOTAL_BYTES_DOWN: float(last[schema.CUM_BYTES_DOWN]),
        schema.UPDATES_SENT: float(sum(r[schema.UPDATES_SENT] for r in records)),
        schema.SIM_TIME_S: float(sum(r[schema.SIM_TIME_S] for r in records)),
        schema.WALL_S: float(sum(r[schema.WALL_S] for r in records)),
    }
    for key in sorted(set().union(*rows) - set(CORE_KEYS)):
        values = [float(r[key]) for r in rows if key in r]
        summary[schema.summary_key(key)] = values[-1]
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
            self.records: list[RoundRecord] = []
            config = experiment.model_dump(mode="json")
            (self.dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        else:
            kept = load_records(self.dir) if jsonl.is_file() else []
            self.records = [r for r in kept if int(r[schema.ROUND]) <= keep_rounds]
        self._jsonl = jsonl.open("w")
        for record in self.records:
            self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
        self._jsonl.flush()
        self._write_summary("running")

    def add(self, record: RoundRecord) -> None:
        """Appends one round's record (flushed at once, so a crash keeps finished rounds).

        Raises:
            ValueError: the record lacks a core key or holds one the schema does not define.
        """
        missing = [k for k in CORE_KEYS if k not in record]
        if missing:
            raise ValueError(f"round record lacks {missing}")
        unknown = undefined_keys(record)
        if unknown:
            raise ValueError(
                f"round record holds {unknown}, which thinwire.metrics.schema does not "
                "define; add each key there (KEYS and RoundCounts)"
            )
        self.records.append(cast(RoundRecord, dict(record)))
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
            from thinwire.metrics.plots import plot_run  # matplotlib loads when a run ends

            plot_run(self.records, self.dir / "curves.png", title=self.experiment.name)
        return summary

    def _write_summary(self, status: str, error: str | None = None) -> dict[str, float]:
        summary = summarize(self.records)
        document: dict[str, Any] = {
            schema.STATUS: status,
            schema.ROUNDS_PLANNED: self.experiment.train.rounds,
            **summary,
        }
        if error is not None:
            document[schema.ERROR] = error
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


def load_records(run_dir: str | Path) -> list[RoundRecord]:
    """The records of a run folder (from metrics.jsonl), keys as they were written."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a thinwire run folder (no metrics.jsonl)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
