"""What a topology looks like: degree and spectral statistics, a table, a picture.

These are the functions behind `thinwire topology exp.yaml`: `summarize` measures a
`GraphSchedule`, `summary_table` renders the result with rich, and `draw_graph` writes a PNG
with matplotlib's Agg canvas (no display, no pyplot global state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
from rich.table import Table

from thinwire.topologies.graph.mixing import spectrum
from thinwire.topologies.graph.schedule import GraphSchedule

__all__ = ["SERVER", "TopologySummary", "draw_graph", "server_star", "summarize", "summary_table"]


@dataclass(frozen=True, slots=True)
class TopologySummary:
    """Statistics of a topology; for a time-varying one, means over the sampled rounds."""

    kind: str
    nodes: int
    time_varying: bool
    rounds: int  # rounds sampled: 1 for a fixed graph
    edges: float  # edges per round
    degree_min: int  # smallest degree seen in any sampled round
    degree_mean: float
    degree_max: int  # largest degree seen in any sampled round
    diameter: int | None  # of the fixed graph; None when time-varying
    spectral_gap: float  # 1 - |lambda_2(W)|, mean over rounds
    lambda2: float  # |lambda_2(W)|, mean over rounds
    beta: float  # ||I - W||_2, mean over rounds
    averaged_gap: float  # 1 - |lambda_2| of the mean W over the sampled rounds


def summarize(schedule: GraphSchedule, *, rounds: int = 1) -> TopologySummary:
    """Degree and spectral statistics of `schedule`.

    Args:
        schedule: the topology to measure.
        rounds: rounds to sample for a time-varying topology (ignored for a fixed one). Its
            per-round graphs may each be disconnected (gap 0) while their mean mixes well,
            which `averaged_gap` shows.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    count = rounds if schedule.time_varying else 1
    entries = [schedule.at(r) for r in range(count)]
    spectra = [spectrum(e.mixing) for e in entries]
    all_degrees = np.array([[d for _, d in e.graph.degree] for e in entries])
    mean_weights = np.mean([e.mixing for e in entries], axis=0)
    first = entries[0].graph
    return TopologySummary(
        kind=schedule.config.kind,
        nodes=schedule.nodes,
        time_varying=schedule.time_varying,
        rounds=count,
        edges=float(np.mean([e.graph.number_of_edges() for e in entries])),
        degree_min=int(all_degrees.min()),
        degree_mean=float(all_degrees.mean()),
        degree_max=int(all_degrees.max()),
        diameter=None if schedule.time_varying else int(nx.diameter(first)),
        spectral_gap=float(np.mean([s.gap for s in spectra])),
        lambda2=float(np.mean([s.lambda2 for s in spectra])),
        beta=float(np.mean([s.beta for s in spectra])),
        averaged_gap=spectrum(mean_weights).gap,
    )


