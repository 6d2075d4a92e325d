"""Policies benchmark: censoring, random access and DP-SGD with random sparsification.

Three comparison tables, each from the example experiment of the feature and variants of it
(every run in the simulator, bytes measured on real serialized updates):

1. CSGD censoring against always-send, on digits (MLP, examples/censor.yaml) and on the
   synthetic convex task (logistic regression, examples/censor_convex.yaml): final accuracy,
   uploads and uplink bytes, the share of uploads saved, and the uploads needed to first
   reach 99.5% of always-send's final accuracy.
2. Random access (examples/random_access.yaml: 20 clients, 5 slotted-ALOHA slots per round,
   top-5% with error memory): age-of-gradient against uniform ALOHA, always-transmit and the
   round-robin oracle at the same number of slots; accuracy, measured success rate per slot
   next to the analytic slotted-ALOHA value, collisions per round.
3. DP-SGD on digits at the same (epsilon, delta) (examples/dp_sparse.yaml): plain DP-SGD
   against DP-SGD with random sparsification, and the uplink bytes the masked (seeded)
   payload saves against dense updates.

Accuracy is averaged over `--seeds` seeds (the experiment seed changes the data split,
initialization, batches, masks and slot draws); "acc" is the mean test accuracy over the
last evaluations of a run (the last 20% of rounds), which is less noisy than the final one.

    python benchmarks/policies.py                 # all three tables (several minutes on 2 cores)
    python benchmarks/policies.py --quick         # fewer rounds and seeds: a smoke test
    python benchmarks/policies.py --only privacy --seeds 5 --out runs/bench

Plots (accuracy against rounds and against uplink bytes, seed 0) go to `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from thinwire.channel import aloha_success_probability
from thinwire.config import Experiment, load_config
from thinwire.metrics import RoundRecord, format_bytes, schema
from thinwire.metrics.plots import plot_comparison
from thinwire.runtimes.simulation import simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
console = Console(width=160)


def experiment(name: str, overrides: Sequence[str], seed: int, quick: bool) -> Experiment:
    extra = [f"seed={seed}", "train.device=cpu"]
    base = load_config(EXAMPLES / name)
    if quick:
        extra.append(f"train.rounds={max(10, base.train.rounds // 5)}")
    return load_config(EXAMPLES / name, [*overrides, *extra])


def run(config: Experiment) -> list[RoundRecord]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the seeded-DP-noise notice, once per client
        return simulate(config).records


def accuracies(records: Sequence[RoundRecord]) -> list[tuple[int, float]]:
    return [
        (int(r[schema.ROUND]), float(r[schema.ACCURACY]))
        for r in records
        if r[schema.ACCURACY] == r[schema.ACCURACY]
    ]


def tail_accuracy(records: Sequence[RoundRecord]) -> float:
    evaluated = accuracies(records)
    last = max(1, len(evaluated) // 5)
    return statistics.mean(a for _, a in evaluated[-last:])


def mean_sd(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2%}"
    return f"{statistics.mean(values):.2%} ± {statistics.stdev(values):.2%}"


def uploads_to(records: Sequence[RoundRecord], target: float) -> float:
    """Cumulative uploads when the accuracy first reaches `target` (inf if never)."""
    sent = 0
    for r in records:
        sent += int(r[schema.UPDATES_SENT])
        if r[schema.ACCURACY] == r[schema.ACCURACY] and r[schema.ACCURACY] >= target:
            return sent
    return math.inf


Variant = tuple[str, str, list[str]]  # label, example file, overrides


def run_variants(
    variants: Sequence[Variant], seeds: int, quick: bool
) -> dict[str, list[list[RoundRecord]]]:
    runs: dict[str, list[list[RoundRecord]]] = {}
    for label, name, overrides in variants:
        start = time.perf_counter()
        runs[label] = [run(experiment(name, overrides, s, quick)) for s in range(seeds)]
        console.log(f"{label}: {seeds} run(s) in {time.perf_counter() - start:.0f} s")
    return runs


def plot(runs: dict[str, list[list[RoundRecord]]], out: Path, name: str, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plot_comparison({label: r[0] for label, r in runs.items()}, out / name, title=title)


# --------------------------------------------------------------------------- 1. censoring


def censoring(seeds: int, quick: bool, out: Path) -> tuple[Table, list[dict[str, Any]]]:
    tasks = {
        "digits (MLP)": [
            ("always-send", "censor.yaml", ["policy={kind: always}"]),
            ("censor tau=0.05", "censor.yaml", []),
            (
                "censor geometric + batch",
                "censor.yaml",
                [
                    "policy.threshold={kind: geometric, tau: 0.2, ratio: 0.97}",
                    "policy.batch={kind: geometric, ratio: 0.97, max_batch: 256}",
                ],
            ),
        ],
        "synthetic (logreg, convex)": [
            ("always-send", "censor_convex.yaml", ["policy={kind: always}"]),
            (
                "censor geometric",
                "censor_convex.yaml",
                ["policy.batch={kind: fixed}"],
            ),
            ("censor geometric + batch", "censor_convex.yaml", []),
        ],
    }
    table = Table(title="1. CSGD censoring against always-send", title_justify="left")
    for column in ("task", "policy", "acc", "final acc", "uploads", "saved", "uplink"):
        table.add_column(column, justify="left" if column in ("task", "policy") else "right")
    table.add_column("uploads to 99.5% of always' final", justify="right")
    rows = []
    for task, variants in tasks.items():
        runs = run_variants(variants, seeds, quick)
        plot(runs, out, f"censor-{task.split()[0]}.png", f"CSGD censoring, {task}")
        reference = runs["always-send"]
        always_uploads = statistics.mean(
            sum(r[schema.UPDATES_SENT] for r in rs) for rs in reference
        )
        targets = [0.995 * rs[-1][schema.ACCURACY] for rs in reference]
        for label, per_seed in runs.items():
            uploads = statistics.mean(sum(r[schema.UPDATES_SENT] for r in rs) for rs in per_seed)
            to_target = [uploads_to(rs, t) for rs, t in zip(per_seed, targets, strict=True)]
            row = {
                "task": task,
                "policy": label,
                "acc": [tail_accuracy(rs) for rs in per_seed],
                "final_acc": [float(rs[-1][schema.ACCURACY]) for rs in per_seed],
                "uploads": uploads,
                "saved": 1.0 - uploads / always_uploads,
                "bytes_up": statistics.mean(float(rs[-1][schema.CUM_BYTES_UP]) for rs in per_seed),
                "uploads_to_target": statistics.mean(to_target),
            }
            rows.append(row)
            table.add_row(
                task,
                label,
                mean_sd(row["acc"]),
                mean_sd(row["final_acc"]),
                f"{uploads:.0f}",
                f"{row['saved']:.0%}",
                format_bytes(row["bytes_up"]),
                f"{row['uploads_to_target']:.0f}",
            )
        table.add_section()
    return table, rows


# --------------------------------------------------------------------------- 2. random access


def random_access(seeds: int, quick: bool, out: Path) -> tuple[Table, list[dict[str, Any]]]:
    variants: list[Variant] = [
        ("age of gradient", "random_access.yaml", []),
        ("uniform ALOHA", "random_access.yaml", ["policy.rule={kind: uniform}"]),
        ("always-transmit", "random_access.yaml", ["policy.rule={kind: always}"]),
        ("round-robin oracle", "random_access.yaml", ["policy.rule={kind: round_robin}"]),
    ]
    base = load_config(EXAMPLES / "random_access.yaml")
    clients, slots = base.data.clients, base.channel.slots
    assert slots is not None
    fair = min(1.0, slots / clients)
    analytic = {
        "uniform ALOHA": aloha_success_probability(clients, fair, slots),
        "always-transmit": aloha_success_probability(clients, 1.0, slots),
        "round-robin oracle": 1.0 if clients >= slots else clients / slots,
    }
    runs = run_variants(variants, seeds, quick)
    plot(runs, out, "random-access.png", f"random access, {clients} clients, {slots} slots")
    title = f"2. Random access: {clients} clients, {slots} slots per round, top-5% + memory"
    table = Table(title=title, title_justify="left")
    for column in (
        "rule",
        "acc",
        "mean acc over run",
        "success/slot",
        "analytic",
        "collisions/round",
    ):
        table.add_column(column, justify="left" if column == "rule" else "right")
    table.add_column("uploads", justify="right")
    table.add_column("uplink", justify="right")
    rows = []
    for label, per_seed in runs.items():
        frames = sum(len(rs) for rs in per_seed)
        success = sum(r[schema.SLOT_SUCCESSES] for rs in per_seed for r in rs) / (frames * slots)
        collisions = sum(r[schema.SLOT_COLLISIONS] for rs in per_seed for r in rs) / frames
        row = {
            "rule": label,
            "acc": [tail_accuracy(rs) for rs in per_seed],
            "mean_acc": [statistics.mean(a for _, a in accuracies(rs)) for rs in per_seed],
            "success_per_slot": success,
            "analytic": analytic.get(label, math.nan),
            "collisions_per_round": collisions,
            "uploads": statistics.mean(sum(r[schema.UPDATES_SENT] for r in rs) for rs in per_seed),
            "bytes_up": statistics.mean(float(rs[-1][schema.CUM_BYTES_UP]) for rs in per_seed),
        }
        rows.append(row)
        table.add_row(
            label,
            mean_sd(row["acc"]),
            mean_sd(row["mean_acc"]),
            f"{success:.3f}",
            "-" if math.isnan(row["analytic"]) else f"{row['analytic']:.3f}",
            f"{collisions:.2f}",
            f"{row['uploads']:.0f}",
            format_bytes(row["bytes_up"]),
        )
    return table, rows


# --------------------------------------------------------------------------- 3. privacy


def privacy(seeds: int, quick: bool, out: Path) -> tuple[Table, list[dict[str, Any]]]:
    dense_dp = ["privacy.sparsity=null", "codec.select={kind: none}"]
    variants: list[Variant] = [
        ("no DP (reference)", "dp_sparse.yaml", ["privacy=null", "codec.select={kind: none}"]),
        ("DP-SGD", "dp_sparse.yaml", dense_dp),
        ("DP-SGD + RS 0.5", "dp_sparse.yaml", ["privacy.sparsity.final_rate=0.5"]),
        ("DP-SGD + RS 0.8", "dp_sparse.yaml", []),
        ("DP-SGD + RS 0.8, constant", "dp_sparse.yaml", ["privacy.sparsity.schedule=constant"]),
    ]
    base = load_config(EXAMPLES / "dp_sparse.yaml")
    assert base.privacy is not None
    runs = run_variants(variants, seeds, quick)
    plot(runs, out, "dp-sparse.png", "DP-SGD with random sparsification, digits")
    target = base.privacy.target_epsilon
    title = f"3. DP-SGD on digits at epsilon = {target}, delta = {base.privacy.delta:g}"
    table = Table(title=title, title_justify="left")
    for column in ("method", "acc", "final acc", "epsilon spent", "uplink", "vs DP-SGD"):
        table.add_column(column, justify="left" if column == "method" else "right")
    rows = []
    dense_bytes = statistics.mean(float(rs[-1][schema.CUM_BYTES_UP]) for rs in runs["DP-SGD"])
    for label, per_seed in runs.items():
        spent = [float(rs[-1].get(schema.EPSILON, math.nan)) for rs in per_seed]
        row = {
            "method": label,
            "acc": [tail_accuracy(rs) for rs in per_seed],
            "final_acc": [float(rs[-1][schema.ACCURACY]) for rs in per_seed],
            "epsilon": max(spent),
            "bytes_up": statistics.mean(float(rs[-1][schema.CUM_BYTES_UP]) for rs in per_seed),
        }
        rows.append(row)
        table.add_row(
            label,
            mean_sd(row["acc"]),
            mean_sd(row["final_acc"]),
            "-" if math.isnan(row["epsilon"]) else f"{row['epsilon']:.3f}",
            format_bytes(row["bytes_up"]),
            f"{row['bytes_up'] / dense_bytes - 1.0:+.0%}",
        )
    return table, rows


SECTIONS: dict[str, Callable[[int, bool, Path], tuple[Table, list[dict[str, Any]]]]] = {
    "censoring": censoring,
    "random_access": random_access,
    "privacy": privacy,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fifth of the rounds, 1 seed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/policies"))
    parser.add_argument("--json", type=Path, help="also write every row to this file")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = 1 if args.quick else args.seeds
    tables, rows = [], {}
    for name in args.only or list(SECTIONS):
        table, section_rows = SECTIONS[name](seeds, args.quick, args.out)
        tables.append(table)
        rows[name] = section_rows
    for table in tables:
        console.print(table)
    console.print(f"plots: {args.out}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=float))


if __name__ == "__main__":
    main()
