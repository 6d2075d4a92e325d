"""Learning-rate schedules over rounds.

Every schedule is a pure function of the training config and the round number, so all roles
(clients, gossip peers, the DP trainer) agree on the rate without sharing any state. Rounds
count from 1 to `train.rounds`; round 1 always uses `train.lr`.

`learning_rate` looks `train.schedule.kind` up in `thinwire.registry.SCHEDULES`: this
module registers the schedules `thinwire.config` declares, and a plugin adds one with
`SCHEDULES.register(kind, section=..., factory=...)`, where `factory(section, lr, round,
rounds)` returns the rate of `round`.
"""

from __future__ import annotations

import math
from typing import Any

from thinwire.config import ConstantLR, CosineLR, InverseTimeLR, StepLR, TrainConfig
from thinwire.registry import SCHEDULES

__all__ = ["learning_rate"]


def learning_rate(train: TrainConfig, round: int) -> float:
    """Returns the local learning rate for `round` under `train.schedule`.

    With T = `train.rounds` and lr = `train.lr`:

    - constant: lr.
    - step: lr * gamma^m, where m counts the milestones <= round: milestone 30 lowers the
      rate from round 30 on (a milestone listed twice applies twice, as in
      `torch.optim.lr_scheduler.MultiStepLR`).
    - cosine: final*lr + (lr - final*lr) * (1 + cos(pi * (round - 1) / T)) / 2. The curve
      would reach final*lr after round T, so the last round still trains with a small
      positive rate instead of being wasted at exactly `final * lr`.
    - inverse_time: lr * a / (a + round - 1), the O(1/t) decay of convex SGD analyses.

    Args:
        train: the training section; `schedule`, `lr` and `rounds` are used.
        round: the 1-based round, in [1, train.rounds] (rounds are numbered from 1
            everywhere in thinwire: records, updates, schedules).

    Raises:
        ValueError: `round` is outside [1, train.rounds], or the schedule's kind has no
            registered factory.

    Examples:
        >>> from thinwire.config import TrainConfig
        >>> learning_rate(TrainConfig(lr=0.1, schedule={"kind": "step", "milestones": [2]}), 2)
        0.010000000000000002
        >>> learning_rate(TrainConfig(lr=0.1, schedule={"kind": "step", "milestones": [2]}), 1)
        0.1
    """
    if not 1 <= round <= train.rounds:
        raise ValueError(f"round {round} is outside the run's rounds [1, {train.rounds}]")
    schedule = train.schedule
    rate: float = SCHEDULES.factory(schedule.kind)(schedule, train.lr, round, train.rounds)
    return rate


def _constant(schedule: Any, lr: float, round: int, rounds: int) -> float:
    del schedule, round, rounds
    return lr


def _step(schedule: StepLR, lr: float, round: int, rounds: int) -> float:
    del rounds
    passed = sum(1 for milestone in schedule.milestones if milestone <= round)
    return lr * schedule.gamma**passed


def _cosine(schedule: CosineLR, lr: float, round: int, rounds: int) -> float:
    floor = schedule.final * lr
    return floor + (lr - floor) * (1.0 + math.cos(math.pi * (round - 1) / rounds)) / 2.0


def _inverse_time(schedule: InverseTimeLR, lr: float, round: int, rounds: int) -> float:
    del rounds
    return lr * schedule.a / (schedule.a + round - 1)


SCHEDULES.register("constant", section=ConstantLR, factory=_constant)
SCHEDULES.register("step", section=StepLR, factory=_step)
SCHEDULES.register("cosine", section=CosineLR, factory=_cosine)
SCHEDULES.register("inverse_time", section=InverseTimeLR, factory=_inverse_time)
