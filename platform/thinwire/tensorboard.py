"""An optional TensorBoard log of a run, beside its JSONL and CSV records.

Needs the `tensorboard` package (`pip install "thinwire[tensorboard]"`); torch's own
`SummaryWriter` writes the event files. Every number of a round record becomes a scalar
at step = round; accuracy is logged in percent, as every thinwire table shows it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import cast

from thinwire.metrics import RoundRecord, schema

__all__ = ["TensorBoardLog", "tensorboard_available"]

_ACCURACY_PCT = "accuracy_pct"  # the scalar accuracy is logged as, in percent


def tensorboard_available() -> bool:
    """Whether the `tensorboard` package is installed."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardLog:
    """Writes round records as TensorBoard scalars under `folder`."""

    def __init__(self, folder: Path) -> None:
        """Opens the event file.

        Raises:
            ImportError: `tensorboard` is not installed (the message says how to get it).
        """
        if not tensorboard_available():
            raise ImportError(
                "the TensorBoard log needs the tensorboard package: "
                'pip install "thinwire[tensorboard]"'
            )
        from torch.utils.tensorboard import SummaryWriter

        self.folder = folder
        self._writer = SummaryWriter(log_dir=str(folder))

    def __call__(self, record: RoundRecord) -> None:
        """Logs one round's numbers (NaN ones, such as unevaluated accuracy, are skipped)."""
        step = int(record[schema.ROUND])
        for key, value in cast(Mapping[str, float], record).items():
            number = float(value)
            if key == schema.ROUND or math.isnan(number):
                continue
            if key == schema.ACCURACY:
                key, number = _ACCURACY_PCT, 100.0 * number
            self._writer.add_scalar(key, number, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        self._writer.close()

    def __enter__(self) -> TensorBoardLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
