"""Mutated updates through the star server's whole receive path: where each one stops.

N updates, each a valid update of one of 15 uplink codecs (every selector, quantizer and
their combinations, a wavelet transform; a 4810-parameter MLP) damaged by one of eight
mutations (bit flips, byte splices, truncation, another codec's support or values spliced
in, extreme or non-finite numbers, count and shape lies, metric and header lies), go
through `Aggregator.receive` and `finish_round` exactly as a client's bytes would. The
table counts where they stopped: accepted into the average, refused by the wire decoder
and header checks, by the form check, by the codec's decode, or by the finite / norm bound;
`internal` (any other exception) must stay 0. After every message the model is checked
finite and of the right shapes. Also printed: time per message against a valid message's
(the baseline, measured in the same process), the slowest case, and peak memory.

    python benchmarks/fuzz.py N [--seed S]

The mutation code is shared with the property tests (`tests/receive_fuzz.py`).
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from receive_fuzz import MUTATIONS, OUTCOMES, mutate, receive, servers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="number of mutated messages")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)  # each refusal logs one warning

    fleet = servers()
    donors = [s.valid for s in fleet]
    baseline = []
    for _ in range(20):
        for server in fleet:
            start = time.perf_counter()
            receive(server, server.valid)
            baseline.append(time.perf_counter() - start)
    base = statistics.mean(baseline)

    rng = random.Random(args.seed)
    kinds = sorted(MUTATIONS)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    times: dict[str, list[float]] = collections.defaultdict(list)
    slowest = (0.0, "", "", "")
    began = time.perf_counter()
    for i in range(args.n):
        server, kind = rng.choice(fleet), rng.choice(kinds)
        data = mutate(rng, kind, server.valid, donors)
        start = time.perf_counter()
        outcome = receive(server, data)
        elapsed = time.perf_counter() - start
        counts[kind, outcome.stage] += 1
        times[outcome.stage].append(elapsed)
        if elapsed > slowest[0]:
            slowest = (elapsed, server.name, kind, outcome.stage)
        if (i + 1) % 10000 == 0:
            print(f"{i + 1} messages, {time.perf_counter() - began:.0f} s", file=sys.stderr)

    console = Console()
    table = Table(title=f"{args.n} mutated updates through the receive path (seed {args.seed})")
    table.add_column("mutation")
    for stage in OUTCOMES:
        table.add_column(stage, justify="right")
    for kind in kinds:
        table.add_row(kind, *(str(counts[kind, stage]) for stage in OUTCOMES))
    totals = [sum(counts[k, stage] for k in kinds) for stage in OUTCOMES]
    table.add_row("all", *(str(t) for t in totals), style="bold")
    console.print(table)

    timing = Table(title="time per message (mean) against a valid update's")
    timing.add_column("outcome")
    timing.add_column("messages", justify="right")
    timing.add_column("mean ms", justify="right")
    timing.add_column("x valid", justify="right")
    timing.add_row("valid (baseline)", str(len(baseline)), f"{1e3 * base:.2f}", "1.00")
    for stage in OUTCOMES:
        if times[stage]:
            mean = statistics.mean(times[stage])
            timing.add_row(stage, str(len(times[stage])), f"{1e3 * mean:.2f}", f"{mean / base:.2f}")
    console.print(timing)
    seconds, codec, kind, stage = slowest
    console.print(
        f"slowest: {1e3 * seconds:.1f} ms ({seconds / base:.1f}x valid), {codec} server, "
        f"{kind}, {stage}"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"peak resident memory: {peak:.0f} MiB; wall {time.perf_counter() - began:.0f} s")
    if totals[OUTCOMES.index("internal")]:
        raise SystemExit("a decoder raised something other than WireError")


if __name__ == "__main__":
    main()
