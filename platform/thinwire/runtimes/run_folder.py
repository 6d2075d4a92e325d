"""One run into its run folder, fresh or continued from its last checkpoint.

`thinwire run` and every point of a sweep call `run_experiment`, which starts the
experiment's runtime (`runtime.kind`) as it registered itself in `RUNTIMES`: `run(section,
experiment, RunOptions) -> RunOutcome`. The simulation registers here; `ddp` launches its
ranks (`thinwire.runtimes.ddp`); Flower and gossip peers run as several commands, so their
entries (here too) refuse and name them. A plugin runtime registers the same way and may use
`record_run` for the folder. `thinwire run --resume` calls `resume_run`.

Every run leaves the same folder (`thinwire.metrics.RunRecorder`): records, summary with
the run's status, curves, the final model (`model.pt` beside `model.yaml`), and while a
simulation runs, with `runtime.checkpoint_every` set, its latest checkpoint under
`checkpoints/` (removed once the run has finished: only a resume reads it).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from thinwire.checkpoint import latest_checkpoint
from thinwire.config import (
    Experiment,
    FlowerRuntime,
    GossipRuntime,
    SimulationRuntime,
    load_config,
)
from thinwire.learning import save_model
from thinwire.metrics import RoundProgress, RoundRecord, RunRecorder, schema
from thinwire.registry import RUNTIMES
from thinwire.runtimes.simulation import simulate
from thinwire.tensorboard import TensorBoardLog

__all__ = [
    "FinalModel",
    "ProgressMode",
    "RunOptions",
    "RunOutcome",
    "read_status",
    "record_run",
    "resume_run",
    "run_experiment",
]

logger = logging.getLogger(__name__)

ProgressMode = Literal["bar", "lines", "off"]


class RunOutcome(NamedTuple):
    """A finished run: its folder and its summary."""

    dir: Path
    summary: dict[str, float]


class RunOptions(NamedTuple):
    """What `thinwire run` asks of a runtime besides the experiment."""

    run_dir: Path | None = None
    """The run folder; None makes a fresh one under `output`."""
    progress: ProgressMode = "off"
    tensorboard: bool = False
    """Also log every round for TensorBoard (RUNDIR/tensorboard)."""
    on_round: Callable[[RoundRecord], None] | None = None
    """Called with each round's record after it is written (a sweep's view)."""


class FinalModel(NamedTuple):
    """What a run ends with, saved beside its records (`thinwire.learning.save_model`)."""

    state: dict[str, torch.Tensor]
    input_shape: tuple[int, ...]
    num_classes: int


Drive = Callable[[Path, Callable[[RoundRecord], None]], FinalModel]
"""Plays a run's rounds: `drive(run folder, on_round) -> FinalModel`, calling `on_round`
with each round's record."""


