"""Peers in threads of one process: the same rounds, bytes and models as the simulator."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from thinwire.checkpoint import (
    NodeCheckpoint,
    load_node_checkpoint,
    node_checkpoint_path,
    save_node_checkpoint,
)
from thinwire.topologies.runtime.peer import node_log_path, run_peer, summarize_peers
from thinwire.topologies.runtime.reports import NodeReport, read_node_log
from thinwire.topologies.runtime.simulation import simulate_gossip

from ..gossip_support import experiment, free_ports, peer_runtime

SPARQ = {
    "kind": "sparq",
    "gamma": 0.5,
    "sync_every": 2,
    "threshold": {"kind": "constant", "c": 40.0},
}


def config(ports, **fields):
    return experiment(
        SPARQ,
        {"select": {"kind": "topk", "density": 0.1}},
        nodes=3,
        rounds=4,
        runtime=peer_runtime(ports, **fields),
    )


def run_all(exp, out, *, nodes=3):
    results, errors = {}, []

    def one(i):
        try:
            results[i] = run_peer(exp, i, out_dir=out, startup_timeout_s=30)
        except Exception as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("peers")
    exp = config(free_ports(3))
    return exp, out, run_all(exp, out)


def test_peers_finish_with_the_simulators_bytes_and_models(finished):
    exp, out, results = finished
    assert all(r.completed and r.last_round == 4 and r.first_round == 1 for r in results.values())
    sim = simulate_gossip(exp)
    for node in range(3):
        lines = read_node_log(node_log_path(out, node))
        reports = [NodeReport.from_json(line) for line in lines]
        assert [r.round for r in reports] == [1, 2, 3, 4]
        assert [r.sent for r in reports] == [sim.reports[k][node].sent for k in range(4)]
        assert all(line["push_failures"] == {} for line in lines)
        saved = load_node_checkpoint(node_checkpoint_path(out / "checkpoints", node))
        assert torch.equal(saved.state["x"], sim.models[node])
    summary = summarize_peers(exp, out)
    assert summary.rounds == {0: 4, 1: 4, 2: 4}
    assert summary.consensus_distance == pytest.approx(sim.records[-1]["consensus_distance"])
    assert summary.evaluation.accuracy == pytest.approx(sim.records[-1]["accuracy"])


def test_a_finished_peer_restarted_has_nothing_left_to_do(finished):
    exp, out, _ = finished
    result = run_peer(exp, 1, out_dir=out)
    assert result.completed and result.resumed_from == 4 and result.last_round == 4


def test_a_stopped_peer_ends_before_its_next_round(tmp_path):
    stop = threading.Event()
    stop.set()
    exp = config(free_ports(3))
    result = run_peer(exp, 0, out_dir=tmp_path, stop=stop, startup_timeout_s=0.05)
    assert (result.last_round, result.completed) == (0, False)
    assert not node_checkpoint_path(tmp_path / "checkpoints", 0).exists()


def test_a_checkpoint_of_another_experiment_or_node_is_refused(tmp_path):
    exp = config(free_ports(3))
    path = node_checkpoint_path(tmp_path / "checkpoints", 0)
    save_node_checkpoint(path, NodeCheckpoint(0, 1, {"x": torch.zeros(1)}), digest="other")
    with pytest.raises(ValueError, match="another experiment"):
        run_peer(exp, 0, out_dir=tmp_path)


def test_a_peer_needs_the_gossip_runtime_and_a_node_of_the_graph(tmp_path):
    exp = config(free_ports(3))
    with pytest.raises(ValueError, match=r"--node 3 is not in 0..2"):
        run_peer(exp, 3, out_dir=tmp_path)
    with pytest.raises(ValueError, match="a peer needs runtime.kind: gossip"):
        run_peer(experiment(nodes=3), 0, out_dir=tmp_path)


def test_the_report_command_judges_the_finished_run(finished, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from thinwire.cli import app

    exp, out, _ = finished
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp.model_dump(mode="json")))
    result = CliRunner().invoke(app, ["peer", str(path), "--report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "average model: accuracy" in result.output and "consensus distance" in result.output
    refused = CliRunner().invoke(app, ["peer", str(path), "--report", "--node", "1"])
    assert refused.exit_code == 2 and "leave out --node" in refused.output


def test_the_report_writes_the_simulators_run_folder(finished, tmp_path):
    from thinwire.learning import load_saved_model
    from thinwire.metrics import load_records
    from thinwire.topologies.runtime.peer_report import write_peer_run

    exp, out, _ = finished
    run_dir, _ = write_peer_run(exp, out, run_dir=tmp_path / "run")
    sim = simulate_gossip(exp).records
    records = load_records(run_dir)
    same = ("round", "bytes_up", "bytes_down", "cum_bytes_up", "cum_bytes_down", "updates_sent")
    assert [{k: r[k] for k in same} for r in records] == [{k: r[k] for k in same} for r in sim]
    assert [r["sim_time_s"] for r in records] == pytest.approx([r["sim_time_s"] for r in sim])
    assert records[-1]["accuracy"] == pytest.approx(sim[-1]["accuracy"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds"] == 4
    assert (run_dir / "curves.png").exists() and (run_dir / "nodes.jsonl").exists()
    load_saved_model(run_dir)
