"""How many CPU threads a simulated run gives torch.

A simulated client trains a small model on a small batch, one client after another. Torch
splits each op across all cores by default, and for small ops the split costs more than it
saves: with the digits MLP (0.3 MFLOP per batch of 32) 100 simulated clients used about ten
times the CPU per round on torch's default thread count as on one thread, and no less wall
time. Large per-step work (a CNN or ResNet on images: 66 MFLOP and 2.6 GFLOP per batch)
does gain from more threads. So the simulator estimates the forward FLOPs of one training
batch and runs on one thread below `PARALLEL_FLOPS`, on every thread it may use above it;
`train.threads` overrides the choice. `benchmarks/threads.py` measures the step time per
thread count behind the threshold. The Flower round loop and ClientApp compute on the same
count: a reduction (a matmul) split over other threads rounds differently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils.flop_counter import FlopCounterMode

from thinwire.config import DataConfig, Experiment
from thinwire.learning.models import build_model

__all__ = ["PARALLEL_FLOPS", "batch_flops", "simulation_threads", "torch_threads"]

PARALLEL_FLOPS = 20e6
"""Forward FLOPs per training batch from which a simulated run uses more than one thread."""


def _input_shape(data: DataConfig) -> tuple[int, ...]:
    if data.dataset == "synthetic":
        return (data.synthetic.dim if data.synthetic is not None else 60,)
    return {"digits": (1, 8, 8), "cifar10": (3, 32, 32)}.get(data.dataset, (1, 28, 28))


def _classes(data: DataConfig) -> int:
    return data.synthetic.classes if data.synthetic is not None else 10


def batch_flops(experiment: Experiment) -> float:
    """Forward FLOPs of one training batch of the experiment's model (counted on meta)."""
    shape = _input_shape(experiment.data)
    model = build_model(experiment.model, shape, _classes(experiment.data), seed=0).to("meta")
    batch = torch.zeros(experiment.train.batch_size, *shape, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(batch)
    return float(counter.get_total_flops())


def simulation_threads(experiment: Experiment, available: int | None = None) -> int:
    """The threads a simulation of `experiment` should use.

    Args:
        experiment: the run; `train.threads`, when set, is the answer.
        available: threads this process may use (default: torch's current setting, which a
            sweep worker has already cut to its share of the cores).
    """
    if experiment.train.threads is not None:
        return experiment.train.threads
    budget = available if available is not None else torch.get_num_threads()
    return budget if batch_flops(experiment) >= PARALLEL_FLOPS else 1


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Runs the block with torch's intra-op thread count set to `threads`, then restores it."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
