"""The `ddp` runtime: the star's clients as ranks of a torch.distributed job.

Rank r is client r. Every rank holds the global model (the server's `Aggregator`, in the
same `thinwire.runtimes.star.Star` round the simulator drives) and its own `Client`; a round
is

1. the clients sampled for the round train from the global model (`Client.train_round`,
   `train.local_steps` steps: one step of plain SGD makes this synchronous SGD, more make
   local SGD) and encode their update with the experiment's codec and error feedback;
2. every rank's serialized `Update` reaches every rank by an all-gather of bytes (sizes
   first, then padded buffers; `thinwire.ddp.collectives.all_gather_bytes`); a sampled rank
   that stays silent (a send policy) contributes zero bytes;
3. every rank validates and decodes every update and applies the server step in client
   order (`Star.collect` / `Star.finish`), so all ranks hold the same model.

The updates are the very bytes the simulator's clients send, decoded and summed in the
same order, so a seeded experiment gives the simulator's uplink bytes exactly and, on the
CPU, its model bit for bit. There is no broadcast: every rank already holds the model, so
`bytes_down` is 0, and `sim_time_s` is 0 (the network is real: `comm_s` is the measured
exchange time). The all-gather suits every codec, including the per-client seeds of
random-k in a federated run; the allreduce, PowerSGD and Ok-Topk collectives serve DDP
models through `thinwire.ddp.register`.

Rank 0 evaluates and writes the run folder (`thinwire.metrics.RunRecorder`). A rank that
dies makes the others fail their next collective (gloo and NCCL notice the closed
connection, or give up after `runtime.timeout_s`), and each raises `RankFailure`. Under
`thinwire ddp --nproc N` the launcher then stops every rank and reports the first one that
failed; under `torchrun` the elastic agent stops the group and decides about restarts
(`--max-restarts`); a restarted group starts the run afresh in a new run folder.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import socket
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from thinwire.clients import Client
from thinwire.config import DDPRuntime, Experiment
from thinwire.ddp.collectives import (
    Traffic,
    all_gather_bytes,
    all_gather_tensors,
    gathered_overhead,
    leave_process_group,
)
from thinwire.learning import load_federation
from thinwire.metrics import (
    RoundCounts,
    RoundRecord,
    RunRecorder,
    load_records,
    new_run_dir,
    round_record,
    summarize,
)
from thinwire.registry import RUNTIMES
from thinwire.runtimes.run_folder import RunOptions, RunOutcome
from thinwire.runtimes.star import Star
from thinwire.server import Aggregator

__all__ = ["RankFailure", "RankResult", "launch", "run_launched", "run_rank", "run_torchrun_rank"]


class RankFailure(RuntimeError):
    """A rank could not finish the run (a peer died, timed out, or this rank failed)."""


class RankResult(NamedTuple):
    """What a rank ends a run with."""

    records: list[RoundRecord]  # the round records (rank 0; [] on the other ranks)
    model: dict[str, torch.Tensor]  # the final global model (the same on every rank)
    run_dir: Path | None  # the run folder rank 0 wrote; None on the other ranks


def _settings(experiment: Experiment) -> DDPRuntime:
    if not isinstance(experiment.runtime, DDPRuntime):
        raise ValueError(f"runtime.kind is {experiment.runtime.kind!r}, not 'ddp'")
    return experiment.runtime


def _check_world(experiment: Experiment, world: int) -> None:
    if world != experiment.data.clients:
        raise ValueError(
            f"the ddp runtime runs one rank per client: data.clients is "
            f"{experiment.data.clients} but the job has {world} ranks"
        )


def _backend(experiment: Experiment) -> str:
    backend = _settings(experiment).backend
    if backend != "auto":
        return backend
    device = experiment.train.device
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def _on_local_gpu(experiment: Experiment, local_rank: int) -> Experiment:
    """Puts a CUDA rank on GPU `local_rank` (mod the GPUs present); CPU runs are unchanged."""
    if _backend(experiment) != "nccl":
        return experiment
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    train = experiment.train.model_copy(update={"device": f"cuda:{index}"})
    return experiment.model_copy(update={"train": train})


def run_rank(experiment: Experiment, *, run_dir: Path | None = None) -> RankResult:
    """Runs this rank's part of the experiment in an initialized process group.

    Args:
        experiment: the validated experiment (runtime.kind ddp), the same on every rank.
        run_dir: where rank 0 writes the run folder; None makes a fresh one under `output`.

    Returns:
        The records and run folder (rank 0) and the final model.

    Raises:
        ValueError: the job's world size is not `data.clients`.
        RankFailure: a collective failed (a peer died or timed out).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    _check_world(experiment, world)
    federation = load_federation(experiment)
    workspace = federation.workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    x, y = federation.client_data(rank)
    client = Client(index=rank, experiment=experiment, x=x, y=y, workspace=workspace)
    recorder = RunRecorder(experiment, run_dir=run_dir) if rank == 0 else None
    x_test, y_test = federation.test_data()
    star = Star(experiment=experiment, aggregator=aggregator)
    cum_up = 0
    rounds = experiment.train.rounds
    # The recorder as a context: a failing run leaves its finished rounds and is closed.
    with recorder if recorder is not None else contextlib.nullcontext():
        for round in range(1, rounds + 1):
            start = time.perf_counter()
            participants = star.sample(round)
            downlink = star.broadcast(round, participants)
            data, numbers = b"", [math.nan, 0.0, math.nan]
            if rank in participants:
                mine = downlink[rank]
                result = client.train_round(mine.data, round, delivered=mine.delivered)
                data = result.data or b""
                spent = math.nan if result.epsilon is None else result.epsilon
                numbers = [result.train_loss, result.compute_s, spent]
            exchange = time.perf_counter()
            traffic = Traffic()
            blobs, infos = _exchange(data, numbers, workspace.device, traffic, round, rank)
            comm_s = time.perf_counter() - exchange
            for c in participants:
                star.collect(c, blobs[c] or None)
            outcome = star.finish().result
            bytes_up = sum(len(blobs[c]) for c in participants)
            cum_up += bytes_up
            if recorder is None:
                continue
            evaluated = round % experiment.train.eval_every == 0 or round == rounds
            evaluation = aggregator.evaluate(x_test, y_test) if evaluated else None
            losses = [infos[c][0] for c in participants if not math.isnan(infos[c][0])]
            record = round_record(
                round=round,
                evaluation=evaluation,
                train_losses=losses,
                bytes_up=bytes_up,
                bytes_down=0,
                cum_bytes_up=cum_up,
                cum_bytes_down=0,
                updates_sent=sum(1 for c in participants if blobs[c]),
                sim_time_s=0.0,
                compute_s=max(infos[c][1] for c in participants),
                wall_s=time.perf_counter() - start,
                comm_s=comm_s,
                # Sizes and padding of the update all-gather, and the round's statistics.
                overhead_bytes=gathered_overhead([len(b) for b in blobs]) + 24 * world,
                participants=len(participants),
                rejected=len(outcome.rejected),
                censored=len(outcome.silent),
                reused=len(outcome.reused),
            )
            if experiment.privacy is not None:
                spent_all = [infos[c][2] for c in range(world) if not math.isnan(infos[c][2])]
                record.update(RoundCounts(epsilon=max(spent_all, default=0.0)))
            recorder.add(record)
        if recorder is not None:
            recorder.close()
    if recorder is None:
        return RankResult([], aggregator.model, None)
    return RankResult(recorder.records, aggregator.model, recorder.dir)


