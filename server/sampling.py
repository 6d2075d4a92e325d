"""Which clients take part in a round (partial participation), identically in every runtime."""

from __future__ import annotations

import torch

from thinwire.config import Experiment
from thinwire.seeding import sampling_seed

__all__ = ["sample_clients"]


def sample_clients(experiment: Experiment, round: int) -> list[int]:
    """The sorted client indices selected for `round` (1-based).

    `experiment.clients_per_round` clients, drawn without replacement from a generator
    seeded by (experiment seed, round), as in FedAvg's C-fraction sampling.
    """
    clients = experiment.data.clients
    count = experiment.clients_per_round
    if count >= clients:
        return list(range(clients))
    generator = torch.Generator().manual_seed(sampling_seed(experiment.seed, round))
    return sorted(torch.randperm(clients, generator=generator)[:count].tolist())
