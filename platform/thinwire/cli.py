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
errors = Console(stderr=True)

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


def _summary_table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("run", "rounds", "final acc", "best acc", "uplink", "downlink", "updates",
                   "sim. network", "wall"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        def pct(key: str, row: dict[str, Any] = row) -> str:
            value = float(row.get(key, math.nan))
            return "-" if math.isnan(value) else f"{value:.2%}"

        table.add_row(
            str(row["run"]),
            f"{row['rounds']:.0f}",
            pct("final_accuracy"),
            pct("best_accuracy"),
            format_bytes(row["total_bytes_up"]),
            format_bytes(row["total_bytes_down"]),
            f"{row['updates_sent']:.0f}",
            f"{row['sim_time_s']:.2f} s",
            f"{row['wall_s']:.2f} s",
        )
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
    with recorder, RoundProgress(
        experiment.train.rounds, description=experiment.name, enabled=enabled
    ) as progress:

        def on_round(record: dict[str, float | int]) -> None:
            recorder.add(record)
            progress.update(record)

        simulate(experiment, on_round=on_round)
    summary = recorder.close()
    console.print(_summary_table(f"{experiment.name}", [{"run": recorder.dir.name, **summary}]))
    console.print(f"run folder: [bold]{recorder.dir}[/]")


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
    console.print(_summary_table("comparison", rows))
    console.print(f"plot: [bold]{out}[/]")


def main() -> None:
    """Entry point of the `thinwire` console script."""
    app()
