"""Sparse SGD with majority voting: the vote, the tally and the messages both ends share.

K. Ozfatura, E. Ozfatura, D. Gündüz, "Distributed Sparse SGD with Majority Voting"
(arXiv 2011.06495, 2020; algorithms.md §7.9). Workers first agree on one sparsity pattern,
then send values only on it: no per-worker index list, and the server's step is sparse on
the same pattern, so the downlink has the uplink's sparsity.

Over the flattened model (d coordinates, K = ceil(density * d)):

1. client i: a_i = update_i + e_i; its vote is S_i = the top-K indices of |a_i|;
2. server: v_j = #{i : j in S_i}; S = the K coordinates of largest v_j, ties broken by a
   seeded random priority (`thinwire.seeding.vote_tie_seed`), so every runtime picks the
   same S;
3. client i sends a_i[S] as K plain values, in S's order, with no indices, and keeps
   e_i = a_i with S zeroed (error feedback of what S left out);
4. the server aggregates the K-vectors with the run's rule, steps on S only, and sends the
   step's K values back; every client that holds the model adds them on S.

The paper's text beyond its abstract was not available when this was written: steps 1-4
follow the abstract (consensus on the sparse structure, values on it, the same sparsity
both ways) and algorithms.md's reconstruction, tagged there as from memory. Approximations
of ours, not checked against the paper: the vote is the top-K of a_i (including the
residual); ties and coordinates no one voted for are filled by the seeded draw; the
one-exchange variant (`mask: previous`, "time correlation") uses in round t the mask voted
in round t - 1 and has round 1 only vote (its whole a_i stays in the residual).

Wire form. Everything is an `Update` (`thinwire.wire`): an index set (a vote, a mask) is a
payload over the flattened model's d coordinates with a sparse support, which the wire
writes as Rice-coded gaps or a d-bit bitmap, whichever is smaller; the wire format has no
payload without values, so it carries K zero QSGD levels besides, which the wire codes as
"no non-zero level" (a norm and a few bytes, whatever K is). Values on S are a dense
payload of K fp32 values over a domain of K, so their message is a header plus 4 K bytes.
Tensor names hold a colon, which no model parameter's name does, so a vote, a mask or
values in the place of another is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from thinwire.codecs.selection import count_for
from thinwire.seeding import vote_tie_seed
from thinwire.wire import (
    DenseSupport,
    Payload,
    QuantizedValues,
    RawValues,
    SparseSupport,
    TensorSpec,
    WireError,
)

__all__ = [
    "CHANGE",
    "MASK",
    "VALUES",
    "VOTE",
    "flatten_model",
    "index_payload",
    "index_spec",
    "read_index_set",
    "read_values",
    "support_size",
    "tally",
    "top_k_vote",
    "unflatten_model",
    "values_payload",
    "values_spec",
]

VOTE = "vote:vote"
"""A client's vote: its top-K indices of the flattened model."""
MASK = "vote:mask"
"""The server's agreed support S."""
VALUES = "vote:values"
"""A client's a_i on S, K values in S's order."""
CHANGE = "vote:change"
"""The server's model change on the support of the last values it aggregated."""


def support_size(density: float, d: int) -> int:
    """K = ceil(density * d), at least 1 and at most d (as top-k counts it)."""
    return count_for(density, d)


def flatten_model(tensors: Mapping[str, torch.Tensor], spec: Sequence[TensorSpec]) -> torch.Tensor:
    """The model as one float32 vector, tensors in `spec` order, each row-major."""
    return torch.cat([tensors[s.name].reshape(-1).float() for s in spec])


def unflatten_model(vector: torch.Tensor, spec: Sequence[TensorSpec]) -> dict[str, torch.Tensor]:
    """The inverse of `flatten_model`."""
    out, start = {}, 0
    for s in spec:
        out[s.name] = vector[start : start + s.numel].reshape(s.shape).clone()
        start += s.numel
    return out


def top_k_vote(a: torch.Tensor, k: int) -> torch.Tensor:
    """A client's vote: the indices of the k largest |a|, sorted (int64, on the CPU).

    Ties in |a| go to the lower index (a stable sort), so every runtime votes alike.
    """
    order = torch.sort(a.abs(), descending=True, stable=True).indices[:k]
    return torch.sort(order).values.cpu()


