"""Ok-Topk's sparse allreduce: the global top-k of the summed local top-k, in < 6k values.

Li & Hoefler, "Near-Optimal Sparse Allreduce for Distributed Deep Learning" (PPoPP'22;
reference code `Shigangli/Ok-Topk`). Per call, on every rank, for the accumulated gradient
a = g + e of n coordinates and k = ceil(density n):

1. Local selection by threshold: I = {i : |a_i| >= t_local}. t_local is the exact k-th
   largest |a_i| every `tau` calls and reused in between; a reused threshold that selects
   more than 4k/3 coordinates is raised by 3%, at most 5 times (as the reference code does).
2. Balanced regions: the coordinate space is cut into P regions, one per rank, holding about
   the same number of selected coordinates over all ranks. Recomputed every `tau_prime`
   calls from where the ranks' selections fall.
3. Split and reduce: each rank sends its selected (index, value) pairs of region j to rank j,
   which sums what it receives over its region.
4. Global selection: rank j keeps the reduced coordinates of its region whose magnitude is at
   least t_global, the k-th largest reduced magnitude over all regions (exact every `tau`
   calls, reused in between).
5. Allgatherv: every rank gathers every region's kept pairs; the result is their sum / P.
6. Error feedback: e <- a with the coordinates this rank selected *and* that made the global
   selection set to zero (whatever else it selected stays in e).

Where this implementation differs from the paper, and why:

- Step 3 uses `all_to_all_single` with per-destination sizes (gloo's and NCCL's own
  schedule) instead of the paper's point-to-point sends with destination rotation and
  bucketing; the bytes are the same, the link contention pattern may not be.
- Step 5 is a direct allgatherv (sizes, then each rank's pairs to every rank by an uneven
  `all_to_all_single`); the paper first rebalances the kept pairs across ranks so that its
  recursive-doubling allgatherv moves at most 4k(P-1)/P values per rank. Here a rank whose
  region holds more of the global top-k sends more.
- Step 2 balances with a histogram of 64 P equal-width bins of the selected coordinates
  (one allreduce of 64 P integers); region edges fall on bin edges.
- Step 4's exact threshold is found by bisection on the float32 bit patterns of the reduced
  magnitudes: 31 allreduces of one count each (counted as overhead), every `tau` calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist

from thinwire.codecs.selection import check_density, count_for
from thinwire.ddp.collectives import Group, Traffic, all_gather_sparse, allreduce_, world_size

__all__ = ["OkTopk", "OkTopkState", "init_oktopk", "oktopk_allreduce"]

_RAISE_FACTOR, _RAISE_LIMIT, _OVERSHOOT = 1.03, 5, 4.0 / 3.0
_BINS_PER_RANK = 64


@dataclass(frozen=True)
class OkTopk:
    """Ok-Topk's sparse allreduce as a DDP exchange (see the module docstring).

    Args:
        density: k / n, the fraction of coordinates in the global result, in (0, 1].
        tau: calls between exact recomputations of the local and global thresholds (32 in
            the paper); 1 recomputes every call (exact top-k semantics, more selection work).
        tau_prime: calls between rebalancings of the regions (64 in the paper).
    """

    density: float
    tau: int = 32
    tau_prime: int = 64

    def __post_init__(self) -> None:
        check_density(self.density)
        if self.tau < 1 or self.tau_prime < 1:
            raise ValueError(
                f"OkTopk tau and tau_prime must be >= 1, got {self.tau}, {self.tau_prime}"
            )


class OkTopkState(NamedTuple):
    """State of one bucket under Ok-Topk."""

    residual: torch.Tensor  # (n,) float32 on the bucket's device: e, not yet sent
    local_threshold: float  # t_local; 0.0 until first computed
    global_threshold: float  # t_global; 0.0 until first computed
    edges: tuple[int, ...]  # P + 1 region edges, 0 ... n; () until first computed
    step: int  # calls so far


def init_oktopk(n: int, device: torch.device) -> OkTopkState:
    """The state of an n-coordinate bucket before its first call."""
    return OkTopkState(torch.zeros(n, dtype=torch.float32, device=device), 0.0, 0.0, (), 0)


def _kth_largest(magnitudes: torch.Tensor, k: int) -> float:
    if magnitudes.numel() == 0:
        return 0.0
    return float(torch.topk(magnitudes, min(k, magnitudes.numel()), sorted=False).values.min())


def _local_threshold(magnitudes: torch.Tensor, k: int, state: OkTopkState, exact: bool) -> float:
    if exact or state.local_threshold <= 0.0:
        return _kth_largest(magnitudes, k)
    threshold = state.local_threshold
    for _ in range(_RAISE_LIMIT):
        if int((magnitudes >= threshold).sum()) <= _OVERSHOOT * k:
            break
        threshold *= _RAISE_FACTOR
    return threshold


def _balanced_edges(
    selected: torch.Tensor, n: int, group: Group, traffic: Traffic
) -> tuple[int, ...]:
    ranks = world_size(group)
    bins = min(_BINS_PER_RANK * ranks, n)
    width = math.ceil(n / bins)
    counts = torch.bincount(selected // width, minlength=bins).to(torch.int64)
    allreduce_(counts, group, traffic, payload=False)
    cumulative = torch.cumsum(counts, 0)
    total = int(cumulative[-1])
    edges = [0]
    for j in range(1, ranks):
        target = total * j / ranks
        b = int(torch.searchsorted(cumulative, torch.tensor(target, device=cumulative.device)))
        edges.append(min(max((b + 1) * width, edges[-1]), n))
    edges.append(n)
    return tuple(edges)


def _split_reduce(
    indices: torch.Tensor,
    values: torch.Tensor,
    edges: tuple[int, ...],
    group: Group,
    traffic: Traffic,
) -> torch.Tensor:
    """Sends each region's pairs to its owner; returns this rank's summed region (dense)."""
    device = values.device
    rank = dist.get_rank(group)
    bounds = torch.tensor(edges[1:-1], dtype=indices.dtype, device=device)
    owner = torch.bucketize(indices, bounds, right=True)
    send_counts = torch.bincount(owner, minlength=len(edges) - 1).to(torch.int64)
    recv_counts = torch.empty_like(send_counts)
    traffic.overhead += send_counts.numel() * send_counts.element_size()
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send = send_counts.tolist()
    recv = recv_counts.tolist()
    to_others = sum(send) - send[rank]
    index_dtype = torch.int32 if edges[-1] < 2**31 else torch.int64
    sent_i = indices.to(index_dtype)
    got_i = torch.empty(sum(recv), dtype=index_dtype, device=device)
    got_v = torch.empty(sum(recv), dtype=values.dtype, device=device)
    traffic.payload += to_others * (sent_i.element_size() + values.element_size())
    dist.all_to_all_single(got_i, sent_i, recv, send, group=group)
    dist.all_to_all_single(got_v, values, recv, send, group=group)
    start, stop = edges[rank], edges[rank + 1]
    region = torch.zeros(stop - start, dtype=values.dtype, device=device)
    return region.index_add_(0, got_i.to(torch.int64) - start, got_v)


def _global_threshold(region: torch.Tensor, k: int, group: Group, traffic: Traffic) -> float:
    """The exact k-th largest magnitude over every rank's region, by bisection on bits."""
    bits = region.abs().float().view(torch.int32)  # order-preserving for non-negative floats
    low, high = 0, 2**31 - 1  # invariant: count(bits >= low) >= k or low == 0
    count = torch.zeros(1, dtype=torch.int64, device=region.device)
    while low < high:
        mid = (low + high + 1) // 2
        count.fill_(int((bits >= mid).sum()))
        allreduce_(count, group, traffic, payload=False)
        if int(count.item()) >= k:
            low = mid
        else:
            high = mid - 1
    return float(torch.tensor([low], dtype=torch.int32).view(torch.float32).item())


