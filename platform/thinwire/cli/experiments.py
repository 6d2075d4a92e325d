"""`thinwire run`, `validate` and `compare`: simulated experiments and their run folders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console

from thinwire.cli._app import (
    ConfigArg,
    SetOpt,
    app,
    comparison_table,
    console,
    fail,
    load_runnable,
    run_table,
)

__all__ = ["compare", "run", "validate"]


@app.command()
def run(
    config: ConfigArg,
    overrides: SetOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run an experiment in simulation and write its run folder."""
    from thinwire.metrics import RoundProgress, RunRecorder
    from thinwire.simulate import simulate

    experiment = load_runnable(config, overrides)
    if experiment.runtime.kind != "simulation":
        fail(
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
    console.print(run_table(f"{experiment.name} ({recorder.dir})", summary))


@app.command()
def validate(config: ConfigArg, overrides: SetOpt = None) -> None:
    """Check that an experiment runs on this machine; print it with every default filled in.

    Beyond the file itself, this sets the run up as `run` does (device, output folder, data
    and its split, graph, codecs, privacy) without training.
    """
    experiment = load_runnable(config, overrides)
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
        fail(str(exc))
    plot_comparison(records, out, title="thinwire runs")
    wide = Console(width=max(console.width, 160))
    wide.print(comparison_table(rows))
    console.print(f"plot: [bold]{out}[/]")
