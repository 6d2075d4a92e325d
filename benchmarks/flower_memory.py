"""Peak memory of every process of a thinwire star on real Flower 1.42 processes.

Three clients train an MLP [h, h] on digits (`--size`: 100M parameters by default) for
`--rounds` rounds (round 2 is the steady state: compressed deltas both ways), top-1% with
error feedback both ways, on loopback. The clients are `thinwire client` SuperNodes, each
with its ClientApp executor (one long-lived process per node); `--fresh-process` gives them
Flower's fresh ClientApp process per message instead. While the run lasts, every process
of the deployment (SuperLink, SuperNodes, SuperExecs, the ClientApp processes, the
ServerApp that runs thinwire's server, and `thinwire server`, which submits the run) is
polled every `--poll` seconds for its peak resident set
(`VmHWM` in /proc/<pid>/status), and the table reports the largest peak per kind of process
against the model's own size (parameters x 4 bytes). VmHWM never decreases, so a poll misses
at most what a process adds in its last `--poll` seconds before it exits.

    python benchmarks/flower_memory.py [--size 100M] [--rounds 2] [--fresh-process]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from flower_star import (
    CLIENTS,
    Processes,
    console_scripts,
    flwr_json,
    free_port,
    healthy,
    thinwire_client,
    wait_for,
)

from thinwire.config import parse_config
from thinwire.runtimes.flower.deploy import (
    flower_environment,
    superlink_command,
    write_connection,
)

SIZES = {"10M": 3125, "100M": 9962}  # hidden width h of an MLP [h, h] on 8x8 digits
KINDS = (  # (what a command line contains, the kind reported), first match wins
    ("flwr-clientapp", "ClientApp (per message)"),
    ("clientapp_executor", "ClientApp executor (per node)"),
    ("thinwire client", "thinwire client (supervisor)"),
    ("flwr-serverapp", "ServerApp"),
    ("flower-superexec", "SuperExec"),
    ("flower-superlink", "SuperLink"),
    ("flower-supernode", "SuperNode"),
    ("thinwire server", "thinwire server"),
)


def parameters(hidden: int) -> int:
    return 64 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10


def _kind(pid: int) -> str | None:
    try:
        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    return next((kind for marker, kind in KINDS if marker in line), None)


def _peak_kib(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def _family_of(roots: set[int]) -> set[int]:
    """The started processes and every process below them (by parent), or in their sessions."""
    parents: dict[int, int] = {}
    sessions: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])  # after the state: ppid, pgrp, session
            sessions[int(entry.name)] = int(fields[3])
    family = {pid for pid, session in sessions.items() if session in roots} | set(roots)
    grown = True
    while grown:
        below = {pid for pid, parent in parents.items() if parent in family} - family
        family |= below
        grown = bool(below)
    return family


class PeakWatcher:
    """Polls the processes of the given sessions for their VmHWM until stopped."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.sessions: set[int] = set()
        self.peaks: dict[int, tuple[str, int]] = {}  # pid -> (kind, peak KiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            for pid in _family_of(set(self.sessions)):
                kind, peak = _kind(pid), _peak_kib(pid)
                if kind is not None and peak is not None:
                    old = self.peaks.get(pid, (kind, 0))[1]
                    self.peaks[pid] = (kind, max(old, peak))


def run(
    hidden: int, rounds: int, fresh: bool, poll_s: float, timeout_s: float, work: Path
) -> tuple[dict[str, tuple[int, int]], str]:
    """Peak KiB (largest, and how many processes) per kind of process in the run,
    and how the run ended (a run cut off by `timeout_s` reports the peaks seen until then)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    env = flower_environment(
        {
            **os.environ,
            "PATH": f"{console_scripts(work / 'bin')}{os.pathsep}{os.environ['PATH']}",
            "FLWR_HOME": str(work / "flwr_home"),
        }
    )
    port = free_port()
    write_connection(Path(env["FLWR_HOME"]), address=f"127.0.0.1:{port}", insecure=True)
    topk = {"scope": "model", "select": {"kind": "topk", "density": 0.01}, "error_feedback": True}
    raw: dict[str, Any] = {
        "name": "bench-memory",
        "seed": 0,
        "data": {"dataset": "digits", "clients": CLIENTS},
        "model": {"kind": "mlp", "hidden": [hidden, hidden]},
        "train": {
            "rounds": rounds,
            "local_steps": 2,
            "lr": 0.01,
            "eval_every": rounds,
            "device": "cpu",
        },
        "runtime": {"kind": "flower", "insecure": True, "round_timeout_s": 1200},
        "codec": topk,
        "downlink": topk,
        "output": str(work / "runs"),
    }
    config = work / "experiment.yaml"
    config.write_text(yaml.safe_dump(parse_config(raw).model_dump(mode="json")))
    processes = Processes(work / "logs", env)
    with PeakWatcher(poll_s) as watcher, contextlib.ExitStack() as stack:
        stack.callback(processes.stop)
        watcher.sessions.add(processes.start("superlink", superlink_command(port=port)).pid)
        wait_for(lambda: healthy(port), 60, "the SuperLink did not start")
        for i in range(CLIENTS):
            scheme = "topk-both-fresh" if fresh else "topk-both"
            command = thinwire_client(f"127.0.0.1:{port}", i, work / f"state-{i}", scheme)
            watcher.sessions.add(processes.start(f"supernode-{i}", command).pid)

        def online() -> bool:
            nodes = flwr_json(env, "supernode", "ls").get("nodes", [])
            return sum(n["status"] == "online" for n in nodes) == CLIENTS

        wait_for(online, 120, "the SuperNodes did not connect")
        server = processes.start(
            "server", ["thinwire", "server", str(config), "--superlink", f"127.0.0.1:{port}"]
        )
        watcher.sessions.add(server.pid)
        try:
            code = server.wait(timeout=timeout_s)
            ended = "finished" if code == 0 else f"failed (see {work / 'logs' / 'server.log'})"
        except subprocess.TimeoutExpired:
            ended = f"cut off after {timeout_s:.0f} s (peaks until then)"
        time.sleep(2 * poll_s)
    summary: dict[str, tuple[int, int]] = {}
    for kind, peak in watcher.peaks.values():
        largest, count = summary.get(kind, (0, 0))
        summary[kind] = (max(largest, peak), count + 1)
    return summary, ended


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="100M", choices=list(SIZES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fresh-process", action="store_true", help="Flower's per-message one")
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the run may take")
    parser.add_argument("--out", type=Path, default=Path("benchmarks") / "results")
    args = parser.parse_args()
    hidden = SIZES[args.size]
    model_mb = parameters(hidden) * 4 / 2**20
    work = args.out / "flower_memory"
    shutil.rmtree(work, ignore_errors=True)
    summary, ended = run(hidden, args.rounds, args.fresh_process, args.poll, args.timeout, work)
    clientapps = "a fresh process per message" if args.fresh_process else "the executor"
    print(
        f"{CLIENTS} clients, MLP [{hidden}, {hidden}] on digits ({parameters(hidden):,} "
        f"parameters, {model_mb:.0f} MiB as float32), {args.rounds} round(s), top-1% with "
        f"error feedback both ways, loopback, ClientApps in {clientapps}; the run {ended}"
    )
    print("process | processes seen | peak RSS MiB (largest) | x model size")
    print("--- | --- | --- | ---")
    for _, kind in KINDS:
        if kind in summary:
            peak, count = summary[kind]
            print(f"{kind} | {count} | {peak / 1024:.0f} | {peak / 1024 / model_mb:.1f}x")
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average at the end: {' '.join(load)}")


if __name__ == "__main__":
    main()
