"""Server-side aggregation rules: small pieces that turn client updates into one step.

A rule takes the round's contributions, in client order, each a decoded update (named
float32 tensors) with its weight (the sender's example count), and returns the aggregate.
Rules compose like codec wrappers: `clipped(rule, max_norm)` is a rule that clips every
update's l2 norm before handing them on, so a robust server is `clipped(median(), 5.0)`
rather than a flag inside the `Aggregator`. `build_rule` builds the one the experiment's
`aggregation` section names, from `thinwire.registry.AGGREGATION_RULES`: this module
registers the factories of the rule sections `thinwire.config` declares, and a plugin may
register more (`AGGREGATION_RULES.register(kind, section=..., factory=...)`).
`sign_vote()` is signSGD's majority vote: the aggregate is a sign per coordinate, and the
server's learning rate is the step size.

Sums accumulate in float64, so no weighted sum of finite float32 updates overflows
(|w| <= 2**40 and |v| < 2**128 keep every product and partial sum far inside float64);
results come back as float32.

Sparse updates: a decoded update is dense, with zeros where the payload carried nothing.
For the robust rules a missing coordinate therefore counts as zero, "this client does not
move it", which is what a sparse update means; with top-k at 1 % density the median of a
coordinate is usually 0 unless most clients sent it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from thinwire.codecs.receive import l2_norm
from thinwire.config import (
    AggregationConfig,
    MeanRule,
    MedianRule,
    SignVoteRule,
    TrimmedMeanRule,
)
from thinwire.registry import AGGREGATION_RULES

__all__ = [
    "Contribution",
    "Rule",
    "build_rule",
    "clip_update",
    "clipped",
    "median",
    "sign_vote",
    "trimmed_mean",
    "weighted_mean",
    "weighted_sum",
]

Contribution = tuple[dict[str, torch.Tensor], float]
"""A decoded update and its weight (the sender's example count)."""

Rule = Callable[[Sequence[Contribution]], dict[str, torch.Tensor]]
"""Contributions (non-empty, in client order) -> the aggregate update."""


def weighted_sum(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
    """sum_i w_i v_i per tensor, in float64 (in the order given, so every runtime agrees)."""
    total: dict[str, torch.Tensor] = {}
    for delta, weight in contributions:
        for name, v in delta.items():
            if name not in total:
                total[name] = torch.zeros(v.shape, dtype=torch.float64, device=v.device)
            # In place, the float32 update read as float64: no temporary the model's size.
            total[name].add_(v, alpha=weight)
    return total


def weighted_mean() -> Rule:
    """FedAvg: sum_i w_i v_i / sum_i w_i."""

    def rule(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        weight = sum(w for _, w in contributions)
        return {k: (v / weight).float() for k, v in weighted_sum(contributions).items()}

    return rule


def _stacked(contributions: Sequence[Contribution], name: str) -> torch.Tensor:
    # (n, *shape), sorted along the clients' axis.
    return torch.sort(torch.stack([delta[name] for delta, _ in contributions]), dim=0).values


def trimmed_mean(beta: float) -> Rule:
    """Per coordinate, drop the floor(beta n) largest and smallest values; average the rest.

    Unweighted, as Flower's FedTrimmedAvg. With beta < 0.5 at least one value remains.
    """
    if not 0.0 <= beta < 0.5:
        raise ValueError(f"trimmed_mean beta must be in [0, 0.5), got {beta}")

    def rule(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        n = len(contributions)
        cut = int(beta * n)
        return {
            name: _stacked(contributions, name)[cut : n - cut].double().mean(dim=0).float()
            for name in contributions[0][0]
        }

    return rule


def median() -> Rule:
    """Per coordinate, the median of the updates, unweighted, as Flower's FedMedian.

    With an even number of updates it is the mean of the two middle values.
    """

    def rule(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        n = len(contributions)
        out = {}
        for name in contributions[0][0]:
            ordered = _stacked(contributions, name)
            low, high = ordered[(n - 1) // 2].double(), ordered[n // 2].double()
            out[name] = ((low + high) / 2).float()
        return out

    return rule


def sign_vote() -> Rule:
    """SignSGD with majority vote (Bernstein, Zhao, Azizzadenesheli, Anandkumar, ICLR'19).

    Each client's update votes with its sign per coordinate; the aggregate is the majority,

        a_j = +1 if sum_i sign(v_ij) >= 0 else -1,

    unweighted (one client, one vote), as in the paper. A tie, including a coordinate no
    client moved, goes to +1, the sign thinwire's sign quantizer gives a zero: the vote is
    then always +-1, so a `sign` downlink codec carries it exactly at one bit per coordinate
    (plus one scale), and the server applies x <- x + lr * a with `train.server.lr` as
    signSGD's step size. The clients' side is the `sign` quantizer: only the signs of their
    payloads count, their scales are ignored (no averaging of magnitudes).
    """

    def rule(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        out = {}
        for name, first in contributions[0][0].items():
            votes = torch.zeros(first.shape, dtype=torch.int32, device=first.device)
            for delta, _ in contributions:
                votes += torch.where(delta[name] < 0, -1, 1).to(torch.int32)
            out[name] = torch.where(votes >= 0, 1.0, -1.0).to(torch.float32)
        return out

    return rule


def clipped(rule: Rule, max_norm: float) -> Rule:
    """`rule` on updates scaled down to l2 norm <= max_norm (the whole update's norm).

    As in central DP's fixed clipping (Flower's DifferentialPrivacyServerSideFixedClipping),
    without the noise: one client's update can move the aggregate by at most its weight's
    share of max_norm.
    """
    if not max_norm > 0:
        raise ValueError(f"clip max_norm must be > 0, got {max_norm}")

    def wrapped(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        return rule([(clip_update(d, max_norm), w) for d, w in contributions])

    return wrapped


def clip_update(delta: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """`delta` scaled down to l2 norm `max_norm` if it is longer, else `delta` itself."""
    norm = l2_norm(delta.values())
    if norm <= max_norm:
        return delta
    scale = max_norm / norm
    return {k: v * scale for k, v in delta.items()}


AGGREGATION_RULES.register("mean", section=MeanRule, factory=lambda section: weighted_mean())
AGGREGATION_RULES.register(
    "trimmed_mean", section=TrimmedMeanRule, factory=lambda section: trimmed_mean(section.beta)
)
AGGREGATION_RULES.register("median", section=MedianRule, factory=lambda section: median())
AGGREGATION_RULES.register("sign_vote", section=SignVoteRule, factory=lambda section: sign_vote())


def build_rule(config: AggregationConfig) -> Rule:
    """The rule the experiment's `aggregation` section names, clipped if it asks.

    Raises:
        ValueError: for a rule kind without a registered factory.
    """
    rule: Rule = AGGREGATION_RULES.factory(config.rule.kind)(config.rule)
    return clipped(rule, config.clip_norm) if config.clip_norm is not None else rule
