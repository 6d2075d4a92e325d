"""Learning-rate schedules over rounds.

Every schedule is a pure function of the training config and the round number, so all roles
(clients, gossip peers, the DP trainer) agree on the rate without sharing any state. Rounds
count from 0 to `train.rounds - 1`; round 0 always uses `train.lr`.
"""

from __future__ import annotations

import math
from typing import assert_never

from thinwire.config import ConstantLR, CosineLR, InverseTimeLR, StepLR, TrainConfig

__all__ = ["learning_rate"]


def learning_rate(train: TrainConfig, round: int) -> float:
    """Returns the local learning rate for `round` under `train.schedule`.

    With T = `train.rounds` and lr = `train.lr`:

    - constant: lr.
    - step: lr * gamma^m, where m counts the milestones <= round (a milestone listed twice
      applies twice, as in `torch.optim.lr_scheduler.MultiStepLR`).
    - cosine: final*lr + (lr - final*lr) * (1 + cos(pi * round / T)) / 2. The curve reaches
      final*lr at the end of the run (round T), so the last round still trains with a small
      positive rate instead of being wasted at exactly `final * lr`.
    - inverse_time: lr * a / (a + round), the O(1/t) decay of convex SGD analyses.

    Args:
        train: the training section; `schedule`, `lr` and `rounds` are used.
        round: the 0-based round, in [0, train.rounds).

    Raises:
        ValueError: `round` is outside [0, train.rounds).

    Examples:
        >>> from thinwire.config import TrainConfig
        >>> learning_rate(TrainConfig(lr=0.1, schedule={"kind": "step", "milestones": [2]}), 2)
        0.010000000000000002
    """
    if not 0 <= round < train.rounds:
        raise ValueError(f"round {round} is outside the run's rounds [0, {train.rounds})")
    schedule = train.schedule
    lr = train.lr
    if isinstance(schedule, ConstantLR):
        return lr
    if isinstance(schedule, StepLR):
        passed = sum(1 for milestone in schedule.milestones if milestone <= round)
        return lr * schedule.gamma**passed
    if isinstance(schedule, CosineLR):
        floor = schedule.final * lr
        return floor + (lr - floor) * (1.0 + math.cos(math.pi * round / train.rounds)) / 2.0
    if isinstance(schedule, InverseTimeLR):
        return lr * schedule.a / (schedule.a + round)
    assert_never(schedule)
