"""`thinwire ddp`: an experiment's clients as ranks of a torch.distributed job."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from thinwire.cli._app import ConfigArg, SetOpt, app, console, fail, load, run_table

__all__ = ["ddp"]


@app.command()
def ddp(
    config: ConfigArg,
    overrides: SetOpt = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            min=1,
            help="Start this many local ranks (one per client); omit under torchrun.",
        ),
    ] = None,
) -> None:
    """Run an experiment on torch.distributed ranks (gloo or NCCL), one rank per client.

    `thinwire ddp exp.yaml --nproc 4` starts 4 ranks on this machine. Across machines, start
    it on each with torchrun: `torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d
    --rdzv-endpoint HOST:29500 --no-python thinwire ddp exp.yaml`. A file whose runtime is
    the simulation runs as is (the same file drives both runtimes).
    """
    from thinwire.metrics import load_records, new_run_dir, summarize
    from thinwire.runtimes.ddp import RankFailure, launch, run_torchrun_rank

    items = list(overrides or [])
    kind = load(config, items).runtime.kind
    if kind in ("gossip", "flower"):
        fail(f"{config}: runtime.kind is {kind!r}; `thinwire ddp` runs the star as ranks")
    if kind == "simulation":
        items.insert(0, "runtime.kind=ddp")
    experiment = load(config, items)
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    try:
        if nproc is not None:
            if nproc != experiment.data.clients:
                fail(
                    f"--nproc {nproc}: the ddp runtime runs one rank per client, and "
                    f"data.clients is {experiment.data.clients}"
                )
            run_dir = new_run_dir(experiment.output, experiment.name)
            launch(experiment, nproc=nproc, run_dir=run_dir)
            summary = summarize(load_records(run_dir))
            console.print(run_table(f"{experiment.name} ({run_dir})", summary))
        elif under_torchrun:
            result = run_torchrun_rank(experiment)
            if result.run_dir is not None:
                summary = summarize(result.records)
                console.print(run_table(f"{experiment.name} ({result.run_dir})", summary))
        else:
            fail("give --nproc N to start N local ranks, or start each rank with torchrun")
    except (RankFailure, ValueError) as exc:
        fail(str(exc), code=1)
