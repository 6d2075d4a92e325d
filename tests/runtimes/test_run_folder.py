"""Run folders a user can trust: status, the final model, checkpoints and --resume."""

import json

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.clients import Client, VoteClient
from thinwire.learning import evaluate, load_dataset, load_saved_model
from thinwire.metrics import load_records
from thinwire.runtimes.run_folder import read_status, resume_run, run_experiment

TIMINGS = {"wall_s", "compute_s"}

# Each keeps state between rounds in a different place: client residuals and momentum,
# the server's momentum and compressed downlink copy, CSGD's stale updates, partial
# participation, random-access outcomes, the DP ledger and a shared mask, the vote's
# residuals, masks and the server's last change.
STATEFUL = {
    "feedback-downlink-momentum": dict(
        codec={"select": {"kind": "topk", "density": 0.05}, "error_feedback": True},
        downlink={"select": {"kind": "topk", "density": 0.2}, "error_feedback": True},
        train={"rounds": 6, "participation": 0.75, "server": {"lr": 1.0, "momentum": 0.5}},
    ),
    "censor-qsgd": dict(
        codec={"quantize": {"kind": "qsgd", "levels": 4}},
        policy={"kind": "censor", "threshold": {"kind": "geometric", "tau": 2.0, "ratio": 0.5}},
        train={"rounds": 6},
    ),
    "random-access": dict(
        codec={"scope": "model", "select": {"kind": "topk", "density": 0.1}},
        policy={"kind": "random_access", "rule": {"kind": "aog"}},
        channel={"slots": 2},
        train={"rounds": 6},
    ),
    "private-masked": dict(
        privacy={"noise_multiplier": 1.0, "delta": 1e-4, "sparsity": {"final_rate": 0.9}},
        codec={"scope": "model", "select": {"kind": "shared_mask"}},
        train={"rounds": 6},
    ),
    "majority-vote-previous": dict(
        vote={"density": 0.05, "mask": "previous"}, train={"rounds": 6, "participation": 0.75}
    ),
    "majority-vote-two-phase": dict(
        vote={"density": 0.05, "mask": "two_phase"}, train={"rounds": 6, "participation": 0.75}
    ),
}


def experiment(tmp_path, every=2, **sections):
    sections.setdefault("train", {})
    return tiny_experiment(
        output=str(tmp_path / "runs"),
        runtime={"kind": "simulation", "checkpoint_every": every},
        **sections,
    )


def strip(records):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def crash_at(monkeypatch, round):
    for kind in (Client, VoteClient):
        original = kind.train_round

        def train_round(self, downlink, r, *, delivered, original=original):
            if r == round:
                raise RuntimeError("power cut")
            return original(self, downlink, r, delivered=delivered)

        monkeypatch.setattr(kind, "train_round", train_round)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STATEFUL))
def test_a_resumed_run_ends_bit_for_bit_as_an_uninterrupted_one(tmp_path, monkeypatch, name):
    exp = experiment(tmp_path, **STATEFUL[name])
    whole = run_experiment(exp, run_dir=tmp_path / "whole")

    crash_at(monkeypatch, 5)  # after the checkpoint of round 4
    with pytest.raises(RuntimeError, match="power cut"):
        run_experiment(exp, run_dir=tmp_path / "cut")
    assert read_status(tmp_path / "cut") == "failed"
    monkeypatch.undo()

    resumed = resume_run(tmp_path / "cut")
    assert strip(load_records(resumed.dir)) == strip(load_records(whole.dir))
    a = torch.load(whole.dir / "model.pt", weights_only=True)
    b = torch.load(resumed.dir / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert read_status(resumed.dir) == "finished"


def test_a_failed_run_says_so_and_keeps_its_finished_rounds(tmp_path, monkeypatch):
    crash_at(monkeypatch, 2)
    with pytest.raises(RuntimeError):
        run_experiment(experiment(tmp_path, every=0, train={"rounds": 3}), run_dir=tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"] == "RuntimeError: power cut"
    assert summary["rounds"] == 1 and summary["rounds_planned"] == 3
    assert not (tmp_path / "r" / "model.pt").exists()


def test_a_run_in_progress_is_marked_running(tmp_path, monkeypatch):
    seen = []
    original = Client.train_round

    def train_round(self, downlink, r, *, delivered):
        seen.append(read_status(tmp_path / "r"))
        return original(self, downlink, r, delivered=delivered)

    monkeypatch.setattr(Client, "train_round", train_round)
    run_experiment(experiment(tmp_path, every=0), run_dir=tmp_path / "r")
    assert set(seen) == {"running"}
    assert read_status(tmp_path / "r") == "finished"


def test_the_saved_model_loads_and_scores_what_the_run_recorded(tmp_path):
    exp = experiment(tmp_path, every=0, train={"rounds": 3})
    outcome = run_experiment(exp)
    model = load_saved_model(outcome.dir)
    data = load_dataset(exp.data, seed=exp.seed)
    accuracy = evaluate(model, data.x_test, data.y_test).accuracy
    assert accuracy == load_records(outcome.dir)[-1]["accuracy"]


def test_resume_refuses_a_finished_run_and_restarts_one_without_checkpoints(tmp_path, monkeypatch):
    done = run_experiment(experiment(tmp_path, every=0), run_dir=tmp_path / "done")
    with pytest.raises(ValueError, match="has finished"):
        resume_run(done.dir)
    crash_at(monkeypatch, 2)
    exp = experiment(tmp_path, every=0, train={"rounds": 3})
    with pytest.raises(RuntimeError):
        run_experiment(exp, run_dir=tmp_path / "early")
    monkeypatch.undo()
    again = resume_run(tmp_path / "early")
    assert [r["round"] for r in load_records(again.dir)] == [1, 2, 3]


def test_a_checkpoint_of_another_experiment_is_refused_by_name(tmp_path, monkeypatch):
    crash_at(monkeypatch, 3)
    exp = experiment(tmp_path, every=2, train={"rounds": 4})
    with pytest.raises(RuntimeError):
        run_experiment(exp, run_dir=tmp_path / "r")
    config = tmp_path / "r" / "config.yaml"
    config.write_text(config.read_text().replace("- 16", "- 32"))  # another model size
    with pytest.raises(ValueError, match="does not fit this experiment"):
        resume_run(tmp_path / "r")


def test_tensorboard_log_holds_every_round(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    outcome = run_experiment(experiment(tmp_path, every=0), tensorboard=True)
    events = EventAccumulator(str(outcome.dir / "tensorboard"))
    events.Reload()
    accuracy = events.Scalars("accuracy_pct")
    assert [e.step for e in accuracy] == [1, 2]
    assert accuracy[-1].value == pytest.approx(100 * load_records(outcome.dir)[-1]["accuracy"])
