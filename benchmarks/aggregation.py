"""The server's aggregation rules against the plain float32 weighted sum they replaced.

For 10 client updates of n coordinates (n = 1M and 4M), the best of 5 runs of: the old
float32 sum (baseline, this process), the float64 weighted mean (`weighted_mean`, the
default), the same clipped to a norm, the coordinate-wise trimmed mean (beta 0.2) and the
median. One CPU thread.

    python benchmarks/aggregation.py [--clients 10] [--sizes 1000000,4000000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import torch
from rich.console import Console
from rich.table import Table

from thinwire.server.rules import (
    Contribution,
    clipped,
    median,
    trimmed_mean,
    weighted_mean,
)


def float32_mean(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
    """What the Aggregator summed before: float32 products and partial sums."""
    total: dict[str, torch.Tensor] = {}
    weight = sum(w for _, w in contributions)
    for delta, w in contributions:
        for k, v in delta.items():
            total[k] = total[k] + v * w if k in total else v * w
    return {k: v / weight for k, v in total.items()}


def best_s(rule: Callable[[Sequence[Contribution]], object], data: list[Contribution]) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        rule(data)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--sizes", default="1000000,4000000")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rules = {
        "float32 sum (before)": float32_mean,
        "mean (float64)": weighted_mean(),
        "clipped mean": clipped(weighted_mean(), 1.0),
        "trimmed mean (0.2)": trimmed_mean(0.2),
        "median": median(),
    }
    table = Table(title=f"aggregating {args.clients} updates, best of 5, 1 thread")
    table.add_column("rule")
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        table.add_column(f"n={n:.0e} ms", justify="right")
        table.add_column("x before", justify="right")
    rows: dict[str, list[str]] = {name: [] for name in rules}
    for n in sizes:
        g = torch.Generator().manual_seed(0)
        data = [({"w": torch.randn(n, generator=g)}, float(10 + i)) for i in range(args.clients)]
        times = {name: best_s(rule, data) for name, rule in rules.items()}
        base = times["float32 sum (before)"]
        for name, seconds in times.items():
            rows[name] += [f"{1e3 * seconds:.1f}", f"{seconds / base:.2f}"]
    for name, cells in rows.items():
        table.add_row(name, *cells)
    Console().print(table)


if __name__ == "__main__":
    main()
