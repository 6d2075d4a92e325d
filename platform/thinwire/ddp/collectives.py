"""The collectives thinwire's DDP exchanges are built from, and the bytes they move.

Every byte a rank hands to a collective is counted in a `Traffic`: `payload` is what the
method needs to send (the serialized payload for an all-gather, the tensor bytes for an
allreduce, indices and values for a sparse allreduce), `overhead` is the bookkeeping
around it (size exchanges, the padding that makes all-gather buffers equal, thresholds,
histograms), as decentralizepy counts `total_data` and `total_meta` apart. Counts are per
rank and what the rank contributes, not what the collective's algorithm relays.

All tensors stay on the device of the data they carry (CUDA for NCCL, CPU for gloo).
"""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist

__all__ = [
    "Traffic",
    "all_gather_bytes",
    "all_gather_sparse",
    "all_gather_tensors",
    "allreduce_",
    "gathered_overhead",
    "leave_process_group",
    "world_size",
]

Group = dist.ProcessGroup | None


class Traffic:
    """Bytes this rank put into collectives, split into payload and overhead."""

    __slots__ = ("overhead", "payload")

    def __init__(self) -> None:
        self.payload = 0  # bytes of data the method exchanges
        self.overhead = 0  # bytes of sizes, padding, thresholds and other bookkeeping

    def __repr__(self) -> str:
        return f"Traffic(payload={self.payload}, overhead={self.overhead})"


def leave_process_group() -> None:
    """`dist.destroy_process_group()`, once nothing of this rank's run holds the group.

    Whatever still references the group (a DDP module's reducer, a pending work handle, in
    a reference cycle or not yet released) is collected first, while the interpreter is
    whole. Torn down during the process's exit instead, gloo's threads abort a rank that
    succeeded ("terminate called without an active exception"): a third of the runs of
    `examples/acp_sgd.py` did so before it called this.
    """
    gc.collect()
    dist.destroy_process_group()


def world_size(group: Group) -> int:
    """Number of ranks in `group` (the default group when None)."""
    return dist.get_world_size(group)


def allreduce_(
    tensor: torch.Tensor, group: Group, traffic: Traffic, *, payload: bool = True
) -> None:
    """Sums `tensor` over the group in place (synchronously) and counts its bytes."""
    nbytes = tensor.numel() * tensor.element_size()
    if payload:
        traffic.payload += nbytes
    else:
        traffic.overhead += nbytes
    dist.all_reduce(tensor, group=group)


def all_gather_tensors(
    tensor: torch.Tensor, group: Group, traffic: Traffic, *, counted: int | None = None
) -> list[torch.Tensor]:
    """Every rank's `tensor` (all the same shape), in rank order.

    `counted` is how many of its bytes are payload (the rest is padding, counted as
    overhead); all of them when None.
    """
    nbytes = tensor.numel() * tensor.element_size()
    useful = nbytes if counted is None else counted
    traffic.payload += useful
    traffic.overhead += nbytes - useful
    out = [torch.empty_like(tensor) for _ in range(world_size(group))]
    dist.all_gather(out, tensor.contiguous(), group=group)
    return out


def _gather_sizes(size: int, group: Group, device: torch.device, traffic: Traffic) -> list[int]:
    mine = torch.tensor([size], dtype=torch.int64, device=device)
    traffic.overhead += mine.element_size()
    sizes = [torch.empty_like(mine) for _ in range(world_size(group))]
    dist.all_gather(sizes, mine, group=group)
    return [int(s.item()) for s in sizes]


def all_gather_bytes(
    data: bytes, group: Group, traffic: Traffic, *, device: torch.device
) -> list[bytes]:
    """Every rank's `data`, in rank order: sizes first, then buffers padded to the largest.

    The buffers travel as uint8 tensors on `device` (NCCL needs CUDA tensors), so the
    serialized bytes cross the host boundary once each way, as any wire format does.
    """
    sizes = _gather_sizes(len(data), group, device, traffic)
    top = max(sizes)
    if top == 0:
        return [b"" for _ in sizes]
    buffer = torch.zeros(top, dtype=torch.uint8)
    if data:
        buffer[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    gathered = all_gather_tensors(buffer.to(device), group, traffic, counted=len(data))
    return [g[:n].cpu().numpy().tobytes() for g, n in zip(gathered, sizes, strict=True)]


def gathered_overhead(sizes: list[int]) -> int:
    """Overhead bytes all ranks together put into `all_gather_bytes` for payloads of `sizes`.

    Each rank sends its size (8 bytes) and pads its payload to the largest.
    """
    top = max(sizes, default=0)
    return 8 * len(sizes) + (sum(top - n for n in sizes) if top else 0)


def all_gather_sparse(
    indices: torch.Tensor, values: torch.Tensor, group: Group, traffic: Traffic
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenates every rank's (indices, values) pairs of varying length (an allgatherv).

    Sizes travel first; then each rank sends its own pairs to every rank through an
    `all_to_all_single` with uneven splits, so no rank pads to the largest count (counts
    can differ a lot between Ok-Topk's regions). The pairs are counted once, as for an
    all-gather.
    """
    device = values.device
    ranks = world_size(group)
    sizes = _gather_sizes(int(values.numel()), group, device, traffic)
    if max(sizes) == 0:
        return indices[:0], values[:0]
    own = int(values.numel())
    traffic.payload += own * (indices.element_size() + values.element_size())
    out_i = torch.empty(sum(sizes), dtype=indices.dtype, device=device)
    out_v = torch.empty(sum(sizes), dtype=values.dtype, device=device)
    send = [own] * ranks
    dist.all_to_all_single(out_i, indices.repeat(ranks), sizes, send, group=group)
    dist.all_to_all_single(out_v, values.repeat(ranks), sizes, send, group=group)
    return out_i, out_v
