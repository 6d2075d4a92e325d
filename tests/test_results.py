"""`thinwire compare`: runs grouped by configuration, mean ± std, failed runs skipped."""

import csv
import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from thinwire.cli import app
from thinwire.results import bytes_to_accuracy, group_rows, group_runs, load_runs


def fake_run(root, name, *, density, seed, accuracies, status="finished", rounds=None):
    """A run folder as the recorder writes it, with chosen accuracies."""
    folder = root / name
    folder.mkdir(parents=True)
    config = {
        "name": name,
        "seed": seed,
        "train": {"rounds": rounds or len(accuracies)},
        "codec": {"select": {"kind": "topk", "density": density}},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    records = [
        {
            "round": i + 1,
            "accuracy": a,
            "loss": 1.0 - a,
            "train_loss": 1.0,
            "bytes_up": 100 * density * 1000,
            "bytes_down": 50_000,
            "cum_bytes_up": (i + 1) * 100 * density * 1000,
            "cum_bytes_down": (i + 1) * 50_000,
            "updates_sent": 10,
            "sim_time_s": 0.1,
            "compute_s": 0.1,
            "wall_s": 0.1,
        }
        for i, a in enumerate(accuracies)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"status": status}))
    return folder


@pytest.fixture
def sweep(tmp_path):
    for seed, accs in enumerate([[0.5, 0.8, 0.9], [0.6, 0.7, 0.8], [0.4, 0.9, 0.85]]):
        fake_run(tmp_path, f"q-density_0.01-seed_{seed}", density=0.01, seed=seed, accuracies=accs)
        fake_run(
            tmp_path,
            f"q-density_0.1-seed_{seed}",
            density=0.1,
            seed=seed,
            accuracies=[a + 0.05 for a in accs],
        )
    return tmp_path


def test_runs_that_differ_only_in_seed_form_one_group_named_by_what_differs(sweep):
    runs, notes = load_runs([sweep])
    groups = group_runs(runs)
    assert [g.label for g in groups] == ["density=0.01", "density=0.1"]
    assert [len(g.runs) for g in groups] == [3, 3] and notes == []


def test_rows_hold_mean_std_and_bytes_to_target(sweep):
    runs, _ = load_runs([sweep])
    low, high = group_rows(group_runs(runs), target=0.8)
    assert low.final_accuracy.mean == pytest.approx((0.9 + 0.8 + 0.85) / 3)
    assert low.final_accuracy.std == pytest.approx(0.05)
    assert low.best_accuracy.mean == pytest.approx((0.9 + 0.8 + 0.9) / 3)
    assert low.final_accuracy.n == 3
    # 0.8 first reached at rounds 2, 3, 2: cumulative uplink 10 B per round
    assert low.uplink_to_target.mean == pytest.approx((2000 + 3000 + 2000) / 3)
    assert high.uplink_per_round.mean == pytest.approx(10_000)
    assert high.downlink_per_round.mean == pytest.approx(50_000)


def test_bytes_to_accuracy_is_nan_when_the_target_is_never_reached():
    records = [{"round": 1, "accuracy": 0.5, "cum_bytes_up": 1, "cum_bytes_down": 2}]
    assert all(math.isnan(b) for b in bytes_to_accuracy(records, 0.6))
    assert bytes_to_accuracy(records, 0.5) == (1.0, 3.0)


def test_failed_runs_are_skipped_with_a_note_and_incomplete_ones_marked(tmp_path):
    fake_run(tmp_path, "ok", density=0.1, seed=0, accuracies=[0.5, 0.6])
    fake_run(tmp_path, "broken", density=0.1, seed=1, accuracies=[0.5], status="failed")
    fake_run(tmp_path, "going", density=0.1, seed=2, accuracies=[0.5], status="running", rounds=2)
    old = tmp_path / "old-failure"  # written before runs recorded a status
    old.mkdir()
    (old / "summary.json").write_text("{}")
    (old / "metrics.jsonl").write_text("")
    runs, notes = load_runs(sorted(p for p in tmp_path.iterdir()))
    assert sorted(r.name for r in runs) == ["going", "ok"]
    assert any("broken: failed" in n for n in notes) and any(
        "old-failure: failed" in n for n in notes
    )
    assert any("going: running after 1 of 2 rounds; marked *" in n for n in notes)
    [row] = group_rows(group_runs(runs), target=0.5)
    assert row.runs == 2 and row.incomplete == 1


def test_compare_prints_percent_and_exports_markdown_and_csv(sweep, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(sweep),
            "--target",
            "80",
            "--out",
            str(out / "c.png"),
            "--markdown",
            str(out / "t.md"),
            "--csv",
            str(out / "t.csv"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "85.00% ± 5.00%" in result.output  # final accuracy of density=0.01
    table = (out / "t.md").read_text().splitlines()
    assert table[0].startswith("| configuration | n | final accuracy")
    assert table[2].startswith("| density=0.01 | 3 | 85.00% ± 5.00%")
    rows = list(csv.DictReader((out / "t.csv").open()))
    assert [r["configuration"] for r in rows] == ["density=0.01", "density=0.1"]
    assert float(rows[0]["final_accuracy_mean"]) == pytest.approx(85.0)
    assert (out / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_refuses_when_nothing_is_left(tmp_path):
    fake_run(tmp_path, "broken", density=0.1, seed=1, accuracies=[0.5], status="failed")
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "broken")])
    assert result.exit_code == 2 and "no run to compare" in result.output
