"""Partial participation is seeded, so every runtime selects the same clients."""

from thinwire.config import parse_config
from thinwire.server import sample_clients


def experiment(fraction: float, seed: int = 0):
    return parse_config(
        {"name": "s", "seed": seed, "data": {"clients": 20}, "train": {"participation": fraction}}
    )


def test_full_participation_takes_everyone():
    assert sample_clients(experiment(1.0), 1) == list(range(20))


def test_fraction_is_seeded_by_round():
    exp = experiment(0.25)
    first = sample_clients(exp, 1)
    assert len(first) == 5 and first == sorted(set(first))
    assert sample_clients(exp, 1) == first
    assert any(sample_clients(exp, r) != first for r in range(2, 6))
    assert sample_clients(experiment(0.25, seed=1), 1) != first or sample_clients(
        experiment(0.25, seed=1), 2
    ) != sample_clients(exp, 2)


def test_at_least_one_client():
    assert len(sample_clients(experiment(0.01), 3)) == 1
