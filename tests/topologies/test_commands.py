"""The `thinwire topology` and `thinwire peer` commands, and `thinwire run` on a graph."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from thinwire.cli import app


def write(tmp_path, **sections):
    raw = {
        "name": "cmd",
        "data": {"dataset": "digits", "clients": 5},
        "model": {"kind": "mlp", "hidden": [8]},
        "train": {"rounds": 2, "local_steps": 1, "batch_size": 16, "device": "cpu"},
        "topology": {"kind": "ring"},
        "output": str(tmp_path / "runs"),
        **sections,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_topology_prints_degrees_and_spectral_gap_and_draws_the_graph(tmp_path):
    png = tmp_path / "ring.png"
    result = invoke("topology", write(tmp_path), "--out", png)
    assert result.exit_code == 0, result.output
    assert "spectral gap" in result.output and "2 / 2.00 / 2" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topology_draws_to_the_output_folder_by_default_and_samples_redrawn_graphs(tmp_path):
    result = invoke("topology", write(tmp_path, topology={"kind": "matching"}), "--rounds", 4)
    assert result.exit_code == 0, result.output
    assert "mean of 4 rounds" in result.output
    assert (tmp_path / "runs" / "cmd-topology.png").exists()


def test_topology_reports_a_graph_that_cannot_be_built(tmp_path):
    result = invoke("topology", write(tmp_path, topology={"kind": "torus"}))
    assert result.exit_code == 2
    assert "topology" in result.output


def test_run_on_a_graph_simulates_gossip_and_logs_every_node(tmp_path):
    result = invoke("run", write(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2] and "consensus_distance" in records[0]
    nodes = [json.loads(line) for line in (run_dir / "nodes.jsonl").read_text().splitlines()]
    assert [(n["round"], n["node"]) for n in nodes[:6]] == [(1, i) for i in range(5)] + [(2, 0)]


def test_peer_needs_the_gossip_runtime_and_a_node(tmp_path):
    simulated = invoke("peer", write(tmp_path), "--node", 0)
    assert simulated.exit_code == 2 and "a peer needs 'gossip'" in simulated.output
    runtime = {"kind": "gossip", "run_id": "r", "pattern": "127.0.0.1:4000{i}", "insecure": True}
    nameless = invoke("peer", write(tmp_path, runtime=runtime))
    assert nameless.exit_code == 2 and "--node <id>" in nameless.output
