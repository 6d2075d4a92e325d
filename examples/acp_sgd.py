"""ACP-SGD (Zhang et al., ICDCS'23) as a DDP communication hook, next to PowerSGD.

ACP-SGD runs only as a hook: it sends P on one step and Q on the next, each multiplied with
the factor all ranks agreed on the step before, and a star server or gossip peer (which
decode every update on its own) cannot hold that factor for each sender, so an experiment
file refuses `codec.lowrank: {kind: acp_sgd}`. Here a user's own DDP script trains an MLP on
scikit-learn's digits on 2 gloo ranks with `thinwire.ddp.register`, once with ACP-SGD and
once with PowerSGD at the same rank, and prints each one's test accuracy and the bytes a
rank put into collectives:

    python examples/acp_sgd.py            # ~15 s on 2 cores (4 spawned ranks in all)
    python examples/acp_sgd.py --rank 4 --steps 600
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import thinwire.ddp

WORLD = 2


def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits scaled to [0, 1]: 1400 training and 397 test examples, in a seeded order."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def train(rank: int, method_name: str, rank_r: int, steps: int, port: int, out: str) -> None:
    """One rank: joins the process group, fits, and leaves it; rank 0 writes the result line."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        line = fit(rank, method_name, rank_r, steps)  # the DDP module lives in fit alone
        if rank == 0:
            with open(out, "w") as f:
                f.write(line)
    finally:
        thinwire.ddp.leave_process_group()  # collects what holds the group, then leaves


def fit(rank: int, method_name: str, rank_r: int, steps: int) -> str:
    """Synchronous SGD under DDP with the hook; the test accuracy and bytes, as one line."""
    torch.manual_seed(0)  # the same initial model on every rank
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    )
    method = {"acp_sgd": thinwire.ddp.ACPSGD, "powersgd": thinwire.ddp.PowerSGD}[method_name]
    hook = thinwire.ddp.register(model, codec=method(rank=rank_r))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y, x_test, y_test = data()
    mine = torch.arange(rank, len(y), WORLD)  # each rank its own half of the training set
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        batch = mine[torch.randint(len(mine), (32,), generator=g)]
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
    stats = hook.stats()
    return (
        f"{method_name:9s} rank {rank_r}: test accuracy {accuracy:.3f}, "
        f"{stats.payload_bytes} payload bytes per rank in {stats.steps} steps"
    )


def free_port() -> int:
    """A free local TCP port for the ranks' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    """Trains with each method in turn and prints accuracy and bytes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=2, help="rank of the approximation")
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    args = parser.parse_args()
    for name in ("acp_sgd", "powersgd"):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.txt")
            mp.spawn(train, args=(name, args.rank, args.steps, free_port(), out), nprocs=WORLD)
            with open(out) as f:
                print(f.read())


if __name__ == "__main__":
    main()
