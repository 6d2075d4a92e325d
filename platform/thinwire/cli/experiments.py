"""`thinwire run` and `validate`: experiments on their runtime, single runs and sweeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
import yaml
from rich.console import Console

from thinwire.cli._app import (
    ConfigArg,
    SetOpt,
    UnsetOpt,
    app,
    check_runnable,
    console,
    fail,
    load,
    load_runnable,
    run_table,
)
from thinwire.cli.results import show_comparison
from thinwire.config import (
    ConfigError,
    Experiment,
    override_name,
    parse_override,
    parse_sweep_options,
    sweep_points,
)

__all__ = ["run", "validate"]


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Argument(help="Experiment YAML file.", show_default=False)
    ] = None,
    overrides: SetOpt = None,
    unset: UnsetOpt = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="The run's name (default: the file's, plus any --set).", show_default=False
        ),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(help="Repeat with this many seeds (seed, seed+1, ...).", show_default=False),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(help="Grid over a field: --sweep codec.select.density=0.01,0.001"),
    ] = None,
    jobs: Annotated[
        int, typer.Option(help="Runs of a sweep at a time (0: one per core).", min=0)
    ] = 0,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue this run folder from its last checkpoint.", show_default=False),
    ] = None,
    tensorboard: Annotated[
        bool, typer.Option(help="Also log every round for TensorBoard (RUNDIR/tensorboard).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Run an experiment on its runtime (the simulation by default) and write its run folder.

    With seeds or a grid (in the file or as options), each run gets a folder of its own in
    one sweep folder, compared at the end. On a terminal a progress bar shows the live
    round; elsewhere (nohup, a batch system) each round prints one line. A ddp experiment
    launches one local rank per client; Flower and gossip peers run as several commands
    (`thinwire server` / `client`, `thinwire peer`).
    """
    from thinwire.runtimes.ddp import RankFailure
    from thinwire.runtimes.run_folder import resume_run, run_experiment

    mode: Literal["bar", "lines", "off"] = (
        "off" if quiet else "bar" if sys.stderr.isatty() else "lines"
    )
    if resume is not None:
        if config is not None or overrides or unset or seeds or sweep or name:
            fail("--resume continues a run folder as it was configured: give it alone")
        try:
            outcome = resume_run(resume, progress=mode, tensorboard=tensorboard)
        except (ConfigError, ValueError, ImportError) as exc:
            fail(str(exc))
    elif config is None:
        fail("give an experiment file, or --resume RUNDIR")
    else:
        experiment = _experiment(config, overrides or [], unset or [], name, seeds, sweep or [])
        if experiment.seeds is not None or experiment.sweep is not None:
            _run_sweep(config, experiment, jobs, mode)
            return
        try:
            outcome = run_experiment(experiment, progress=mode, tensorboard=tensorboard)
        except (ValueError, ImportError) as exc:
            fail(str(exc))
        except RankFailure as exc:  # a ddp rank died: as `thinwire ddp` reports it
            fail(str(exc), code=1)
    title = yaml.safe_load((outcome.dir / "config.yaml").read_text())["name"]
    console.print(run_table(f"{title} ({outcome.dir})", outcome.summary))


def _experiment(
    config: Path,
    overrides: list[str],
    unset: list[str],
    name: str | None,
    seeds: int | None,
    sweep: list[str],
) -> Experiment:
    """The experiment of `thinwire run`'s options, named by its overrides unless `--name`.

    Checked as `validate` checks it (`preflight`): what would fail at run time fails here.
    """
    experiment = load(config, overrides, unset)
    extra = []
    try:
        settings = dict(parse_override(item) for item in overrides)
        settings.update(dict.fromkeys(unset))
        grid = parse_sweep_options(sweep)
    except ValueError as exc:
        fail(str(exc))
    if name is not None:
        extra.append(f"name={json.dumps(name)}")
    elif settings and "name" not in settings:
        extra.append(f"name={json.dumps(override_name(experiment.name, settings))}")
    if seeds is not None:
        if seeds < 1:
            fail(f"--seeds must be at least 1, got {seeds}")
        extra.append(f"seeds={json.dumps(list(range(experiment.seed, experiment.seed + seeds)))}")
    if grid:
        extra.append(f"sweep={json.dumps({**(experiment.sweep or {}), **grid})}")
    if extra:
        experiment = load(config, [*overrides, *extra], unset)
    return check_runnable(experiment, config)


def _run_sweep(
    config: Path, experiment: Experiment, jobs: int, mode: Literal["bar", "lines", "off"]
) -> None:
    from thinwire.sweep import default_jobs, run_sweep

    try:
        points = sweep_points(experiment, source=str(config))
    except ConfigError as exc:
        fail(str(exc))
    jobs = jobs or default_jobs(len(points))
    folder, outcomes = run_sweep(
        points, output=experiment.output, name=experiment.name, jobs=jobs, progress=mode
    )
    show_comparison([o.dir for o in outcomes], out=folder / "compare.png")
    failed = [o for o in outcomes if o.status != "finished"]
    console.print(f"sweep folder: [bold]{folder}[/] ({len(outcomes)} runs, {len(failed)} failed)")
    if failed:
        raise typer.Exit(1)


@app.command()
def validate(config: ConfigArg, overrides: SetOpt = None, unset: UnsetOpt = None) -> None:
    """Check that an experiment runs on this machine; print it with every default filled in.

    Beyond the file itself, this sets the run up as `run` does (device, output folder, data
    and its split, graph, codecs, privacy) without training.
    """
    experiment = load_runnable(config, overrides, unset)
    console.print(yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False), end="")


@app.command()
def schema(
    field: Annotated[
        str | None,
        typer.Argument(help="A dotted field or section, e.g. codec.select.", show_default=False),
    ] = None,
    markdown: Annotated[
        bool, typer.Option(help="Print the whole reference as Markdown (the docs page).")
    ] = False,
) -> None:
    """Explain the experiment file: every field's type, default, range and meaning."""
    from rich.table import Table

    from thinwire.reference import find, reference_markdown, sections

    if markdown:
        sys.stdout.write(reference_markdown())
        return
    try:
        shown = find(field) if field else sections()
    except KeyError as exc:
        fail(str(exc.args[0]))
    wide = Console(width=max(console.width, 140))
    for section in shown:
        title = section.path or "top level"
        if section.kind is not None:
            title += f" (kind: {section.kind})"
        table = Table(title=f"{title}: {section.doc}", title_justify="left", show_lines=False)
        for column in ("field", "type", "default", "range", "meaning"):
            table.add_column(column, overflow="fold")
        for entry in section.entries:
            table.add_row(entry.path, entry.type, entry.default, entry.range, entry.doc)
        wide.print(table)
