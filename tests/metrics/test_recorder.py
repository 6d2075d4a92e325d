"""Run folders and summaries."""

import math

import pytest

from thinwire.config import parse_config
from thinwire.metrics import CORE_KEYS, RunRecorder, load_records, summarize


def record(round, accuracy=math.nan, up=10, **extra):
    base = dict.fromkeys(CORE_KEYS, 0)
    base.update(
        round=round,
        accuracy=accuracy,
        loss=accuracy,
        bytes_up=up,
        cum_bytes_up=up * round,
        updates_sent=1,
    )
    return {**base, **extra}


def test_summary_uses_the_last_evaluated_round():
    records = [record(1, 0.5), record(2), record(3, 0.7, epsilon=1.5), record(4)]
    summary = summarize(records)
    assert summary["final_accuracy"] == 0.7 and summary["best_accuracy"] == 0.7
    assert summary["total_bytes_up"] == 40 and summary["updates_sent"] == 4
    assert summary["last_epsilon"] == 1.5


def test_recorder_writes_records_as_they_come(tmp_path):
    experiment = parse_config({"name": "m", "output": str(tmp_path)})
    with RunRecorder(experiment) as recorder:
        recorder.add(record(1, 0.25))
        assert load_records(recorder.dir) == [record(1, 0.25)]  # flushed at once
        with pytest.raises(ValueError, match="lacks"):
            recorder.add({"round": 2})
        with pytest.raises(ValueError, match="does not define"):
            recorder.add(record(2, my_metric=1.0))
        assert load_records(recorder.dir) == [record(1, 0.25)]  # a refused record is not kept
    assert (recorder.dir / "metrics.csv").exists() and (recorder.dir / "summary.json").exists()
