"""Communication censoring (CSGD): upload only updates that differ enough from the last one.

Li, Chen, Li, Wu & Ling, "Communication-Censored Distributed Stochastic Gradient Descent"
(arXiv 1909.03631, IEEE TNNLS 2022; algorithms.md §3). A worker uploads its fresh update
only if it moved at least tau_k away (in squared L2 norm) from the last update it
*transmitted*; otherwise it stays silent and the server reuses that last update in the
average. The mini-batch grows over the rounds so that sampling noise alone cannot keep
triggering uploads.

No public code of the method exists, and the exact forms of tau_k and B_k could not be
checked against the paper: the schedules below are our documented choices, following the
method's analysis (a geometric tau_k matched by a geometric B_k for strongly convex losses,
polynomial ones for non-convex models).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple, assert_never

import torch

from thinwire.config import (
    BatchGrowth,
    ConstantTau,
    FixedBatch,
    GeometricBatch,
    GeometricTau,
    InverseTau,
    LinearBatch,
    TauSchedule,
)
from thinwire.policies.base import Decision, Policy, PolicyInput, fixed_batch, squared_norm

__all__ = ["CensorState", "batch_size_at", "censor", "threshold_at"]

_LARGEST_BATCH = 2**31
"""Batch sizes are capped here before the client caps them at its own data size."""


def threshold_at(config: TauSchedule, round: int) -> float:
    """The censoring threshold tau_k of round k = `round` (1-based).

    - constant: tau;
    - geometric: tau * ratio^(k - 1);
    - inverse: tau * a / (a + k - 1).

    Raises:
        ValueError: `round` < 1.
    """
    if round < 1:
        raise ValueError(f"rounds count from 1, got {round}")
    if isinstance(config, ConstantTau):
        return config.tau
    if isinstance(config, GeometricTau):
        return config.tau * config.ratio ** (round - 1)
    if isinstance(config, InverseTau):
        return config.tau * config.a / (config.a + round - 1)
    assert_never(config)


def batch_size_at(config: BatchGrowth, round: int, base: int) -> int:
    """The local batch size B_k of round k = `round`, growing from B_1 = `base`.

    - fixed: B_1;
    - geometric: ceil(B_1 / ratio^(k - 1)), so B_k grows as tau_k shrinks at the same rate;
    - linear: B_1 * k.

    Growing schedules stop at `max_batch` when set; the client also caps the result at its
    own number of examples.

    Raises:
        ValueError: `round` or `base` < 1.
    """
    if round < 1 or base < 1:
        raise ValueError(f"need round >= 1 and base >= 1, got {round}, {base}")
    if isinstance(config, FixedBatch):
        return base
    if isinstance(config, GeometricBatch):
        # In logs, so that a long run cannot overflow; shrunk by a relative 1e-12 first so
        # that rounding noise (8 / 0.5**2 = 32.000000000000004) does not add an example.
        log_size = math.log(base) - (round - 1) * math.log(config.ratio)
        size = (
            _LARGEST_BATCH
            if log_size >= math.log(_LARGEST_BATCH)
            else math.ceil(math.exp(log_size) * (1.0 - 1e-12))
        )
    elif isinstance(config, LinearBatch):
        size = base * round
    else:
        assert_never(config)
    cap = config.max_batch if config.max_batch is not None else _LARGEST_BATCH
    return min(size, cap, _LARGEST_BATCH)


class CensorState(NamedTuple):
    """State of `censor`."""

    last: dict[str, torch.Tensor]
    """g_last: per tensor, float32, the client's last update known to have reached the
    server (what the server reuses); zeros before the first delivery."""
    pending: dict[str, torch.Tensor]
    """The last transmitted update, float32 per tensor; meaningful while `awaiting`."""
    awaiting: bool  # whether `pending` waits for its delivery outcome


def _distance(update: Mapping[str, torch.Tensor], last: Mapping[str, torch.Tensor]) -> float:
    return float(squared_norm({k: v - last[k] for k, v in update.items()}))


def censor(
    threshold: Callable[[int], float],
    *,
    batch_size: Callable[[int, int], int] = fixed_batch,
) -> Policy:
    """CSGD's censoring rule: transmit g_k only if ||g_k - g_last||^2 >= tau_k.

    Per round k, at the client:

    1. The client trains on batches of B_k = `batch_size(k, B_1)` examples; g_k is its
       model delta (with anything carried from a lost upload).
    2. If ||g_k - g_last||^2 >= tau_k = `threshold(k)`, upload g_k and remember it as
       pending; once it is delivered, g_last <- g_k.
    3. Otherwise send nothing and drop g_k (it is not carried: the server already stands
       in for it with g_last, and carrying it too would count that round twice).

    At the server (`thinwire.server.Aggregator.silent`), a selected client that stays silent
    contributes its last delivered update, with its last example count as weight; a client
    that has never delivered one contributes nothing. The censoring decision looks at the
    update before the codec; the server holds the decoded copy, so with a lossy codec the
    two differ by the codec's error (which error feedback re-sends later).

    If no delivery outcome arrives between two transmissions (a runtime that reports none),
    the pending update is assumed delivered.

    State: g_last and the pending update, two model-sized float32 copies per client, and
    whether an outcome is awaited.

    Tuning: tau_1 should be a fraction of a typical ||g||^2 (algorithms.md suggests
    0.1 * ||grad f(x_0)||^2 / M), so the first rounds send; with a geometric tau, a ratio
    of 0.9 to 0.99, and the same ratio for a geometric batch. tau = 0 sends every round.

    Args:
        threshold: tau_k as a function of the 1-based round (see `threshold_at`).
        batch_size: B_k as a function of (round, B_1) (see `batch_size_at`).

    Returns:
        The client's `Policy`; the server's part, reusing a silent client's last update, is
        the `censor` kind's server half (`stale_reuse`, `thinwire.server.halves`).

    Example:
        >>> import torch
        >>> policy = censor(lambda k: 1.0)
        >>> state = policy.init({"w": torch.zeros(1)})
        >>> decision, state = policy.decide(PolicyInput(1, {"w": torch.tensor([2.0])}), state)
        >>> decision.transmit, policy.delivered(True, state).last["w"].item()
        (True, 2.0)
    """

    def init(template: Mapping[str, torch.Tensor]) -> CensorState:
        zeros = {k: torch.zeros_like(v, dtype=torch.float32) for k, v in template.items()}
        return CensorState(zeros, zeros, False)

    def decide(inputs: PolicyInput, state: CensorState) -> tuple[Decision, CensorState]:
        if state.awaiting:
            state = CensorState(state.pending, state.pending, False)
        if _distance(inputs.update, state.last) >= threshold(inputs.round):
            sent = {k: v.float() for k, v in inputs.update.items()}
            return Decision(transmit=True, keep_unsent=False), CensorState(state.last, sent, True)
        return Decision(transmit=False, keep_unsent=False), state

    def delivered(ok: bool, state: CensorState) -> CensorState:
        if not state.awaiting:
            return state
        return CensorState(state.pending if ok else state.last, state.pending, False)

    return Policy(init, decide, delivered, name="censor", batch_size=batch_size)
