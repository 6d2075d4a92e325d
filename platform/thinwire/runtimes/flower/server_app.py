"""thinwire's Flower ServerApp: the star's server on Flower's deployment engine.

Flower loads `app` from the run's app folder (`[tool.flwr.app.components] serverapp =
"thinwire.runtimes.flower.server_app:app"`, written by `thinwire server`) in a `flwr-serverapp`
process next to the SuperLink. `main` reads the experiment from the run config, builds the
same federation and `Aggregator` as the simulator, and hands the rounds to `FlowerStar`
(`thinwire.runtimes.flower.rounds`): a fast loop over the grid that drives `StarStrategy`,
thinwire's Flower `Strategy` around the Aggregator (`thinwire.runtimes.flower.strategy`), and
writes the run folder as rounds finish.

Run config (`[tool.flwr.app.config]`, see `thinwire.runtimes.flower.messages`):

    experiment   the experiment YAML, resolved (the same file drives simulation)
    run-dir      absolute run folder to write; "" makes a new one under `output`
    resume       a checkpoint (file, checkpoints folder or run folder) to continue; "" none
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from thinwire.learning import load_federation
from thinwire.metrics import RunRecorder
from thinwire.runtimes.flower.buffered import FlowerBuffered
from thinwire.runtimes.flower.messages import read_run_config
from thinwire.runtimes.flower.rounds import FlowerStar

__all__ = ["app", "main"]

logger = logging.getLogger(__name__)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Runs the experiment in the run config over `grid` and writes its run folder."""
    _log_to_stderr()
    settings = read_run_config(context.run_config)
    experiment = settings.experiment
    federation = load_federation(experiment)
    run_dir = Path(settings.run_dir) if settings.run_dir else None
    with RunRecorder(experiment, run_dir=run_dir) as recorder:
        logger.info("run folder: %s", recorder.dir)
        loop = FlowerBuffered if experiment.server is not None else FlowerStar
        star = loop(
            grid=grid,
            experiment=experiment,
            federation=federation,
            recorder=recorder,
            resume=Path(settings.resume) if settings.resume else None,
        )
        star.run()
    logger.info("finished %d rounds; run folder: %s", len(recorder.records), recorder.dir)


def _log_to_stderr() -> None:
    # The ServerApp process is thinwire's own entry point: its stderr is what `flwr log`
    # and `flwr run --stream` show, so thinwire's INFO records go there.
    root = logging.getLogger("thinwire")
    handler = _stderr_handler()
    if handler not in root.handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)


@functools.cache
def _stderr_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    return handler