def tally(votes: Sequence[torch.Tensor], d: int, k: int, *, seed: int, round: int) -> torch.Tensor:
    """S: the k coordinates with the most votes, sorted; equal counts in a seeded random order.

    Args:
        votes: each accepted client's vote, int64 indices in [0, d) without repeats.
        d: the number of coordinates.
        k: the support size.
        seed: the experiment seed; with `round` it seeds the tie-break (`vote_tie_seed`).
        round: the round whose votes these are.

    Returns:
        int64 (k,), strictly increasing. With no votes at all, k seeded random coordinates.
    """
    counts = torch.zeros(d, dtype=torch.int64)
    if votes:
        counts = torch.bincount(torch.cat([v.cpu() for v in votes]), minlength=d)
    generator = torch.Generator(device="cpu").manual_seed(vote_tie_seed(seed, round) % 2**63)
    priority = torch.randperm(d, generator=generator)  # a distinct rank per coordinate
    score = counts * d + priority  # count first, then the random rank: never equal
    return torch.sort(torch.topk(score, k, sorted=False).indices).values


# ---------------------------------------------------------------------- payloads


def index_spec(name: str, d: int) -> TensorSpec:
    """The spec of an index set over d coordinates (a vote, a mask)."""
    return TensorSpec(name, (d,))


def values_spec(name: str, k: int) -> TensorSpec:
    """The spec of k values on an agreed support (values, a change)."""
    return TensorSpec(name, (k,))


def index_payload(indices: torch.Tensor, d: int) -> Payload:
    """An index set as a payload: its sparse support, and zero levels (a few bytes)."""
    k = int(indices.numel())
    return Payload(
        (d,),
        SparseSupport(indices.detach().cpu().to(torch.int64)),
        QuantizedValues(torch.zeros(k, dtype=torch.int8), torch.zeros(1), 1, 0),
    )


def values_payload(values: torch.Tensor) -> Payload:
    """K values on an agreed support: a dense fp32 payload over a domain of K."""
    flat = values.detach().reshape(-1).float().cpu()
    return Payload((int(flat.numel()),), DenseSupport(), RawValues(flat))


def read_index_set(payload: Payload, *, k: int, exact: bool, what: str) -> torch.Tensor:
    """The indices of an untrusted index set (already `wire.decode`d against its spec).

    Raises:
        WireError: naming `what` and the problem: not a sparse support, another values form,
            more than k indices (or other than k where `exact`), repeated or unsorted
            indices, an index out of range.
    """
    support, values = payload.support, payload.values
    if not isinstance(support, SparseSupport):
        raise WireError(f"{what} must list its indices, got a {type(support).__name__}")
    if not isinstance(values, QuantizedValues) or bool(values.levels.any()):
        raise WireError(f"{what} carries values; an index set carries zero levels only")
    indices = support.indices.to(torch.int64)
    count = int(indices.numel())
    if count > k or (exact and count != k):
        need = f"exactly K = {k}" if exact else f"at most K = {k}"
        raise WireError(f"{what} lists {count} indices, {need}")
    if count and not bool((indices[1:] > indices[:-1]).all()):
        raise WireError(f"{what} repeats an index or is not sorted")
    if count and not 0 <= int(indices[0]) <= int(indices[-1]) < payload.numel:
        raise WireError(f"{what} names an index outside [0, {payload.numel})")
    return indices


def read_values(payload: Payload, *, k: int, what: str) -> torch.Tensor:
    """The float32 values of an untrusted values payload (decoded against `values_spec`).

    Raises:
        WireError: not k dense fp32 values, or a value that is not finite.
    """
    values = payload.values
    if not isinstance(payload.support, DenseSupport) or not isinstance(values, RawValues):
        raise WireError(f"{what} must be {k} dense raw values")
    data = values.data
    if data.dtype != torch.float32 or int(data.numel()) != k:
        raise WireError(f"{what} holds {int(data.numel())} {data.dtype} values; |S| = {k} fp32")
    if not bool(torch.isfinite(data).all()):
        raise WireError(f"{what} holds a value that is not finite")
    return data
