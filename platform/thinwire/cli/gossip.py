"""`thinwire topology` and `thinwire peer`: decentralized runs on a graph."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from thinwire.cli._app import ConfigArg, SetOpt, app, console, errors, fail, load, pct
from thinwire.config import Experiment
from thinwire.metrics import format_bytes

__all__ = ["peer", "topology"]


@app.command()
def topology(
    config: ConfigArg,
    overrides: SetOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Where to draw the graph [default: <output>/<name>-topology.png]."),
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=1, help="Rounds to sample when the graph is redrawn every round.")
    ] = 20,
) -> None:
    """Print a topology's degree statistics and spectral gap, and draw its graph to a PNG.

    A federated run (topology star, not gossip) is drawn as it runs: the server as the hub.
    """
    from thinwire.topologies.graph import GraphSchedule, draw_graph, summarize, summary_table
    from thinwire.topologies.graph.summary import server_star

    experiment = load(config, overrides)
    nodes = experiment.data.clients
    path = out or Path(experiment.output) / f"{experiment.name}-topology.png"
    if not experiment.decentralized:
        console.print(
            f"star: a server and {nodes} clients; each client exchanges with the server only "
            f"({experiment.clients_per_round} sampled a round)"
        )
        draw_graph(server_star(nodes), path, title=f"{experiment.name}: server and {nodes} clients")
        console.print(f"graph: [bold]{path}[/]")
        return
    try:
        schedule = GraphSchedule(experiment.topology, nodes, seed=experiment.seed)
    except ValueError as exc:
        fail(f"{config}: topology: {exc}")
    console.print(summary_table(summarize(schedule, rounds=rounds)))
    title = f"{experiment.name}: {experiment.topology.kind}, {nodes} nodes"
    if schedule.time_varying:
        title += " (round 0)"
    draw_graph(schedule.at(0).graph, path, title=title)
    console.print(f"graph: [bold]{path}[/]")


def _peer_report(experiment: Experiment, out: Path, checkpoint_dir: Path | None) -> None:
    from thinwire.topologies.runtime.peer_report import write_peer_run

    try:
        run_dir, summary = write_peer_run(experiment, out, checkpoint_dir)
    except ValueError as exc:
        fail(str(exc))
    table = Table(title=f"{experiment.name}: gossip peers ({out})", title_justify="left")
    for column in ("node", "last round", "bytes sent", "missing messages"):
        table.add_column(column, justify="right")
    for node, last in summary.rounds.items():
        table.add_row(
            str(node), str(last), format_bytes(summary.bytes_sent[node]), str(summary.missing[node])
        )
    console.print(table)
    console.print(
        f"average model: accuracy {pct(summary.evaluation.accuracy)}, "
        f"loss {summary.evaluation.loss:.4f}; consensus distance {summary.consensus_distance:.4g}"
    )
    console.print(f"run folder: [bold]{run_dir}[/] (as `thinwire run` writes it)")


@app.command()
def peer(
    config: ConfigArg,
    node: Annotated[
        int | None, typer.Option("--node", min=0, help="This peer's node id, 0..clients-1.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the node logs [default: <output>/<name>-peers]."),
    ] = None,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(help="Folder for the checkpoints [default: <out>/checkpoints]."),
    ] = None,
    startup_timeout: Annotated[
        float, typer.Option(min=0.0, help="Seconds a fresh peer waits for the others.")
    ] = 300.0,
    report: Annotated[
        bool, typer.Option("--report", help="Judge a finished run from its checkpoints.")
    ] = False,
    overrides: SetOpt = None,
) -> None:
    """Run one gossip peer of a decentralized experiment (runtime.kind: gossip).

    Restarted with the same folders, a peer resumes from its checkpoint and rejoins the run.
    SIGTERM or Ctrl-C ends it after the current round; a second one abandons the round.
    With --report (no --node), evaluate the average of the peers' final models and write the
    run folder `thinwire run` writes (records, summary, curves, model) instead.
    """
    import logging
    import signal
    import threading

    from thinwire.topologies.runtime.peer import PeerAbandoned, run_peer

    experiment = load(config, overrides)
    if experiment.runtime.kind != "gossip":
        fail(f"{config}: runtime.kind is {experiment.runtime.kind!r}; a peer needs 'gossip'")
    folder = out or Path(experiment.output) / f"{experiment.name}-peers"
    if report:
        if node is not None:
            fail("--report judges the whole run; leave out --node")
        _peer_report(experiment, folder, checkpoint_dir)
        return
    if node is None:
        fail("say which node this peer is: --node <id>")
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s node-{node} %(levelname)s %(name)s: %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():
            raise PeerAbandoned(signum)
        stop.set()
        errors.print(f"node {node}: finishing the current round; signal again to abandon it")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        result = run_peer(
            experiment,
            node,
            out_dir=folder,
            checkpoint_dir=checkpoint_dir,
            stop=stop,
            startup_timeout_s=startup_timeout,
        )
    except PeerAbandoned as exc:
        name = signal.Signals(exc.signal).name
        errors.print(f"node {node}: abandoned the round on {name}; the last checkpoint stands")
        raise typer.Exit(128 + exc.signal) from None
    except ValueError as exc:
        fail(str(exc))
    state = "finished" if result.completed else "stopped"
    console.print(
        f"node {node} {state} at round {result.last_round} of {experiment.train.rounds}; "
        f"logs in {folder}"
    )