def run_experiment(
    experiment: Experiment,
    *,
    run_dir: Path | None = None,
    progress: ProgressMode = "off",
    tensorboard: bool = False,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> RunOutcome:
    """Runs `experiment` on its runtime into a run folder (a fresh one unless `run_dir`).

    Raises:
        ValueError: the runtime does not run from one command (its message names the
            commands), or refuses an option.
        Exception: whatever stopped the run; its folder then says `failed` and why.
    """
    _import_builtin_runtimes()
    run = RUNTIMES.factory(experiment.runtime.kind)
    outcome: RunOutcome = run(
        experiment.runtime, experiment, RunOptions(run_dir, progress, tensorboard, on_round)
    )
    return outcome


def record_run(experiment: Experiment, options: RunOptions, drive: Drive) -> RunOutcome:
    """A run folder around `drive`: records, progress, TensorBoard, summary, final model.

    For a runtime that plays its rounds in this process (the simulation, a plugin's).
    """
    return _run(
        experiment,
        options.run_dir,
        None,
        drive,
        options.progress,
        options.tensorboard,
        options.on_round,
    )


def _import_builtin_runtimes() -> None:
    # ddp registers its entry where it lives; imported only to run, so that importing
    # this module does not load torch.distributed.
    import thinwire.runtimes.ddp  # noqa: F401


def _run_simulation(section: Any, experiment: Experiment, options: RunOptions) -> RunOutcome:
    del section  # checkpoint_every: read by the simulator
    return record_run(
        experiment, options, lambda folder, on_round: _simulate(experiment, folder, None, on_round)
    )


def _several_processes(message: str) -> Callable[[Any, Experiment, RunOptions], RunOutcome]:
    def refuse(section: Any, experiment: Experiment, options: RunOptions) -> RunOutcome:
        del section, experiment, options
        raise ValueError(message)

    return refuse


RUNTIMES.register("simulation", section=SimulationRuntime, factory=_run_simulation)
# Runtimes of several processes, which `thinwire run` (one process) cannot start; their
# entries name the commands that do. Registered here, not in their packages, which would
# make this package and theirs import each other.
RUNTIMES.register(
    "flower",
    section=FlowerRuntime,
    factory=_several_processes(
        "runtime.kind is 'flower': a Flower deployment runs as several processes; run it "
        "with `thinwire server` and one `thinwire client --partition i` per client"
    ),
)
RUNTIMES.register(
    "gossip",
    section=GossipRuntime,
    factory=_several_processes(
        "runtime.kind is 'gossip': each node runs as a `thinwire peer --node i` process and "
        "`thinwire peer --report` writes the run folder; to simulate the peers in one "
        "process, leave runtime.kind at simulation with the topology"
    ),
)


def resume_run(
    run_dir: Path, *, progress: ProgressMode = "off", tensorboard: bool = False
) -> RunOutcome:
    """Continues the run in `run_dir` from its last checkpoint, in the same folder.

    The rounds after the checkpoint are run again (records past it are replaced), so the
    folder ends as an uninterrupted run's would. A run that never reached a checkpoint
    starts over from round 1.

    Raises:
        ConfigError: the folder's `config.yaml` is missing or invalid.
        ValueError: the run already finished, or its checkpoint does not fit the config.
    """
    if read_status(run_dir) == "finished":
        raise ValueError(f"{run_dir}: the run has finished; there is nothing to resume")
    experiment = load_config(run_dir / "config.yaml")
    found = latest_checkpoint(run_dir / "checkpoints")
    if found is None:
        logger.warning("%s has no checkpoint: the run starts again from round 1", run_dir)
        keep, path = 0, None
    else:
        path, keep = found

    def drive(folder: Path, on_round: Callable[[RoundRecord], None]) -> FinalModel:
        return _simulate(experiment, folder, path, on_round)

    return _run(experiment, run_dir, keep, drive, progress, tensorboard)


def read_status(run_dir: Path) -> str | None:
    """The `status` a run folder's `summary.json` records (None when it has none)."""
    try:
        document = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    status = document.get(schema.STATUS) if isinstance(document, dict) else None
    return status if isinstance(status, str) else None


def _run(
    experiment: Experiment,
    run_dir: Path | None,
    keep_rounds: int | None,
    drive: Drive,
    progress: ProgressMode,
    tensorboard: bool,
    listener: Callable[[RoundRecord], None] | None = None,
) -> RunOutcome:
    board = None
    recorder = RunRecorder(experiment, run_dir=run_dir, keep_rounds=keep_rounds)
    with recorder:  # a failure below marks the folder failed, with the error
        if tensorboard:
            board = TensorBoardLog(recorder.dir / "tensorboard")
        rounds = experiment.train.rounds
        with RoundProgress(rounds, description=experiment.name, mode=progress) as bar:

            def on_round(record: RoundRecord) -> None:
                recorder.add(record)
                bar.update(record)
                if board is not None:
                    board(record)
                if listener is not None:
                    listener(record)

            try:
                final = drive(recorder.dir, on_round)
            finally:
                if board is not None:
                    board.close()
        save_model(
            recorder.dir, final.state, experiment.model, final.input_shape, final.num_classes
        )
        summary = recorder.close()
    shutil.rmtree(recorder.dir / "checkpoints", ignore_errors=True)  # only a resume reads them
    return RunOutcome(recorder.dir, summary)


def _simulate(
    experiment: Experiment,
    folder: Path,
    checkpoint: Path | None,
    on_round: Callable[[RoundRecord], None],
) -> FinalModel:
    """The final model, input shape and class count of a star or gossip simulation."""
    checkpoints = folder / "checkpoints"
    if not experiment.decentralized:
        star = simulate(experiment, on_round=on_round, checkpoints=checkpoints, resume=checkpoint)
        return FinalModel(star.model, star.input_shape, star.num_classes)
    from thinwire.topologies.runtime.reports import NodeLog

    with NodeLog(folder / "nodes.jsonl") as nodes:
        gossip = simulate(
            experiment,
            on_round=on_round,
            on_node=nodes.write,
            checkpoints=checkpoints,
            resume=checkpoint,
        )
    return FinalModel(gossip.model, gossip.input_shape, gossip.num_classes)
