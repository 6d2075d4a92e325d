"""How the simulator scales with the number of clients.

Digits, MLP (64 hidden), top-k 1% with error feedback, IID split, 20 rounds, for 10, 100 and
1000 clients. Each size runs in a fresh process so its peak memory is its own. Per size:
wall time per round (rounds 2..20; round 1 pays for warm-up), its ratio to the 10-client
run, peak resident memory, and each client's state against the residual error feedback
needs (one float32 per model coordinate): per-client state must not grow faster than that.

    python benchmarks/simulation.py [--clients 10,100,1000] [--rounds 20] [--json out.json]

With `--vs-flower` it runs the same dense FedAvg experiment (digits MLP, 10 local steps;
`flower_fedavg.py`) on thinwire's simulator and on Flower's simulation engine (Ray, one CPU
per ClientApp actor; `pip install "thinwire[simulation]"`) for each client count (default
100 and 1,000), each engine in a fresh process: seconds per round (median of rounds 2..R,
round 1 pays for start-up, Ray's included), the whole run, and peak memory of the process
and all its children (Ray's raylet, GCS and workers), side by side:

    python benchmarks/simulation.py --vs-flower [--clients 100,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from thinwire.config import parse_config
from thinwire.metrics import format_bytes, schema
from thinwire.runtimes.simulation import simulate
from thinwire.statetree import flatten


def experiment(clients: int, rounds: int):
    return parse_config(
        {
            "name": f"scale-{clients}",
            "data": {"dataset": "digits", "clients": clients, "partition": {"kind": "iid"}},
            "model": {"kind": "mlp", "hidden": [64]},
            "train": {
                "rounds": rounds,
                "local_steps": 10,
                "batch_size": 32,
                "lr": 0.05,
                "device": "cpu",
            },
            "codec": {"select": {"kind": "topk", "density": 0.01}, "error_feedback": True},
        }
    )


def child(clients: int, rounds: int) -> dict[str, float]:
    result = simulate(experiment(clients, rounds))
    walls = [r[schema.WALL_S] for r in result.records[1:]]
    state_bytes = [
        sum(
            v.numel() * v.element_size() for v in flatten(s).values() if isinstance(v, torch.Tensor)
        )
        for s in result.client_states
    ]
    model_bytes = sum(v.numel() * 4 for v in result.model.values())
    return {
        "clients": clients,
        "round_s": statistics.median(walls),
        "per_client_ms": 1e3 * statistics.median(walls) / clients,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "state_bytes_per_client": statistics.mean(state_bytes),
        "residual_bytes": model_bytes,
        "final_accuracy": result.records[-1][schema.ACCURACY],
    }


def tree_rss() -> int:
    """Resident bytes of this process and every descendant (read from /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry.name)] = int(fields.get("PPid", "0"))
        rss[int(entry.name)] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    family, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        family.update(children)
        frontier = children
    return sum(rss.get(pid, 0) for pid in family)


class PeakMemory:
    """Samples `tree_rss` every 0.1 s on a thread; `peak` is the largest seen."""

    def __enter__(self) -> PeakMemory:
        self.peak = tree_rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, tree_rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss())


def engine_child(engine: str, clients: int, rounds: int) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).parent))
    import flower_fedavg

    start = time.perf_counter()
    with PeakMemory() as memory:
        if engine == "thinwire":
            result = simulate(flower_fedavg.experiment(clients, rounds))
            round_s = [r[schema.WALL_S] for r in result.records]
            accuracy = result.records[-1][schema.ACCURACY]
        else:
            from flwr.simulation import run_simulation

            out = Path(os.environ["TW_BENCH_OUT"])
            run_simulation(
                server_app=flower_fedavg.server_app,
                client_app=flower_fedavg.client_app,
                num_supernodes=clients,
                backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
            )
            measured = json.loads(out.read_text())
            round_s, accuracy = measured["round_s"], measured["final_accuracy"]
    return {
        "engine": engine,
        "clients": clients,
        "round_s": statistics.median(round_s[1:]) if len(round_s) > 1 else round_s[0],
        "first_round_s": round_s[0],
        "total_s": time.perf_counter() - start,
        "peak_bytes": memory.peak,
        "final_accuracy": accuracy,
    }


def vs_flower(clients: list[int], rounds: int, json_path: str | None) -> None:
    rows = []
    for n in clients:
        for engine in ("thinwire", "flower"):
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
                ),
                "TW_BENCH_CLIENTS": str(n),
                "TW_BENCH_ROUNDS": str(rounds),
                "TW_BENCH_OUT": f"/tmp/thinwire-bench-{os.getpid()}-{engine}-{n}.json",
                "RAY_DEDUP_LOGS": "0",
            }
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--engine",
                    engine,
                    "--child",
                    str(n),
                    "--rounds",
                    str(rounds),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
            )
            if out.returncode != 0:
                raise SystemExit(f"{engine} with {n} clients failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = Table(
        title=f"thinwire simulator vs Flower simulation (Ray): dense FedAvg, digits MLP, "
        f"{rounds} rounds, {os.cpu_count()} cores"
    )
    for column in (
        "clients",
        "engine",
        "s / round",
        "vs thinwire",
        "round 1 s",
        "whole run s",
        "peak memory",
        "vs thinwire",
        "final acc",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        base = next(r for r in rows if r["clients"] == row["clients"] and r["engine"] == "thinwire")
        table.add_row(
            str(row["clients"]),
            row["engine"],
            f"{row['round_s']:.3f}",
            f"{row['round_s'] / base['round_s']:.1f}x",
            f"{row['first_round_s']:.2f}",
            f"{row['total_s']:.1f}",
            format_bytes(row["peak_bytes"]),
            f"{row['peak_bytes'] / base['peak_bytes']:.1f}x",
            f"{row['final_accuracy']:.2%}",
        )
    Console(width=140).print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--vs-flower", action="store_true")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--engine", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None and args.engine is not None:
        print(json.dumps(engine_child(args.engine, args.child, args.rounds)))
        return
    if args.vs_flower:
        clients = [int(c) for c in (args.clients or "100,1000").split(",")]
        vs_flower(clients, args.rounds or 5, args.json)
        return
    args.clients = args.clients or "10,100,1000"
    args.rounds = args.rounds or 20
    if args.child is not None:
        print(json.dumps(child(args.child, args.rounds)))
        return

    rows = []
    for n in (int(c) for c in args.clients.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), "--rounds", str(args.rounds)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]
    table = Table(title=f"simulator scaling (digits MLP, top-k 1% + EF, {args.rounds} rounds)")
    for column in (
        "clients",
        "s / round",
        "vs first",
        "ms / client-round",
        "peak RSS",
        "state / client",
        "state / residual",
        "final acc",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["clients"]),
            f"{row['round_s']:.3f}",
            f"{row['round_s'] / base['round_s']:.1f}x",
            f"{row['per_client_ms']:.2f}",
            format_bytes(row["peak_rss_bytes"]),
            format_bytes(row["state_bytes_per_client"]),
            f"{row['state_bytes_per_client'] / row['residual_bytes']:.2f}",
            f"{row['final_accuracy']:.2%}",
        )
    Console(width=120).print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
