"""What a run shows while it goes: byte counts and round lines."""

import math
import subprocess
import sys

from thinwire.metrics import CORE_KEYS, format_bytes, round_line


def test_format_bytes():
    assert format_bytes(999) == "999 B"
    assert format_bytes(206_763) == "206.76 kB"
    assert format_bytes(11.65e6) == "11.65 MB"


def test_round_line_shows_accuracy_only_for_evaluated_rounds():
    record = {**dict.fromkeys(CORE_KEYS, 0), "round": 3, "cum_bytes_up": 2_000, "wall_s": 0.5}
    evaluated = {**record, "accuracy": 0.5, "loss": 1.25}
    assert round_line(evaluated, 10, "run") == (
        "run  round 3/10  acc 50.00%  loss 1.2500  up 2.00 kB  down 0 B  0.50 s"
    )
    unevaluated = {**record, "accuracy": math.nan, "loss": math.nan}
    assert round_line(unevaluated, 10, "run") == "run  round 3/10  up 2.00 kB  down 0 B  0.50 s"


def test_importing_metrics_loads_no_plotting():
    probe = "import sys, thinwire.metrics; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
