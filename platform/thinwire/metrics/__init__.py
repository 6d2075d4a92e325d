"""What a run reports: round records, the run folder, the live progress, and plots.

Every runtime reports one round record per round (`schema`: `RoundRecord`, built by
`round_record`, every key with its unit and meaning in `KEYS`); a `RunRecorder`
(`recorder`) writes them to the run folder with the run's summary; `RoundProgress`
(`progress`) shows them as they come; `plots` draws a run or a group of runs. `plots` is
not imported here, so reading or writing records never loads matplotlib.
"""

from thinwire.metrics.progress import RoundProgress, format_bytes, round_line
from thinwire.metrics.recorder import (
    RUN_STATUSES,
    RunRecorder,
    load_records,
    new_run_dir,
    summarize,
)
from thinwire.metrics.schema import CORE_KEYS, KEYS, RoundCounts, RoundRecord, round_record

__all__ = [
    "CORE_KEYS",
    "KEYS",
    "RUN_STATUSES",
    "RoundCounts",
    "RoundProgress",
    "RoundRecord",
    "RunRecorder",
    "format_bytes",
    "load_records",
    "new_run_dir",
    "round_line",
    "round_record",
    "summarize",
]
