"""Runs a function on N gloo (or NCCL) ranks on 127.0.0.1, each in its own process, with a deadline.

Each rank's return value (or the text of its exception) comes back through a file, and
every rank's fate is reported, so a test can check how ranks end when one of them dies.

Every test gets fresh rank processes and a fresh process group, but not a fresh
interpreter: ranks fork from one forkserver that has imported torch, thinwire and the
workers once, so a rank starts in milliseconds instead of the seconds a spawned
interpreter spends importing torch and what DDP loads on first use (a DDP test used to
pay that per rank, 10-20 s on a loaded machine). The forkserver
has run no torch op and started no thread, so the fork is as clean as a spawn; it stops
after the last DDP test (conftest.py).
"""

import datetime
import multiprocessing.context
import multiprocessing.forkserver
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankOutcome(NamedTuple):
    exitcode: int | None  # None: still running at the deadline (then killed)
    result: Any  # the function's return value, or None
    error: str | None  # the exception's text, or None
    seconds: float  # from start until this rank's process ended


def _entry(rank, world, port, fn, args, out: Path, pg_timeout_s: float, backend: str) -> None:
    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=pg_timeout_s),
        )
        result = fn(rank, world, *args)
        torch.save({"result": result}, out / f"{rank}.pt")
        dist.destroy_process_group()
    except BaseException as exc:  # reported to the test, which decides
        (out / f"{rank}.err").write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        os._exit(1)


PRELOAD = ["torch", "torch._dynamo", f"{__package__}.workers"]
"""What the forkserver imports once, for every rank it forks: workers imports thinwire, and
DDP imports torch._dynamo (with sympy and inductor) on first use, 10+ s of a rank's time."""


def _context() -> multiprocessing.context.BaseContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the forkserver starts: the first run
    return ctx


def stop_forkserver() -> None:
    """Stops the ranks' forkserver (it would otherwise live until the test process ends)."""
    multiprocessing.forkserver._forkserver._stop()  # no public API; a no-op if never started


def run_ranks(
    fn,
    world: int,
    *args,
    tmp: Path,
    timeout_s: float = 150.0,
    pg_timeout_s: float = 60.0,
    backend: str = "gloo",
) -> list[RankOutcome]:
    """Runs fn(rank, world, *args) on `world` ranks; kills what is left at the deadline."""
    ctx = _context()
    out = Path(tmp)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    start = time.monotonic()
    procs = [
        ctx.Process(target=_entry, args=(r, world, port, fn, args, out, pg_timeout_s, backend))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    ended: dict[int, float] = {}
    while len(ended) < world and time.monotonic() - start < timeout_s:
        for r, p in enumerate(procs):
            if r not in ended and not p.is_alive():
                ended[r] = time.monotonic() - start
        time.sleep(0.05)
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    outcomes = []
    for r, p in enumerate(procs):
        result_file, error_file = out / f"{r}.pt", out / f"{r}.err"
        result = (
            torch.load(result_file, weights_only=False)["result"] if result_file.exists() else None
        )
        error = error_file.read_text() if error_file.exists() else None
        code = p.exitcode if r in ended else None
        outcomes.append(RankOutcome(code, result, error, ended.get(r, float("inf"))))
    return outcomes


def results(outcomes: list[RankOutcome]) -> list[Any]:
    """The ranks' results; fails with every rank's error when any rank did not finish."""
    problems = [
        f"rank {r}: exit {o.exitcode}: {o.error}" for r, o in enumerate(outcomes) if o.exitcode != 0
    ]
    assert not problems, "\n".join(problems)
    return [o.result for o in outcomes]
