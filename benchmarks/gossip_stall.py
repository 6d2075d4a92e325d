"""A stalling attack on a gossip peer: node 0's rounds, memory and final models, with and without.

Four `thinwire peer` processes run CHOCO on a ring of digits (deadline 10 s) twice: once
undisturbed, once while 200 idle push streams and 8 streams that declare 1 GiB and trickle
are held against node 0 (re-opened as node 0 ends them; see `tests/e2e/stall_attack.py`).
The table gives node 0's round times (round 1 counts from the processes' start, so it
includes starting Python and torch and waiting for the other peers), the rounds it missed
or skipped, the peak VmSize and VmRSS of its process, how node 0 ended the attacking
streams, and whether every node's final model equals the undisturbed run's, bit for bit.

    python benchmarks/gossip_stall.py               # about 2 minutes on 2 cores
    python benchmarks/gossip_stall.py --rounds 10 --idle 400
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from rich.console import Console
from rich.table import Table

from thinwire.checkpoint import load_node_checkpoint, node_checkpoint_path
from thinwire.config import load_config
from thinwire.topologies.runtime.peer import node_log_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.stall_attack import LogWatch, MemoryWatch, StallAttack  # noqa: E402

RUN = "stall"
NODES = 4


def _config(folder: Path, rounds: int, deadline_s: float) -> Path:
    ports = []
    for _ in range(NODES):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    raw = {
        "name": "stall",
        "seed": 7,
        "data": {"dataset": "digits", "clients": NODES, "partition": {"kind": "dirichlet"}},
        "model": {"kind": "mlp", "hidden": [16]},
        "train": {"rounds": rounds, "local_steps": 3, "batch_size": 16, "lr": 0.2, "device": "cpu"},
        "topology": {"kind": "ring"},
        "gossip": {"kind": "choco", "gamma": 0.3},
        "runtime": {
            "kind": "gossip",
            "run_id": RUN,
            "peers": [f"127.0.0.1:{p}" for p in ports],
            "listen": "127.0.0.1:{port}",
            "deadline_s": deadline_s,
            "retries": 1,
            "backoff_s": 0.05,
            "insecure": True,
        },
        "output": str(folder / "runs"),
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(folder: Path, args: argparse.Namespace, attack: bool) -> dict[str, Any]:
    folder.mkdir()
    config = _config(folder, args.rounds, args.deadline)
    experiment = load_config(config)
    out = folder / "runs" / "stall-peers"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", "from thinwire.cli import main; main()", "peer"]
    logs = [(folder / f"peer-{i}.log").open("w") for i in range(NODES)]
    peers = [
        subprocess.Popen(
            [*command, str(config), "--node", str(i)],
            stdout=logs[i],
            stderr=subprocess.STDOUT,
            env=env,
        )
        for i in range(NODES)
    ]
    attacker = StallAttack(
        experiment.runtime.peers[0], run_id=RUN, sender=1, idle=args.idle, slow=args.slow
    )
    try:
        with MemoryWatch(peers[0].pid) as memory, LogWatch(node_log_path(out, 0)) as rounds:
            if attack:
                attacker.__enter__()
            try:
                codes = [p.wait(timeout=args.timeout) for p in peers]
            finally:
                if attack:
                    attacker.__exit__(None, None, None)
    finally:
        for p in peers:
            if p.poll() is None:
                p.kill()
                p.wait()
    lines = [json.loads(x) for x in node_log_path(out, 0).read_text().splitlines() if x]
    models = {}
    for node in range(NODES):
        path = node_checkpoint_path(out / "checkpoints", node)
        if path.exists():
            models[node] = load_node_checkpoint(path).state["x"]
    done = [line["round"] for line in lines]
    return {
        "codes": codes,
        "round_s": rounds.round_s,
        "missing": sum(len(line["missing"]) for line in lines),
        "skipped": args.rounds - len(done),
        "rejoined": sum(1 for line in lines if line.get("rejoined")),
        "vmsize_kb": memory.peak["VmSize"],
        "rss_kb": memory.peak["VmRSS"],
        "models": models,
        "outcomes": dict(attacker.outcomes) if attack else {},
        "opened": attacker.opened if attack else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--deadline", type=float, default=10.0)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--slow", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        calm = _run(Path(tmp) / "calm", args, attack=False)
        attacked = _run(Path(tmp) / "attacked", args, attack=True)
    table = Table(title=f"CHOCO ring of {NODES} peers, deadline {args.deadline:g} s")
    columns = (
        "run",
        "node 0 round 1 s",
        "later rounds s (mean / max)",
        "vs undisturbed",
        "missing msgs",
        "rounds skipped",
        "peak VmSize",
        "peak RSS",
        "final models = undisturbed",
    )
    for column in columns:
        table.add_column(column, justify="right")
    calm_mean = statistics.mean(calm["round_s"][1:] or [float("nan")])
    for name, result in (("undisturbed", calm), ("attacked", attacked)):
        first = result["round_s"][0] if result["round_s"] else float("nan")
        times = result["round_s"][1:] or [float("nan")]
        equal = sum(
            1
            for node, x in result["models"].items()
            if node in calm["models"] and torch.equal(x, calm["models"][node])
        )
        table.add_row(
            name,
            f"{first:.1f}",
            f"{statistics.mean(times):.2f} / {max(times):.2f}",
            f"{statistics.mean(times) / calm_mean:.2f}x",
            str(result["missing"]),
            str(result["skipped"]),
            f"{result['vmsize_kb'] / 1024:.0f} MiB",
            f"{result['rss_kb'] / 1024:.0f} MiB",
            f"{equal}/{NODES}",
        )
    console = Console(width=160)
    console.print(table)
    console.print(
        f"attack: {attacked['opened']} streams opened against node 0; how node 0 ended them: "
        f"{attacked['outcomes']}; exit codes {attacked['codes']}"
    )


if __name__ == "__main__":
    main()
