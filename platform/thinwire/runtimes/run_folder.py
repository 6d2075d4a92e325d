"""One simulated run into its run folder, fresh or continued from its last checkpoint.

`thinwire run` and every point of a sweep call `run_experiment`; `thinwire run --resume`
calls `resume_run`. Both leave the same folder (`thinwire.metrics.RunRecorder`): records,
summary with the run's status, curves, the final model (`model.pt` beside `model.yaml`),
and while it runs, with `runtime.checkpoint_every` set, its latest checkpoint under
`checkpoints/` (removed once the run has finished: only a resume reads it).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

import torch

from thinwire.checkpoint import latest_checkpoint
from thinwire.config import Experiment, load_config
from thinwire.learning import save_model
from thinwire.metrics import RoundProgress, RoundRecord, RunRecorder, schema
from thinwire.runtimes.simulation import simulate
from thinwire.tensorboard import TensorBoardLog

__all__ = ["ProgressMode", "RunOutcome", "read_status", "resume_run", "run_experiment"]

logger = logging.getLogger(__name__)

ProgressMode = Literal["bar", "lines", "off"]


class RunOutcome(NamedTuple):
    """A finished run: its folder and its summary."""

    dir: Path
    summary: dict[str, float]


def run_experiment(
    experiment: Experiment,
    *,
    run_dir: Path | None = None,
    progress: ProgressMode = "off",
    tensorboard: bool = False,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> RunOutcome:
    """Simulates `experiment` into a run folder (a fresh one unless `run_dir` is given).

    `on_round` is called with each round's record after it is written (a sweep's view).

    Raises:
        ValueError: the experiment is not a simulation.
        Exception: whatever stopped the run; its folder then says `failed` and why.
    """
    if experiment.runtime.kind != "simulation":
        raise ValueError(
            f"runtime.kind is {experiment.runtime.kind!r}; `thinwire run` simulates. Use "
            "`thinwire server` for a Flower deployment or `thinwire peer` for gossip peers."
        )
    return _run(experiment, run_dir, None, None, progress, tensorboard, on_round)


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
        return _run(experiment, run_dir, 0, None, progress, tensorboard)
    path, round = found
    return _run(experiment, run_dir, round, path, progress, tensorboard)


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
    checkpoint: Path | None,
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
                model, shape, classes = _simulate(experiment, recorder.dir, checkpoint, on_round)
            finally:
                if board is not None:
                    board.close()
        save_model(recorder.dir, model, experiment.model, shape, classes)
        summary = recorder.close()
    shutil.rmtree(recorder.dir / "checkpoints", ignore_errors=True)  # only a resume reads them
    return RunOutcome(recorder.dir, summary)


def _simulate(
    experiment: Experiment,
    folder: Path,
    checkpoint: Path | None,
    on_round: Callable[[RoundRecord], None],
) -> tuple[dict[str, torch.Tensor], tuple[int, ...], int]:
    """The final model, input shape and class count of a star or gossip simulation."""
    checkpoints = folder / "checkpoints"
    if not experiment.decentralized:
        star = simulate(experiment, on_round=on_round, checkpoints=checkpoints, resume=checkpoint)
        return star.model, star.input_shape, star.num_classes
    from thinwire.topologies.runtime.reports import NodeLog

    with NodeLog(folder / "nodes.jsonl") as nodes:
        gossip = simulate(
            experiment,
            on_round=on_round,
            on_node=nodes.write,
            checkpoints=checkpoints,
            resume=checkpoint,
        )
    return gossip.model, gossip.input_shape, gossip.num_classes
