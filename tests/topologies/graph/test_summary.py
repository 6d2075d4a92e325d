"""Topology summaries, the rich table and the PNG drawing."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from thinwire.config import (
    ChainTopology,
    ErdosRenyiTopology,
    MatchingTopology,
    RingTopology,
    SmallWorldTopology,
    StarTopology,
    TorusTopology,
)
from thinwire.topologies.graph import (
    GraphSchedule,
    build_graph,
    draw_graph,
    summarize,
    summary_table,
)


def test_summary_of_a_fixed_ring():
    summary = summarize(GraphSchedule(RingTopology(), 10, seed=0), rounds=50)
    assert summary.rounds == 1 and not summary.time_varying
    assert (summary.nodes, summary.edges) == (10, 10)
    assert (summary.degree_min, summary.degree_mean, summary.degree_max) == (2, 2.0, 2)
    assert summary.diameter == 5
    assert summary.spectral_gap == pytest.approx(1 - (1 + 2 * math.cos(2 * math.pi / 10)) / 3)
    assert summary.averaged_gap == pytest.approx(summary.spectral_gap)
    assert summary.lambda2 == pytest.approx(1 - summary.spectral_gap)


def test_summary_of_random_matchings_shows_that_they_mix_only_over_time():
    summary = summarize(GraphSchedule(MatchingTopology(), 8, seed=0), rounds=30)
    assert summary.time_varying and summary.rounds == 30
    assert summary.degree_max == 1 and summary.diameter is None
    assert summary.spectral_gap == pytest.approx(0.0, abs=1e-9)
    assert summary.averaged_gap > 0.2


def test_summary_table_lists_the_spectral_quantities():
    console = Console(record=True, width=100)
    console.print(summary_table(summarize(GraphSchedule(MatchingTopology(), 8, seed=0), rounds=4)))
    text = console.export_text()
    for label in ("spectral gap", "beta", "degree min / mean / max", "gap of the mean W"):
        assert label in text


def test_summarize_needs_a_round():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        summarize(GraphSchedule(RingTopology(), 4, seed=0), rounds=0)


@pytest.mark.parametrize(
    ("config", "nodes"),
    [
        (TorusTopology(), 9),
        (StarTopology(), 6),
        (ChainTopology(), 4),
        (ErdosRenyiTopology(p=0.5), 8),
        (RingTopology(), 60),
    ],
    ids=lambda x: getattr(x, "kind", str(x)),
)
def test_draw_graph_writes_a_png(tmp_path, config, nodes):
    target = draw_graph(build_graph(config, nodes, seed=0), tmp_path / "out" / "graph.png")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_federated_star_is_drawn_with_the_server_as_its_hub(tmp_path):
    from thinwire.topologies.graph.summary import SERVER, server_star

    graph = server_star(10)
    assert graph.degree(SERVER) == 10 and all(graph.degree(i) == 1 for i in range(10))
    path = draw_graph(graph, tmp_path / "star.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_topology_command_draws_a_star_experiment_around_its_server(tmp_path):
    from typer.testing import CliRunner

    from thinwire.cli import app

    config = tmp_path / "exp.yaml"
    config.write_text("name: s\ndata: {clients: 5}\n")
    result = CliRunner().invoke(app, ["topology", str(config), "--out", str(tmp_path / "t.png")])
    assert result.exit_code == 0, result.output
    assert "a server and 5 clients" in result.output
    assert (tmp_path / "t.png").exists()


def test_ring_edges_and_chords_are_told_apart_on_a_circle():
    from thinwire.topologies.graph.summary import _layout, _split_edges

    graph = build_graph(SmallWorldTopology(k=4, p=0.2), 60, seed=1)
    ring, chords = _split_edges(graph, _layout(graph))
    assert len(ring) + len(chords) == graph.number_of_edges()
    assert chords and len(ring) > len(chords)  # rewiring 20% leaves the lattice the majority
