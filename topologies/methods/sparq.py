"""SPARQ-SGD's event trigger: when a node's model has moved far enough from its estimate.

Singh, Data, George, Diggavi, "SPARQ-SGD: Event-Triggered and Compressed Communication in
Decentralized Optimization" (arXiv 1910.14280, IEEE TAC). SPARQ is CHOCO-SGD with two
savings on top (the third, compression, is the codec's):

- synchronization indices: nodes exchange only every H-th step. Here a round already runs
  `train.local_steps` local steps, and synchronization happens on the rounds t with
  t mod `sync_every` == 0, so the paper's H is sync_every * local_steps;
- the trigger: at a synchronization round, node i fires only if

      ||x_i^{t+1/2} - x_hat_i||^2 > c_t * lr_t^2,

  the squared norm of the whole flattened model's distance to its public estimate against
  the threshold times the round's learning rate squared. A node that does not fire sends
  nothing (an empty message: zero payload bytes), and its neighbours keep its estimate.

Threshold schedules c_t (t = 1-based round): constant; `step`, raised by `increment` every
`every` rounds (the paper's CIFAR-10 recipe starts at 2 and adds 1 every 10 epochs);
`polynomial`, c * t^power (the convex analysis has c_t <= c_0 t^(1 - eps), eps in (0, 1), so
that c_t * lr_t^2 -> 0 under a 1/t learning rate). Tuning: c_t * lr_t^2 is compared with a
squared distance that grows with the local steps per round, so raise c with local_steps;
c = 0 fires whenever the model moved at all (CHOCO).

Example:
    >>> from thinwire.config import StepThreshold
    >>> trigger = Trigger(StepThreshold(c=2.0, increment=1.0, every=10), sync_every=1)
    >>> trigger.threshold(1), trigger.threshold(11)
    (2.0, 3.0)
    >>> [trigger.fires(round=11, lr=0.1, distance=d) for d in (0.02, 0.04)]
    [False, True]
"""

from __future__ import annotations

import math
from typing import assert_never

from thinwire.config import ConstantThreshold, PolynomialThreshold, StepThreshold, Threshold

__all__ = ["Trigger", "threshold"]


def threshold(config: Threshold, round: int) -> float:
    """The threshold c_t of the 1-based `round` under `config`.

    Raises:
        ValueError: for a round below 1.
    """
    if round < 1:
        raise ValueError(f"rounds count from 1, got {round}")
    if isinstance(config, ConstantThreshold):
        return config.c
    if isinstance(config, StepThreshold):
        return config.c + config.increment * ((round - 1) // config.every)
    if isinstance(config, PolynomialThreshold):
        return config.c * round**config.power
    assert_never(config)


class Trigger:
    """SPARQ's schedule of synchronization rounds and its firing rule.

    Args:
        config: the threshold schedule c_t.
        sync_every: rounds between synchronization indices (1: every round).
    """

    def __init__(self, config: Threshold, *, sync_every: int) -> None:
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.config = config
        self.sync_every = sync_every

    def synchronizes(self, round: int) -> bool:
        """Whether `round` is a synchronization index (every node agrees without talking)."""
        return round % self.sync_every == 0

    def threshold(self, round: int) -> float:
        """c_t for `round`."""
        return threshold(self.config, round)

    def fires(self, *, round: int, lr: float, distance: float) -> bool:
        """Whether a node whose squared distance to its estimate is `distance` fires."""
        if not math.isfinite(distance):
            raise ValueError(f"the model's distance to its estimate is {distance}")
        return distance > self.threshold(round) * lr * lr
