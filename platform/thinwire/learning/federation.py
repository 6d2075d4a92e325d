"""Everything a star or gossip run needs from the learning stack, set up once from a config."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from thinwire.config import Experiment
from thinwire.learning.datasets import Dataset, load_dataset
from thinwire.learning.device import resolve_device
from thinwire.learning.models import build_model
from thinwire.learning.partition import client_indices
from thinwire.learning.workspace import Workspace

__all__ = ["Federation", "load_federation"]


@dataclass(frozen=True, eq=False)
class Federation:
    """A run's data on its device, each client's share of it, and the model workspace."""

    dataset: Dataset
    partitions: list[torch.Tensor]  # per client: int64 indices into the training set
    workspace: Workspace

    def client_data(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of client `index`, on the run's device."""
        idx = self.partitions[index].to(self.dataset.x_train.device)
        return self.dataset.x_train[idx], self.dataset.y_train[idx]

    def all_client_data(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """`client_data` of every client, in index order."""
        return (self.client_data(i) for i in range(len(self.partitions)))

    def test_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out set every runtime evaluates on."""
        return self.dataset.x_test, self.dataset.y_test


def load_federation(experiment: Experiment) -> Federation:
    """Loads the data, partitions it over the clients and builds the initial model.

    Every runtime calls this with the same config and gets the same partitions and the same
    initial weights (all derived from `experiment.seed`).
    """
    device = resolve_device(experiment.train.device)
    dataset = load_dataset(experiment.data, seed=experiment.seed)
    partitions = client_indices(dataset, experiment.data, seed=experiment.seed)
    model = build_model(
        experiment.model,
        dataset.input_shape,
        dataset.num_classes,
        seed=experiment.seed,
        device=device,
    )
    return Federation(dataset.to(device), partitions, Workspace(model, device))
