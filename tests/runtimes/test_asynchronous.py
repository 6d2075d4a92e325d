"""The asynchronous star simulated on an event clock: the synchronous star as its special
case (bit for bit), arrival order from the channel and the speed model, determinism."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from thinwire.config import parse_config
from thinwire.metrics.schema import undefined_keys
from thinwire.runtimes.asynchronous import choose_idle, client_speeds
from thinwire.runtimes.simulation import simulate

TOPK_EF = {"scope": "model", "select": {"kind": "topk", "density": 0.05}, "error_feedback": True}
CORE = ("accuracy", "loss", "train_loss", "bytes_up", "bytes_down", "updates_sent", "participants")


def experiment(server: dict | None, clients: int = 3, rounds: int = 3, **sections):
    raw = {
        "name": "async",
        "seed": 3,
        "data": {"dataset": "digits", "clients": clients},
        "model": {"kind": "mlp", "hidden": [16]},
        "train": {"rounds": rounds, "local_steps": 4, "lr": 0.1, "device": "cpu"},
        "codec": TOPK_EF,
        **sections,
    }
    if server is not None:
        raw["server"] = {"kind": "buffered_async", **server}
    return parse_config(raw)


@pytest.mark.parametrize(
    "speeds",
    [{"compute_s": 0.0}, {"compute_s": 1.0, "factors": [1.0, 5.0, 2.0]}],
    ids=["network-only", "slow-client"],
)
def test_k_equal_m_equal_clients_with_constant_staleness_is_the_synchronous_star(speeds):
    sync = simulate(experiment(None, train={"server": {"lr": 0.8, "momentum": 0.5}}))
    server = {"buffer": 3, "staleness": {"kind": "constant"}, "speeds": speeds}
    asyn = simulate(experiment(server, train={"server": {"lr": 0.8, "momentum": 0.5}}))
    for name, tensor in sync.model.items():
        assert torch.equal(asyn.model[name], tensor), name
    for s, a in zip(sync.records, asyn.records, strict=True):
        assert [a[k] for k in CORE] == [s[k] for k in CORE]
        assert (a["buffered"], a["staleness_max"], a["rejected"]) == (3, 0, 0)
        # It waits for the slowest client each round: network time plus its compute time.
        assert a["sim_time_s"] == pytest.approx(s["sim_time_s"] + 5.0 * speeds["compute_s"])


def test_a_slow_clients_update_arrives_stale_and_the_fast_ones_step_without_it():
    # Client 1 trains 10x slower; K = 2 of M = 3: clients 0 and 2 fill the buffer alone.
    exp = experiment(
        {"buffer": 2, "speeds": {"compute_s": 1.0, "factors": [1.0, 10.0, 1.0]}}, rounds=12
    )
    records = simulate(exp).records
    # A fast pair takes about 1 s a step; the slow client lands after 10 s, 9 steps later.
    assert [r["staleness_max"] for r in records[:9]] == [0] * 9
    assert records[9]["staleness_max"] == 9 and records[9]["staleness_mean"] == 4.5
    assert [r["participants"] for r in records[:3]] == [3, 2, 2]  # it is busy meanwhile
    clock = [r["sim_clock_s"] for r in records]
    assert clock == sorted(clock) and math.isclose(sum(r["sim_time_s"] for r in records), clock[-1])
    assert all(not undefined_keys(r) for r in records)


def test_it_is_faster_in_simulated_time_than_the_synchronous_schedule():
    speeds = {"compute_s": 1.0, "factors": [1.0, 8.0, 1.0, 1.0]}
    sync = simulate(experiment({"buffer": 4, "speeds": speeds}, clients=4, rounds=4)).records
    asyn = simulate(experiment({"buffer": 2, "speeds": speeds}, clients=4, rounds=4)).records
    assert asyn[-1]["sim_clock_s"] < sync[-1]["sim_clock_s"] / 2


def test_a_run_is_deterministic_for_a_seed():
    exp = experiment({"buffer": 2, "concurrency": 3, "speeds": {"spread": 1.0}}, clients=4)
    first, second = simulate(exp), simulate(exp)
    for name, tensor in first.model.items():
        assert torch.equal(second.model[name], tensor)
    drop = ("wall_s", "compute_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in first.records] == [
        {k: v for k, v in r.items() if k not in drop} for r in second.records
    ]


def test_speed_factors_are_seeded_lognormal_or_given():
    exp = experiment({"speeds": {"compute_s": 2.0, "spread": 0.5}}, clients=3)
    speeds = client_speeds(exp)
    assert speeds == client_speeds(exp) and len(set(speeds)) == 3
    assert client_speeds(experiment({"speeds": {"spread": 0.5}}, clients=3, seed=4)) != [
        s / 2 for s in speeds
    ]
    assert client_speeds(experiment({"speeds": {"spread": 0.0}})) == [1.0, 1.0, 1.0]
    given = experiment({"speeds": {"compute_s": 2.0, "factors": [1.0, 3.0, 0.5]}})
    assert client_speeds(given) == [2.0, 6.0, 1.0]


def test_with_fewer_in_flight_than_clients_the_idle_ones_are_drawn_by_version():
    exp = experiment({"buffer": 1, "concurrency": 2}, clients=6)
    draws = {tuple(choose_idle(exp, [0, 2, 3, 5], 2, v)) for v in range(20)}
    assert len(draws) > 1 and all(len(d) == 2 and set(d) <= {0, 2, 3, 5} for d in draws)
    assert choose_idle(exp, [4, 1], 2, 7) == [1, 4]
    records = simulate(experiment({"buffer": 1, "concurrency": 2}, clients=6, rounds=4)).records
    assert [r["participants"] for r in records] == [2, 1, 1, 1]


def test_resume_is_refused_with_a_reason(tmp_path: Path):
    with pytest.raises(ValueError, match="asynchronous server's run"):
        simulate(experiment({}), resume=tmp_path / "round-1.pt")


def test_the_example_runs_as_shipped(tmp_path: Path):
    import json

    from typer.testing import CliRunner

    from thinwire.cli import app

    example = Path(__file__).resolve().parents[2] / "examples" / "async.yaml"
    overrides = ["train.rounds=3", f"output={tmp_path}", "train.device=cpu"]
    args = ["run", str(example), "-q", *(x for o in overrides for x in ("--set", o))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [run_dir] = tmp_path.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["updates_sent"] == 9
    assert summary["last_buffered"] == 3 and summary["sim_time_s"] > 0
