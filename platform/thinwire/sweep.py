"""A sweep: the runs of `thinwire.config.sweep_points`, in one folder, in parallel processes.

    runs/<name>-sweep-<timestamp>/
        sweep.yaml       the points: each run's name and the settings that set it apart
        <point name>/    one run folder per point (`thinwire.runtimes.run_folder.run_experiment`)

With `jobs` > 1 the points run in that many worker processes (spawned, so no torch state
is shared), each with `cores // jobs` torch threads; the workers report every finished
round to the parent, which shows the whole sweep at once: a bar per point on a terminal,
one line per finished point elsewhere. A point that fails is marked `failed` in its own
folder and the sweep goes on.
"""

from __future__ import annotations

import functools
import logging
import math
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple

import yaml

from thinwire.config import SweepPoint
from thinwire.metrics import RoundRecord, format_bytes, new_run_dir, schema
from thinwire.runtimes.run_folder import run_experiment

__all__ = ["PointOutcome", "SweepProgress", "default_jobs", "run_sweep"]

logger = logging.getLogger(__name__)


class PointOutcome(NamedTuple):
    """How one point of a sweep ended."""

    name: str
    dir: Path
    status: str  # "finished" or "failed"
    error: str | None
    final_accuracy: float


def default_jobs(points: int, cores: int | None = None) -> int:
    """Parallel runs for `points` runs on this machine: one per core, at most one per point."""
    return max(1, min(points, cores or _cores()))


def run_sweep(
    points: Sequence[SweepPoint],
    *,
    output: Path,
    name: str,
    jobs: int = 1,
    progress: Literal["bar", "lines", "off"] = "off",
) -> tuple[Path, list[PointOutcome]]:
    """Runs every point into one sweep folder under `output`; returns it and the outcomes.

    Args:
        points: the runs (`thinwire.config.sweep_points`).
        output: where the sweep folder goes.
        name: the experiment's name (the folder is `<name>-sweep-<timestamp>`).
        jobs: runs at a time; 1 runs them here, one after another.
        progress: a live view of every point ("bar"), a line per finished point
            ("lines"), or nothing.
    """
    folder = new_run_dir(output, f"{name}-sweep")
    plan = [{"name": p.name, "settings": p.settings} for p in points]
    (folder / "sweep.yaml").write_text(
        yaml.safe_dump({"name": name, "jobs": jobs, "points": plan}, sort_keys=False)
    )
    threads = max(1, _cores() // max(1, jobs))
    with SweepProgress(points, mode=progress) as view:
        if jobs <= 1:
            outcomes = []
            for i, point in enumerate(points):
                view.started(i)
                outcome = _run_point(point, folder / point.name, functools.partial(view.round, i))
                view.finished(i, outcome)
                outcomes.append(outcome)
        else:
            outcomes = _run_parallel(points, folder, jobs, threads, view)
    return folder, outcomes


def _run_parallel(
    points: Sequence[SweepPoint], folder: Path, jobs: int, threads: int, view: SweepProgress
) -> list[PointOutcome]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        events = manager.Queue()
        with ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_init_worker, initargs=(threads,)
        ) as pool:
            futures: dict[Future[PointOutcome], int] = {
                pool.submit(_worker, i, p, folder / p.name, events): i for i, p in enumerate(points)
            }
            done: dict[int, PointOutcome] = {}
            try:
                while len(done) < len(points):
                    _drain(events, view)
                    for future, index in futures.items():
                        if index not in done and future.done():
                            done[index] = _outcome(future, points[index], folder)
                            view.finished(index, done[index])
                    time.sleep(0.05)
                _drain(events, view)
            except KeyboardInterrupt:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return [done[i] for i in range(len(points))]


def _drain(events: Any, view: SweepProgress) -> None:
    while True:
        try:
            kind, index, record = events.get_nowait()
        except queue.Empty:
            return
        if kind == "start":
            view.started(index)
        else:
            view.round(index, record)


def _outcome(future: Future[PointOutcome], point: SweepPoint, folder: Path) -> PointOutcome:
    try:
        return future.result()
    except Exception as exc:  # the worker process itself died (killed, out of memory)
        return PointOutcome(point.name, folder / point.name, "failed", repr(exc), math.nan)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _worker(index: int, point: SweepPoint, run_dir: Path, events: Any) -> PointOutcome:
    events.put(("start", index, None))
    return _run_point(point, run_dir, lambda record: events.put(("round", index, record)))


def _run_point(
    point: SweepPoint, run_dir: Path, on_round: Callable[[RoundRecord], None]
) -> PointOutcome:
    try:
        outcome = run_experiment(point.experiment, run_dir=run_dir, on_round=on_round)
    except Exception as exc:  # the point's folder says failed; the sweep goes on
        logger.error("sweep point %s failed: %s", point.name, exc)
        return PointOutcome(point.name, run_dir, "failed", f"{type(exc).__name__}: {exc}", math.nan)
    accuracy = float(outcome.summary.get(schema.FINAL_ACCURACY, math.nan))
    return PointOutcome(point.name, outcome.dir, "finished", None, accuracy)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SweepProgress:
    """The whole sweep at a glance: a bar per point and one for the sweep, or lines."""

    def __init__(
        self, points: Sequence[SweepPoint], *, mode: Literal["bar", "lines", "off"]
    ) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.mode = mode
        self.points = points
        self._finished = 0
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            console=Console(stderr=True),
            disable=mode != "bar",
        )
        self._overall = self._progress.add_task(
            f"[bold]sweep ({len(points)} runs)", total=len(points), status=""
        )
        self._tasks = [
            self._progress.add_task(
                p.name, total=p.experiment.train.rounds, status="queued", visible=True
            )
            for p in points
        ]

    def started(self, index: int) -> None:
        """Marks point `index` running."""
        self._progress.update(self._tasks[index], status="running")

    def round(self, index: int, record: RoundRecord) -> None:
        """Shows a finished round of point `index`."""
        accuracy = float(record.get(schema.ACCURACY, math.nan))
        status = f"up {format_bytes(float(record[schema.CUM_BYTES_UP]))}"
        if not math.isnan(accuracy):
            status = f"acc {accuracy:6.2%}  {status}"
        self._progress.update(
            self._tasks[index], completed=int(record[schema.ROUND]), status=status
        )

    def finished(self, index: int, outcome: PointOutcome) -> None:
        """Marks point `index` finished or failed."""
        self._finished += 1
        status = (
            f"[green]done[/]  acc {outcome.final_accuracy:6.2%}"
            if outcome.status == "finished"
            else f"[red]failed[/]  {outcome.error}"
        )
        self._progress.update(self._tasks[index], status=status)
        self._progress.update(self._overall, completed=self._finished)
        if self.mode == "lines":
            text = (
                f"final accuracy {outcome.final_accuracy:.2%}"
                if outcome.status == "finished"
                else f"FAILED: {outcome.error}"
            )
            sys.stderr.write(f"[{self._finished}/{len(self.points)}] {outcome.name}: {text}\n")
            sys.stderr.flush()

    def __enter__(self) -> SweepProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()
