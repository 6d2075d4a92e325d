"""The `thinwire` Typer app and what its commands share: loading, errors, summary tables."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from thinwire.config import ConfigError, Experiment, load_config
from thinwire.metrics import format_bytes, schema

__all__ = [
    "ConfigArg",
    "SetOpt",
    "UnsetOpt",
    "app",
    "console",
    "errors",
    "fail",
    "load",
    "load_runnable",
    "pct",
    "run_table",
    "summary_rows",
]

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


def fail(message: str, code: int = 2) -> NoReturn:
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


UnsetOpt = Annotated[
    list[str] | None,
    typer.Option("--unset", help="Remove a field or section (its default applies): --unset codec"),
]


def load(path: Path, overrides: list[str] | None, unset: list[str] | None = None) -> Experiment:
    notes: list[str] = []
    try:
        experiment = load_config(path, overrides or (), unset=unset or (), notes=notes)
    except ConfigError as exc:
        _print_problems(exc)
        raise typer.Exit(2) from None
    for note in notes:
        errors.print(f"[bold yellow]note:[/] {note}", highlight=False)
    return experiment


def load_runnable(
    path: Path, overrides: list[str] | None, unset: list[str] | None = None
) -> Experiment:
    """`load`, then `preflight`: the file is valid and runs on this machine."""
    return check_runnable(load(path, overrides, unset), path)


def check_runnable(experiment: Experiment, path: Path) -> Experiment:
    """`preflight` with the CLI's error output: the experiment runs on this machine."""
    from thinwire.preflight import preflight

    try:
        preflight(experiment, str(path))
    except ConfigError as exc:
        _print_problems(exc)
        raise typer.Exit(2) from None
    return experiment


def _print_problems(exc: ConfigError) -> None:
    for problem in exc.problems:
        errors.print(f"[bold red]error:[/] {exc.source}: {problem}", highlight=False)


def pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2%}"


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("rounds", f"{summary[schema.ROUNDS]:.0f}"),
        ("final accuracy", pct(float(summary[schema.FINAL_ACCURACY]))),
        ("best accuracy", pct(float(summary[schema.BEST_ACCURACY]))),
        ("uplink bytes", format_bytes(summary[schema.TOTAL_BYTES_UP])),
        ("downlink bytes", format_bytes(summary[schema.TOTAL_BYTES_DOWN])),
        ("updates sent", f"{summary[schema.UPDATES_SENT]:.0f}"),
        ("simulated network time", f"{summary[schema.SIM_TIME_S]:.2f} s"),
        ("wall time", f"{summary[schema.WALL_S]:.2f} s"),
    ]
    epsilon = schema.summary_key(schema.EPSILON)
    if epsilon in summary:
        rows.append(("privacy spent (epsilon)", f"{summary[epsilon]:.3f}"))
    return rows


def run_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in summary_rows(summary):
        table.add_row(name, value)
    return table
