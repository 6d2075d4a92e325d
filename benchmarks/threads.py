"""Local training step time per torch thread count: where more threads pay off.

For each model (the digits MLP of the quickstart, a wide MLP, the CNN on 28x28 images and
ResNet-20 on 32x32), one SGD step on a batch of 32, timed per thread count (1 .. cores):
median wall time and CPU time per step, and the ratio to one thread. The simulator's rule
(`thinwire.learning.threads`) is shown beside: the forward FLOPs of a batch and the thread
count it picks.

    python benchmarks/threads.py [--steps 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

from thinwire.config import SGD, parse_config
from thinwire.learning import build_model, simulation_threads, train_local
from thinwire.learning.threads import batch_flops

MODELS = {
    "digits MLP [64]": ({"kind": "mlp", "hidden": [64]}, "digits", (1, 8, 8)),
    "MLP [1024, 1024] on 28x28": ({"kind": "mlp", "hidden": [1024, 1024]}, "mnist", (1, 28, 28)),
    "CNN [16, 32] on 28x28": ({"kind": "cnn"}, "mnist", (1, 28, 28)),
    "ResNet-20 on 32x32": ({"kind": "resnet20"}, "cifar10", (3, 32, 32)),
}


def step_times(model_config: dict, shape: tuple[int, ...], threads: int, steps: int):
    torch.set_num_threads(threads)
    experiment = parse_config({"name": "t", "model": model_config})
    model = build_model(experiment.model, shape, 10, seed=0)
    x, y = torch.randn(256, *shape), torch.randint(0, 10, (256,))
    walls, cpus = [], []
    for i in range(steps + 3):
        wall, cpu = time.perf_counter(), time.process_time()
        train_local(
            model,
            x,
            y,
            steps=1,
            batch_size=32,
            lr=0.01,
            optimizer=SGD(),
            generator=torch.Generator().manual_seed(i),
        )
        if i >= 3:  # warm-up
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    counts = sorted({1, 2, 4, cores} & set(range(1, cores + 1)))
    table = Table(title=f"one SGD step, batch 32, {cores} cores (median of {args.steps})")
    for column in (
        "model",
        "fwd MFLOP",
        "threads",
        "ms / step",
        "vs 1 thread",
        "CPU ms / step",
        "simulator picks",
    ):
        table.add_column(column, justify="right")
    for name, (model, dataset, shape) in MODELS.items():
        data = {"dataset": dataset} if dataset == "digits" else {"dataset": dataset, "root": "/x"}
        experiment = parse_config({"name": "t", "model": model, "data": data})
        flops = batch_flops(experiment) / 1e6
        pick = simulation_threads(experiment, available=cores)
        base = None
        for n in counts:
            wall, cpu = step_times(model, shape, n, args.steps)
            base = base or wall
            table.add_row(
                name if n == counts[0] else "",
                f"{flops:.1f}" if n == counts[0] else "",
                str(n),
                f"{1e3 * wall:.2f}",
                f"{wall / base:.2f}x",
                f"{1e3 * cpu:.2f}",
                str(pick) if n == counts[0] else "",
            )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
