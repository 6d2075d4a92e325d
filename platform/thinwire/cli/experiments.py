"""`thinwire run`, `validate` and `compare`: simulated experiments and their run folders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

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
    load,
    run_table,
)
from thinwire.config import ConfigError

__all__ = ["compare", "run", "validate"]


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Argument(help="Experiment YAML file.", show_default=False)
    ] = None,
    overrides: SetOpt = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue this run folder from its last checkpoint.", show_default=False),
    ] = None,
    tensorboard: Annotated[
        bool, typer.Option(help="Also log every round for TensorBoard (RUNDIR/tensorboard).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Run an experiment in simulation and write its run folder.

    On a terminal a progress bar shows the live round; elsewhere (nohup, a batch system)
    each round prints one line.
    """
    from thinwire.runner import resume_run, run_experiment

    mode: Literal["bar", "lines", "off"] = (
        "off" if quiet else "bar" if sys.stderr.isatty() else "lines"
    )
    try:
        if resume is not None:
            if config is not None or overrides:
                fail("--resume continues a run folder as it was configured: give no file or --set")
            outcome = resume_run(resume, progress=mode, tensorboard=tensorboard)
        elif config is None:
            fail("give an experiment file, or --resume RUNDIR")
        else:
            outcome = run_experiment(
                load(config, overrides), progress=mode, tensorboard=tensorboard
            )
    except (ConfigError, ValueError, ImportError, FileNotFoundError) as exc:
        fail(str(exc))
    name = yaml.safe_load((outcome.dir / "config.yaml").read_text())["name"]
    console.print(run_table(f"{name} ({outcome.dir})", outcome.summary))


@app.command()
def validate(config: ConfigArg, overrides: SetOpt = None) -> None:
    """Check an experiment file and print it with every default filled in."""
    experiment = load(config, overrides)
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