def summary_table(summary: TopologySummary) -> Table:
    """A two-column rich table of `summary`, ready for `Console.print`."""
    per_round = f" (mean of {summary.rounds} rounds)" if summary.time_varying else ""
    table = Table(title=f"topology: {summary.kind}", show_header=False)
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    rows = [
        ("nodes", str(summary.nodes)),
        ("graph", f"redrawn each round{per_round}" if per_round else "fixed"),
        ("edges", f"{summary.edges:g}"),
        (
            "degree min / mean / max",
            f"{summary.degree_min} / {summary.degree_mean:.2f} / {summary.degree_max}",
        ),
        ("diameter", "-" if summary.diameter is None else str(summary.diameter)),
        ("spectral gap 1 - |lambda_2|", f"{summary.spectral_gap:.4f}"),
        ("|lambda_2|", f"{summary.lambda2:.4f}"),
        ("beta = ||I - W||_2", f"{summary.beta:.4f}"),
    ]
    if summary.time_varying:
        rows.append(("gap of the mean W", f"{summary.averaged_gap:.4f}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


SERVER = "server"
"""The hub node of `server_star`."""

_CIRCULAR = ("ring", "small_world", "regular", "exponential", "complete", "matching")


def server_star(clients: int) -> nx.Graph:
    """The federated star: a server hub and clients 0..clients-1, each linked to it only."""
    graph = nx.Graph(kind="server_star")
    graph.add_node(SERVER)
    graph.add_edges_from((SERVER, i) for i in range(clients))
    return graph


def _layout(graph: nx.Graph) -> dict[Any, np.ndarray]:
    kind = graph.graph.get("kind")
    n = graph.number_of_nodes()
    if kind == "server_star":
        clients = [v for v in graph.nodes if v != SERVER]
        return nx.shell_layout(graph, [[SERVER], clients])
    if kind == "torus" and "shape" in graph.graph:
        _, cols = graph.graph["shape"]
        return {i: np.array([i % cols, -(i // cols)], dtype=float) for i in graph.nodes}
    if kind == "chain":
        return {i: np.array([float(i), 0.0]) for i in graph.nodes}
    if kind == "star":
        return nx.shell_layout(graph, [[0], list(range(1, n))])
    if kind in ("erdos_renyi", "edges"):
        return nx.spring_layout(graph, seed=0)
    return nx.circular_layout(graph)


def _split_edges(
    graph: nx.Graph, positions: dict[Any, np.ndarray]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(edges drawn straight, edges drawn as light arcs)."""
    kind = graph.graph.get("kind")
    if kind in _CIRCULAR:
        # On a circle, edges between neighbouring positions form the ring; the rest are
        # chords, drawn light and bent so a dense or small-world graph stays readable.
        n = graph.number_of_nodes()
        reach = {e: min(abs(e[0] - e[1]), n - abs(e[0] - e[1])) for e in graph.edges}
        lattice = float(np.median(list(reach.values()))) if reach else 1.0
        ring = [e for e, d in reach.items() if d <= max(1.0, lattice)]
        return ring, [e for e, d in reach.items() if d > max(1.0, lattice)]
    # A torus's wrap-around edges would run straight over a whole grid row; bend them.
    if kind != "torus":
        return list(graph.edges), []
    straight: list[tuple[int, int]] = []
    curved: list[tuple[int, int]] = []
    for u, v in graph.edges:
        far = np.abs(positions[u] - positions[v]).max() > 1.5
        (curved if far else straight).append((u, v))
    return straight, curved


def draw_graph(
    graph: nx.Graph, path: str | Path, *, title: str | None = None, dpi: int = 150
) -> Path:
    """Draws `graph` to a PNG file and returns its path (parent folders are created).

    The layout follows the kind in `graph.graph["kind"]`: a grid for a torus, a line for a
    chain, a hub and a circle for a star (the server as hub for `server_star`), a seeded
    spring layout for irregular graphs and a circle otherwise, where edges between
    neighbours on the circle are the ring and the rest light arcs (chords). Edges thin and
    fade as their number grows. Node ids are printed up to 50 nodes.
    """
    # matplotlib loads here, not with the module: the graph builders stay light to import.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    n = graph.number_of_nodes()
    side = min(12.0, max(4.0, 1.2 * math.sqrt(n)))
    figure = Figure(figsize=(side, side))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = _layout(graph)
    node_size = max(6.0, min(600.0 / math.sqrt(max(n, 1)), 2000.0 / max(n, 1)))
    straight, curved = _split_edges(graph, positions)
    # Many edges: thinner and fainter, so their density shows instead of a solid blot.
    crowd = max(1.0, graph.number_of_edges() / 150.0)
    width, alpha = max(0.2, 0.8 / math.sqrt(crowd)), max(0.08, 1.0 / crowd)
    nx.draw_networkx_edges(
        graph, positions, straight, ax=axes, edge_color="#777777", width=width, alpha=alpha
    )
    if curved:
        nx.draw_networkx_edges(
            graph,
            positions,
            curved,
            ax=axes,
            edge_color="#5f7fa8",
            width=width,
            alpha=max(0.15, min(0.6, alpha)),
            arrows=True,
            arrowstyle="-",
            connectionstyle="arc3,rad=0.25",
        )
    clients = [v for v in graph.nodes if v != SERVER]
    nx.draw_networkx_nodes(
        graph, positions, clients, ax=axes, node_size=node_size, node_color="#3b75af"
    )
    if SERVER in graph:
        nx.draw_networkx_nodes(
            graph,
            positions,
            [SERVER],
            ax=axes,
            node_size=1200,
            node_color="#c0392b",
            node_shape="s",
        )
        nx.draw_networkx_labels(
            graph, positions, {SERVER: "server"}, ax=axes, font_size=8, font_color="white"
        )
    if len(clients) <= 50:
        labels = {v: str(v) for v in clients}
        nx.draw_networkx_labels(graph, positions, labels, ax=axes, font_size=7, font_color="white")
    axes.set_title(title or f"{graph.graph.get('kind', 'graph')} ({n} nodes)")
    axes.set_axis_off()
    figure.savefig(target, dpi=dpi, bbox_inches="tight")
    return target
