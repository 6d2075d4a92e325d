import math

import pytest

from thinwire.config import TrainConfig
from thinwire.learning import learning_rate


def _train(schedule, rounds=10, lr=0.1):
    return TrainConfig(rounds=rounds, lr=lr, schedule=schedule)


def test_constant_is_lr_every_round():
    train = _train({"kind": "constant"})
    assert [learning_rate(train, t) for t in range(1, 11)] == [0.1] * 10


def test_step_multiplies_by_gamma_at_each_milestone():
    train = _train({"kind": "step", "milestones": [3, 6], "gamma": 0.5})
    rates = [learning_rate(train, t) for t in range(1, 11)]
    assert rates == pytest.approx([0.1] * 2 + [0.05] * 3 + [0.025] * 5)


def test_step_applies_a_repeated_milestone_twice():
    train = _train({"kind": "step", "milestones": [2, 2], "gamma": 0.1})
    assert learning_rate(train, 2) == pytest.approx(0.001)


def test_cosine_decays_from_lr_towards_final_lr():
    train = _train({"kind": "cosine", "final": 0.1}, rounds=4, lr=1.0)
    rates = [learning_rate(train, t) for t in range(1, 5)]
    expected = [0.1 + 0.9 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(4)]
    assert rates == pytest.approx(expected)
    assert rates[0] == 1.0
    assert rates == sorted(rates, reverse=True)
    assert rates[-1] > 0.1  # the last round still trains


def test_inverse_time_is_lr_a_over_a_plus_t():
    train = _train({"kind": "inverse_time", "a": 4.0}, rounds=20, lr=1.0)
    assert [learning_rate(train, t) for t in (1, 5, 13)] == pytest.approx([1.0, 0.5, 0.25])


@pytest.mark.parametrize("round_", [0, 11])
def test_rounds_outside_the_run_are_rejected(round_):
    with pytest.raises(ValueError, match=r"round \d+ is outside the run's rounds \[1, 10\]"):
        learning_rate(_train({"kind": "constant"}), round_)


def test_every_declared_schedule_kind_has_a_factory():
    from thinwire.registry import SCHEDULES

    assert SCHEDULES.kinds() == ("constant", "cosine", "inverse_time", "step")
    for kind in SCHEDULES.kinds():
        assert callable(SCHEDULES.factory(kind)), kind
