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


def main() -> None:
    """Entry point of the `thinwire` console script."""
    app()
