"""What each rank runs in the DDP tests (importable by spawned processes).

`reference_*` recompute, in one process, what the hook must produce from every rank's
gradient: the same codecs (same seeds), the same low-rank steps, the same Ok-Topk
selections. A rank compares the gradient DDP left in its model with that reference.
"""

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from thinwire.codecs import build
from thinwire.codecs.lowrank import initial_q, orthogonalize
from thinwire.config import CodecConfig, Experiment
from thinwire.ddp import ACPSGD, OkTopk, PowerSGD, register
from thinwire.ddp.exchange import BUCKET_NAME, reducible
from thinwire.runtimes.ddp import run_rank
from thinwire.seeding import bucket_seed, tensor_seed
from thinwire.wire import Kind, RawValues, Update, encode

HOOK_SEED = 5


def batch(step: int, rank: int, d_in: int, d_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, d_in, generator=g), torch.randn(16, d_out, generator=g)


def linear_grad(weight: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    w = weight.detach().clone().requires_grad_(True)
    loss = ((x @ w.T - y) ** 2).mean()
    (grad,) = torch.autograd.grad(loss, w)
    return grad


class CodecReference:
    """Every rank's codec (one bucket: the weight), as the hook builds it."""

    def __init__(self, section: dict, world: int, template: torch.Tensor) -> None:
        self.codec = build(CodecConfig.model_validate(section), seed=bucket_seed(HOOK_SEED, (0,)))
        self.states = [self.codec.init(template.reshape(-1)) for _ in range(world)]
        self.rank_bytes = [0] * world

    def step(self, step: int, grads: list[torch.Tensor]) -> torch.Tensor:
        total = torch.zeros(grads[0].numel())
        for j, g in enumerate(grads):
            payload, self.states[j] = self.codec.encode(g.reshape(-1), self.states[j])
            if reducible(payload):
                assert isinstance(payload.values, RawValues)
                self.rank_bytes[j] += (
                    payload.values.data.numel() * payload.values.data.element_size()
                )
            else:
                update = Update(f"rank-{j}", step, Kind.MODEL_DELTA, {BUCKET_NAME: payload})
                self.rank_bytes[j] += len(encode(update))
            total += self.codec.decode(payload, (g.numel(),))
        return (total / len(grads)).reshape(grads[0].shape)


class PowerSGDReference:
    """Vogels et al.'s steps on the gathered matrices, with warm start and error feedback."""

    def __init__(self, config: PowerSGD, world: int, shape: tuple[int, int]) -> None:
        self.rank = config.rank
        self.q = initial_q(
            shape[1], config.rank, seed=tensor_seed(config.seed, 0), device=torch.device("cpu")
        )
        self.errors = [torch.zeros(shape) for _ in range(world)]

    def step(self, step: int, grads: list[torch.Tensor]) -> torch.Tensor:
        matrices = [g + e for g, e in zip(grads, self.errors, strict=True)]
        p_hat = orthogonalize(sum(m @ self.q for m in matrices))
        qs = [m.T @ p_hat for m in matrices]
        self.errors = [m - p_hat @ q.T for m, q in zip(matrices, qs, strict=True)]
        self.q = sum(qs) / len(qs)
        return p_hat @ self.q.T


class ACPSGDReference:
    """Zhang et al.'s alternation on the gathered matrices: P on odd steps, Q on even ones."""

    def __init__(self, config: ACPSGD, world: int, shape: tuple[int, int]) -> None:
        self.q = initial_q(
            shape[1], config.rank, seed=tensor_seed(config.seed, 0), device=torch.device("cpu")
        )
        self.p = torch.zeros(shape[0], config.rank)
        self.errors = [torch.zeros(shape) for _ in range(world)]

    def step(self, step: int, grads: list[torch.Tensor]) -> torch.Tensor:
        matrices = [g + e for g, e in zip(grads, self.errors, strict=True)]
        if step % 2 == 0:
            q_hat = orthogonalize(self.q)
            ps = [m @ q_hat for m in matrices]
            self.errors = [m - p @ q_hat.T for m, p in zip(matrices, ps, strict=True)]
            self.p, self.q = sum(ps) / len(ps), q_hat
        else:
            p_hat = orthogonalize(self.p)
            qs = [m.T @ p_hat for m in matrices]
            self.errors = [m - p_hat @ q.T for m, q in zip(matrices, qs, strict=True)]
            self.p, self.q = p_hat, sum(qs) / len(qs)
        return self.p @ self.q.T


class OkTopkReference:
    """Ok-Topk with exact thresholds every step (tau = 1): local top-k, sum, global top-k."""

    def __init__(self, config: OkTopk, world: int, shape: tuple[int, int]) -> None:
        assert config.tau == 1
        self.density = config.density
        self.errors = [torch.zeros(shape).reshape(-1) for _ in range(world)]

    def step(self, step: int, grads: list[torch.Tensor]) -> torch.Tensor:
        accs = [g.reshape(-1) + e for g, e in zip(grads, self.errors, strict=True)]
        n = accs[0].numel()
        k = -(-int(self.density * n * 1e6) // 1_000_000)  # ceil without float surprises
        k = max(1, k)
        chosen = []
        for a in accs:
            t = torch.topk(a.abs(), k).values.min()
            chosen.append((a.abs() >= t) & (a != 0))
        summed = sum(a * c for a, c in zip(accs, chosen, strict=True))
        t = torch.topk(summed.abs(), k).values.min()
        kept = (summed.abs() >= t) & (summed != 0)
        self.errors = [a.masked_fill(c & kept, 0.0) for a, c in zip(accs, chosen, strict=True)]
        return (summed * kept / len(accs)).reshape(grads[0].shape)


def hook_against_reference(
    rank: int, world: int, method, shape: tuple[int, int], steps: int, device: str = "cpu"
):
    """Runs the hook on DDP(Linear) for `steps` backward passes; returns (errors, bytes).

    On CUDA (NCCL) the model, data and gradients live on the rank's GPU; the reference runs
    on the CPU from the same gradients.
    """
    torch.manual_seed(0)
    net = nn.Linear(shape[1], shape[0], bias=False)
    if device == "cuda":
        net = net.to(torch.cuda.current_device())
        model = DistributedDataParallel(net, device_ids=[torch.cuda.current_device()])
    else:
        model = DistributedDataParallel(net)
    hook = register(model, codec=method, seed=HOOK_SEED)
    if isinstance(method, PowerSGD):
        reference = PowerSGDReference(method, world, shape)
    elif isinstance(method, ACPSGD):
        reference = ACPSGDReference(method, world, shape)
    elif isinstance(method, OkTopk):
        reference = OkTopkReference(method, world, shape)
    else:
        reference = CodecReference(method, world, net.weight.cpu())
    errors = []
    on = net.weight.device
    for step in range(steps):
        data = [tuple(t.to(on) for t in batch(step, j, shape[1], shape[0])) for j in range(world)]
        grads = [linear_grad(net.weight, x, y).cpu() for x, y in data]
        expected = reference.step(step, grads)
        model.zero_grad()
        x, y = data[rank]
        ((model(x) - y) ** 2).mean().backward()
        assert net.weight.grad.device == on  # the hook kept the gradient on its device
        got = net.weight.grad.cpu()
        errors.append(float((got - expected).abs().max() / expected.abs().max().clamp_min(1e-12)))
    rank_bytes = reference.rank_bytes[rank] if isinstance(reference, CodecReference) else None
    return {"errors": errors, "stats": tuple(hook.stats()), "expected_bytes": rank_bytes}


class UserNet(nn.Module):
    """A user's own model: nothing of thinwire in it."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU())
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(8 * 12 * 12, 64), nn.ReLU(), nn.Linear(64, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def train_user_model(rank: int, world: int, method, steps: int):
    """Trains UserNet under DDP with small buckets (several, rebuilt after step 1)."""
    torch.manual_seed(0)
    model = DistributedDataParallel(UserNet(), bucket_cap_mb=0.02)
    hook = register(model, codec=method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 1, 16, 16, generator=g)
    top, bottom = x[:, 0, :8].mean(dim=(1, 2)), x[:, 0, 8:].mean(dim=(1, 2))
    y = (top > 0).long() + 2 * (bottom > 0).long()
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    spread = max(float((t - gathered[0]).abs().max()) for t in gathered)
    return {"losses": losses, "spread": spread, "stats": tuple(hook.stats())}


def die_mid_step(rank: int, world: int, victim: int, at_step: int):
    """Trains with top-k; rank `victim` exits abruptly before its backward at `at_step`."""
    torch.manual_seed(0)
    net = nn.Linear(256, 64)
    model = DistributedDataParallel(net)
    register(model, codec={"select": {"kind": "topk", "density": 0.05}, "error_feedback": True})
    for step in range(at_step + 5):
        x, y = batch(step, rank, 256, 64)
        loss = ((model(x) - y) ** 2).mean()
        if rank == victim and step == at_step:
            os._exit(3)
        loss.backward()
    return "finished"


def runtime_rank(rank: int, world: int, raw: dict, run_dir: str):
    """One rank of the ddp runtime (the process group is already up)."""
    result = run_rank(Experiment.model_validate(raw), run_dir=Path(run_dir))
    return {"records": result.records, "model": result.model}