def _exchange(
    data: bytes,
    numbers: list[float],
    device: torch.device,
    traffic: Traffic,
    round: int,
    rank: int,
) -> tuple[list[bytes], list[list[float]]]:
    """Every rank's update bytes and (train loss, compute seconds, epsilon)."""
    try:
        blobs = all_gather_bytes(data, None, traffic, device=device)
        mine = torch.tensor(numbers, dtype=torch.float64, device=device)
        infos = [t.tolist() for t in all_gather_tensors(mine, None, traffic, counted=0)]
    except (RuntimeError, dist.DistError) as exc:
        raise RankFailure(
            f"rank {rank}, round {round}: the update exchange failed; another rank died or "
            f"stopped answering ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from exc
    return blobs, infos


def _init(experiment: Experiment, init_method: str, rank: int, world: int) -> None:
    dist.init_process_group(
        _backend(experiment),
        init_method=init_method,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=_settings(experiment).timeout_s),
    )


def _spawned(rank: int, raw: dict[str, Any], world: int, init_method: str, run_dir: str) -> None:
    experiment = _on_local_gpu(Experiment.model_validate(raw), rank)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    _init(experiment, init_method, rank, world)
    try:
        run_rank(experiment, run_dir=Path(run_dir))
    finally:
        leave_process_group()


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def launch(experiment: Experiment, *, nproc: int, run_dir: Path) -> None:
    """Runs the experiment on `nproc` local ranks (spawned processes) and waits for them.

    Raises:
        ValueError: `nproc` is not `data.clients`.
        RankFailure: a rank failed or died; the launcher has stopped the others.
    """
    settings = _settings(experiment)
    _check_world(experiment, nproc)
    host = f"[{settings.address}]" if ":" in settings.address else settings.address
    init_method = f"tcp://{host}:{_free_port(settings.address)}"
    raw = experiment.model_dump(mode="json")
    context = mp.start_processes(
        _spawned,
        args=(raw, nproc, init_method, str(run_dir)),
        nprocs=nproc,
        join=False,
        start_method="spawn",
    )
    try:
        while not context.join():
            pass
    except mp.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        raise RankFailure(
            f"rank {exc.error_index} failed: {last}; the other ranks were stopped"
        ) from None
    except mp.ProcessExitedException as exc:
        how = f"signal {exc.signal_name}" if exc.signal_name else f"exit code {exc.exit_code}"
        raise RankFailure(
            f"rank {exc.error_index} died ({how}); the other ranks were stopped"
        ) from None


def run_launched(section: Any, experiment: Experiment, options: RunOptions) -> RunOutcome:
    """`thinwire run` of a ddp experiment: `launch`es one local rank per client.

    As `thinwire ddp --nproc <data.clients>`; rank 0 writes the run folder.

    Raises:
        ValueError: TensorBoard or a round listener is asked for (rank 0 records alone).
        RankFailure: a rank failed or died; the launcher has stopped the others.
    """
    del section  # read by every rank (`_settings`)
    if options.tensorboard or options.on_round is not None:
        raise ValueError(
            "runtime.kind 'ddp': rank 0 writes the records alone; --tensorboard (and a "
            "sweep's round listener) apply to the simulation"
        )
    run_dir = options.run_dir or new_run_dir(experiment.output, experiment.name)
    launch(experiment, nproc=experiment.data.clients, run_dir=run_dir)
    return RunOutcome(run_dir, summarize(load_records(run_dir)))


RUNTIMES.register("ddp", section=DDPRuntime, factory=run_launched)


def run_torchrun_rank(experiment: Experiment) -> RankResult:
    """Runs one rank started by torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT, LOCAL_RANK)."""
    experiment = _on_local_gpu(experiment, int(os.environ.get("LOCAL_RANK", "0")))
    _init(experiment, "env://", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    try:
        return run_rank(experiment)
    finally:
        leave_process_group()