def oktopk_allreduce(
    flat: torch.Tensor, state: OkTopkState, config: OkTopk, group: Group, traffic: Traffic
) -> tuple[torch.Tensor, OkTopkState]:
    """One Ok-Topk exchange of `flat` (this rank's gradient); returns the mean and new state."""
    ranks = world_size(group)
    acc = flat.float() + state.residual
    n = acc.numel()
    k = count_for(config.density, n)
    magnitudes = acc.abs()
    exact = state.step % config.tau == 0
    local_t = _local_threshold(magnitudes, k, state, exact)
    mine = torch.nonzero((magnitudes >= local_t) & (magnitudes > 0)).reshape(-1)
    edges = state.edges
    if not edges or state.step % config.tau_prime == 0:
        edges = _balanced_edges(mine, n, group, traffic)
    region = _split_reduce(mine, acc[mine], edges, group, traffic)
    global_t = state.global_threshold
    if exact or global_t <= 0.0:
        global_t = _global_threshold(region, k, group, traffic)
    start = edges[dist.get_rank(group)]
    kept = torch.nonzero((region.abs() >= global_t) & (region != 0)).reshape(-1)
    index_dtype = torch.int32 if n < 2**31 else torch.int64
    indices, values = all_gather_sparse(
        (kept + start).to(index_dtype), region[kept], group, traffic
    )
    indices = indices.to(torch.int64)
    out = torch.zeros(n, dtype=torch.float32, device=acc.device)
    out[indices] = values / ranks
    sent = torch.zeros(n, dtype=torch.bool, device=acc.device)
    sent[indices] = True
    chosen = torch.zeros(n, dtype=torch.bool, device=acc.device)
    chosen[mine] = True
    residual = acc.masked_fill(sent & chosen, 0.0)
    return out, OkTopkState(residual, local_t, global_t, edges, state.step + 1)
