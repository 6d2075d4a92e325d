"""The `thinwire` command."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console
from rich.table import Table

from thinwire.config import ConfigError, Experiment, load_config
from thinwire.metrics import format_bytes

app = typer.Typer(
    help="thinwire: communication-efficient federated and decentralized learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True, soft_wrap=True)

ConfigArg = Annotated[Path, typer.Argument(help="Experiment YAML file.", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: --set codec.select.density=0.001"),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _load(path: Path, overrides: list[str] | None) -> Experiment:
    try:
        return load_config(path, overrides or ())
    except ConfigError as exc:
        for problem in exc.problems:
            errors.print(f"[bold red]error:[/] {exc.source}: {problem}", highlight=False)
        raise typer.Exit(2) from None


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2%}"


def _summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("rounds", f"{summary['rounds']:.0f}"),
        ("final accuracy", _pct(float(summary["final_accuracy"]))),
        ("best accuracy", _pct(float(summary["best_accuracy"]))),
        ("uplink bytes", format_bytes(summary["total_bytes_up"])),
        ("downlink bytes", format_bytes(summary["total_bytes_down"])),
        ("updates sent", f"{summary['updates_sent']:.0f}"),
        ("simulated network time", f"{summary['sim_time_s']:.2f} s"),
        ("wall time", f"{summary['wall_s']:.2f} s"),
    ]
    if "last_epsilon" in summary:
        rows.append(("privacy spent (epsilon)", f"{summary['last_epsilon']:.3f}"))
    return rows


def _run_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in _summary_rows(summary):
        table.add_row(name, value)
    return table


def _comparison_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="comparison", title_justify="left")
    table.add_column("run")
    names = [name for name, _ in _summary_rows(rows[0])] if rows else []
    for name in names:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(str(row["run"]), *(value for _, value in _summary_rows(row)))
    return table


@app.command()
def run(
    config: ConfigArg,
    overrides: SetOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run an experiment in simulation and write its run folder."""
    from thinwire.metrics import RoundProgress, RunRecorder
    from thinwire.simulate import simulate

    experiment = _load(config, overrides)
    if experiment.runtime.kind != "simulation":
        _fail(
            f"{config}: runtime.kind is {experiment.runtime.kind!r}; `thinwire run` simulates. "
            "Use `thinwire server` for a Flower deployment or `thinwire peer` for gossip peers."
        )
    recorder = RunRecorder(experiment)
    enabled = not quiet and sys.stderr.isatty()
    with (
        recorder,
        RoundProgress(
            experiment.train.rounds, description=experiment.name, enabled=enabled
        ) as progress,
    ):

        def on_round(record: dict[str, float | int]) -> None:
            recorder.add(record)
            progress.update(record)

        if experiment.decentralized:
            from thinwire.topologies.reports import NodeLog
            from thinwire.topologies.simulation import simulate_gossip

            with NodeLog(recorder.dir / "nodes.jsonl") as nodes:
                simulate_gossip(experiment, on_round=on_round, on_node=nodes.write)
        else:
            simulate(experiment, on_round=on_round)
    summary = recorder.close()
    console.print(_run_table(f"{experiment.name} ({recorder.dir})", summary))


@app.command()
def validate(config: ConfigArg, overrides: SetOpt = None) -> None:
    """Check an experiment file and print it with every default filled in."""
    experiment = _load(config, overrides)
    console.print(yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False), end="")


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run folders to compare.")],
    out: Annotated[Path, typer.Option(help="Where to write the plot.")] = Path("compare.png"),
) -> None:
    """Put several runs side by side: one table and one plot of accuracy against bytes."""
    from thinwire.metrics import compare_runs, plot_comparison

    try:
        records, rows = compare_runs(runs)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    plot_comparison(records, out, title="thinwire runs")
    wide = Console(width=max(console.width, 160))
    wide.print(_comparison_table(rows))
    console.print(f"plot: [bold]{out}[/]")


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
    """Print a topology's degree statistics and spectral gap, and draw its graph to a PNG."""
    from thinwire.topologies import GraphSchedule, draw_graph, summarize, summary_table

    experiment = _load(config, overrides)
    nodes = experiment.data.clients
    try:
        schedule = GraphSchedule(experiment.topology, nodes, seed=experiment.seed)
    except ValueError as exc:
        _fail(f"{config}: topology: {exc}")
    console.print(summary_table(summarize(schedule, rounds=rounds)))
    path = out or Path(experiment.output) / f"{experiment.name}-topology.png"
    title = f"{experiment.name}: {experiment.topology.kind}, {nodes} nodes"
    if schedule.time_varying:
        title += " (round 0)"
    draw_graph(schedule.at(0).graph, path, title=title)
    console.print(f"graph: [bold]{path}[/]")


def _peer_report(experiment: Experiment, out: Path, checkpoint_dir: Path | None) -> None:
    from thinwire.topologies.peer import summarize_peers

    try:
        summary = summarize_peers(experiment, out, checkpoint_dir)
    except ValueError as exc:
        _fail(str(exc))
    table = Table(title=f"{experiment.name}: gossip peers ({out})", title_justify="left")
    for column in ("node", "last round", "bytes sent", "missing messages"):
        table.add_column(column, justify="right")
    for node, last in summary.rounds.items():
        table.add_row(
            str(node), str(last), format_bytes(summary.bytes_sent[node]), str(summary.missing[node])
        )
    console.print(table)
    console.print(
        f"average model: accuracy {_pct(summary.evaluation.accuracy)}, "
        f"loss {summary.evaluation.loss:.4f}; consensus distance {summary.consensus_distance:.4g}"
    )


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
    With --report (no --node), evaluate the average of the peers' final models instead.
    """
    import logging
    import signal
    import threading

    from thinwire.topologies.peer import PeerAbandoned, run_peer

    experiment = _load(config, overrides)
    if experiment.runtime.kind != "gossip":
        _fail(f"{config}: runtime.kind is {experiment.runtime.kind!r}; a peer needs 'gossip'")
    folder = out or Path(experiment.output) / f"{experiment.name}-peers"
    if report:
        if node is not None:
            _fail("--report judges the whole run; leave out --node")
        _peer_report(experiment, folder, checkpoint_dir)
        return
    if node is None:
        _fail("say which node this peer is: --node <id>")
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
        _fail(str(exc))
    state = "finished" if result.completed else "stopped"
    console.print(
        f"node {node} {state} at round {result.last_round} of {experiment.train.rounds}; "
        f"logs in {folder}"
    )


def main() -> None:
    """Entry point of the `thinwire` console script."""
    app()
