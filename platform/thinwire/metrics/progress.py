"""A run's progress as it goes: a live bar or one line per round, and byte counts to read.

`RoundProgress` shows the round records (`thinwire.metrics.schema.RoundRecord`) a runtime
reports; `round_line` is the same round as one log line; `format_bytes` writes byte counts
in decimal units, as every table and log of thinwire does.
"""

from __future__ import annotations

import math
import sys
from types import TracebackType
from typing import Literal

from thinwire.metrics import schema
from thinwire.metrics.schema import RoundRecord

__all__ = ["RoundProgress", "format_bytes", "round_line"]


def format_bytes(n: float) -> str:
    """Human-readable byte count (decimal units, as link speeds are)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


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

    def update(self, record: RoundRecord) -> None:
        """Advances to the record's round and shows its numbers."""
        if self.mode == "lines":
            sys.stderr.write(round_line(record, self.total, self.description) + "\n")
            sys.stderr.flush()
            return
        acc = float(record.get(schema.ACCURACY, math.nan))
        up = f"up {format_bytes(float(record[schema.CUM_BYTES_UP]))}"
        status = (
            f"acc {acc:6.2%}  loss {float(record.get(schema.LOSS, math.nan)):.3f}  {up}"
            if not math.isnan(acc)
            else up
        )
        self._progress.update(self._task, completed=int(record[schema.ROUND]), status=status)

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


def round_line(record: RoundRecord, total_rounds: int, name: str) -> str:
    """One round as a log line: `name round r/R acc .. loss .. up .. down .. time`."""
    acc = float(record.get(schema.ACCURACY, math.nan))
    loss = float(record.get(schema.LOSS, math.nan))
    measured = f"acc {acc:6.2%}  loss {loss:.4f}  " if not math.isnan(acc) else ""
    return (
        f"{name}  round {int(record[schema.ROUND])}/{total_rounds}  {measured}"
        f"up {format_bytes(float(record[schema.CUM_BYTES_UP]))}  "
        f"down {format_bytes(float(record[schema.CUM_BYTES_DOWN]))}  "
        f"{float(record.get(schema.WALL_S, 0.0)):.2f} s"
    )
