"""How the simulator scales with the number of clients.

Digits, MLP (64 hidden), top-k 1% with error feedback, IID split, 20 rounds, for 10, 100 and
1000 clients. Each size runs in a fresh process so its peak memory is its own. Per size:
wall time per round (rounds 2..20; round 1 pays for warm-up), its ratio to the 10-client
run, peak resident memory, and each client's state against the residual error feedback
needs (one float32 per model coordinate): per-client state must not grow faster than that.

    python benchmarks/simulation.py [--clients 10,100,1000] [--rounds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

import torch
from rich.console import Console
from rich.table import Table

from thinwire.config import parse_config
from thinwire.metrics import format_bytes
from thinwire.simulate import simulate
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
    torch.set_num_threads(2)
    result = simulate(experiment(clients, rounds))
    walls = [r["wall_s"] for r in result.records[1:]]
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
        "final_accuracy": result.records[-1]["accuracy"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="10,100,1000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
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
