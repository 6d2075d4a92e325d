"""`thinwire compare`: runs as a paper's results table, its figure, Markdown and CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from thinwire.cli._app import app, console, errors, fail
from thinwire.metrics import format_bytes
from thinwire.results import Group, GroupRow, Stat

__all__ = ["compare", "show_comparison"]


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run folders or sweep folders.")],
    target: Annotated[
        float | None,
        typer.Option(
            help="Accuracy (%) to count bytes to; default: the highest every group reaches.",
            min=0.0,
            max=100.0,
            show_default=False,
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where to write the figure.")] = Path("compare.png"),
    markdown: Annotated[
        Path | None, typer.Option(help="Also write the table as Markdown.", show_default=False)
    ] = None,
    csv_path: Annotated[
        Path | None,
        typer.Option("--csv", help="Also write the table as CSV.", show_default=False),
    ] = None,
) -> None:
    """Group runs by configuration (seeds together): mean ± std, bytes to a target, curves."""
    show_comparison(runs, out=out, target=target, markdown=markdown, csv_path=csv_path)


def show_comparison(
    paths: Sequence[Path],
    *,
    out: Path,
    target: float | None = None,
    markdown: Path | None = None,
    csv_path: Path | None = None,
) -> None:
    """Prints the results table of `paths` and writes its figure (and exports)."""
    from thinwire.metrics.plots import plot_groups
    from thinwire.results import common_target, group_rows, group_runs, load_runs

    try:
        runs, notes = load_runs(paths)
    except FileNotFoundError as exc:
        fail(str(exc))
    for note in notes:
        errors.print(f"[bold yellow]note:[/] {note}", highlight=False)
    if not runs:
        fail("no run to compare (every one failed or has no round yet)")
    groups = group_runs(runs)
    goal = target / 100 if target is not None else common_target(groups)
    rows = group_rows(groups, goal)
    table = _table(rows, goal)
    Console(width=max(console.width, 180)).print(_rich(table))
    plot_groups({g.label: [r.records for r in g.runs] for g in groups}, out, title=_title(groups))
    console.print(f"figure: [bold]{out}[/]")
    if markdown is not None:
        markdown.write_text(_markdown(table))
        console.print(f"markdown: [bold]{markdown}[/]")
    if csv_path is not None:
        _write_csv(rows, goal, csv_path)
        console.print(f"csv: [bold]{csv_path}[/]")


def _title(groups: Sequence[Group]) -> str:
    return f"{len(groups)} configuration(s), mean ± std over seeds"


def _pm(stat: Stat, fmt: str) -> str:
    mean, std, n = stat.mean, stat.std, stat.n
    if n == 0 or math.isnan(mean):
        return "-"
    shown = _format(mean, fmt)
    return shown if math.isnan(std) else f"{shown} ± {_format(std, fmt)}"


def _format(value: float, fmt: str) -> str:
    return format_bytes(value) if fmt == "bytes" else f"{100 * value:.2f}%"


def _table(rows: Sequence[GroupRow], target: float) -> list[list[str]]:
    """The table as text cells, header first."""
    goal = "-" if math.isnan(target) else f"{100 * target:.0f}%"
    header = [
        "configuration",
        "n",
        "final accuracy",
        "best accuracy",
        f"uplink to {goal}",
        f"total to {goal}",
        "uplink / round",
        "downlink / round",
    ]
    body = []
    for row in rows:
        reached = row.uplink_to_target.n
        runs = row.runs
        marked = " *" if row.incomplete else ""
        count = f"{runs}{marked}"
        to_up = _pm(row.uplink_to_target, "bytes")
        to_total = _pm(row.total_to_target, "bytes")
        if reached < runs:
            to_up += f" ({reached}/{runs} reached)"
            to_total += f" ({reached}/{runs} reached)"
        body.append(
            [
                row.label,
                count,
                _pm(row.final_accuracy, "pct"),
                _pm(row.best_accuracy, "pct"),
                to_up,
                to_total,
                _pm(row.uplink_per_round, "bytes"),
                _pm(row.downlink_per_round, "bytes"),
            ]
        )
    return [header, *body]


def _rich(cells: list[list[str]]) -> Table:
    table = Table(title="results (mean ± std over seeds; * incomplete runs)", title_justify="left")
    for i, name in enumerate(cells[0]):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in cells[1:]:
        table.add_row(*row)
    return table


def _markdown(cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cells[0]) + " |", "|---" + "|---:" * (len(cells[0]) - 1) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells[1:]]
    return "\n".join(lines) + "\n"


def _write_csv(rows: Sequence[GroupRow], target: float, path: Path) -> None:
    fields = [
        "final_accuracy",
        "best_accuracy",
        "uplink_to_target",
        "total_to_target",
        "uplink_per_round",
        "downlink_per_round",
    ]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        header = ["configuration", "runs", "incomplete", "target_accuracy_pct"]
        for field in fields:
            header += [f"{field}_mean", f"{field}_std", f"{field}_n"]
        writer.writerow(header)
        for row in rows:
            line: list[object] = [row.label, row.runs, row.incomplete, 100 * target]
            for field in fields:
                stat = getattr(row, field)
                scale = 100.0 if field.endswith("accuracy") else 1.0
                line += [stat.mean * scale, stat.std * scale, stat.n]
            writer.writerow(line)
