"""Splitting a training set over clients: IID, Dirichlet label skew, label shards.

Each partitioner returns one sorted int64 index tensor per client into the label vector it
was given. Every example goes to at most one client, and the split is a pure function of
(labels, clients, config, seed): the same seed gives the same split on every host.
Randomness comes from a NumPy `Generator` seeded with `seed` (NumPy has the Dirichlet
sampler torch lacks for an explicit generator); the split is done once, on the host.

`partition` looks `data.partition.kind` up in `thinwire.registry.PARTITIONS`: this module
registers the factories of the sections `thinwire.config` declares, and a plugin adds one
with `PARTITIONS.register(kind, section=..., factory=...)`, where `factory(section, labels,
clients, rng)` takes the labels as a NumPy array and the seeded `np.random.Generator` and
returns one index array per client.

Example:
    >>> import torch
    >>> from thinwire.config import ShardsPartition
    >>> labels = torch.arange(10).repeat_interleave(10)
    >>> parts = partition(labels, 5, ShardsPartition(shards=2), seed=0)
    >>> [len(torch.unique(labels[p])) for p in parts]
    [2, 2, 2, 2, 2]
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from thinwire.config import DataConfig, DirichletPartition, IIDPartition, Partition, ShardsPartition
from thinwire.learning.datasets import Dataset
from thinwire.registry import PARTITIONS

__all__ = ["MAX_DIRICHLET_DRAWS", "client_indices", "partition"]

logger = logging.getLogger(__name__)

MAX_DIRICHLET_DRAWS = 1000
"""How many Dirichlet splits are drawn before giving up on `min_examples`."""


def partition(
    labels: torch.Tensor, clients: int, config: Partition, *, seed: int
) -> list[torch.Tensor]:
    """Splits the examples behind `labels` over `clients` clients.

    - iid: a seeded permutation dealt into `clients` nearly equal parts (sizes differ by at
      most one); every example is used.
    - dirichlet: for each class c, proportions p_c ~ Dir(alpha * 1) over the clients, and
      the class's examples (shuffled) are cut in those proportions (Hsu et al. 2019; Wang et
      al. 2020). Small alpha gives each client few classes, large alpha approaches IID.
      The whole split is redrawn until every client has at least `min_examples` examples
      (so the result follows the Dirichlet law conditioned on that), up to
      `MAX_DIRICHLET_DRAWS` draws. Every example is used.
    - shards: as in FedAvg (McMahan et al. 2017), examples are sorted by label, cut into
      clients * shards shards and each client is dealt `shards` random shards. Here cuts
      never straddle a class boundary: class c gets a share of the shards proportional to
      its size (largest remainder), and its examples are split evenly over them. Each
      client therefore sees at most `shards` labels. When there are fewer shards than
      classes, the classes left without a shard are not used.

    Args:
        labels: int labels shaped (N,), on any device.
        clients: the number of clients (>= 1).
        config: the `data.partition` section.
        seed: the partition seed.

    Returns:
        One sorted int64 CPU tensor of example indices per client.

    Raises:
        ValueError: there are too few examples for the clients (iid: N < clients;
            dirichlet: N < clients * min_examples, or no acceptable draw; shards:
            N < clients * shards), `labels` is not a 1-D integer tensor, or the kind has no
            registered factory.
    """
    if labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be a 1-D integer tensor, got {labels.dtype} {labels.shape}")
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    factory = PARTITIONS.factory(config.kind)
    y = labels.cpu().numpy()
    parts = factory(config, y, clients, np.random.default_rng(seed))
    return [torch.from_numpy(np.sort(p).astype(np.int64)) for p in parts]


def client_indices(dataset: Dataset, data: DataConfig, *, seed: int) -> list[torch.Tensor]:
    """Returns each client's training indices into `dataset`: its natural split, or `partition`.

    A dataset generated per client (synthetic) keeps its own split; any other is split by
    `data.partition`.

    Raises:
        ValueError: a natural split with a client count other than `data.clients`, or the
            errors of `partition`.
    """
    if dataset.natural is not None:
        if len(dataset.natural.train) != data.clients:
            raise ValueError(
                f"dataset {dataset.name!r} was generated for {len(dataset.natural.train)} "
                f"clients but data.clients is {data.clients}"
            )
        return [index.cpu() for index in dataset.natural.train]
    return partition(dataset.y_train, data.clients, data.partition, seed=seed)


def _iid(config: Any, y: np.ndarray, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    del config
    n = len(y)
    if n < clients:
        raise ValueError(f"iid partition: {n} examples cannot give each of {clients} clients one")
    return np.array_split(rng.permutation(n), clients)


def _dirichlet(
    config: DirichletPartition, y: np.ndarray, clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    need = clients * config.min_examples
    if len(y) < need:
        raise ValueError(
            f"dirichlet partition: {len(y)} examples cannot give each of {clients} clients "
            f"min_examples={config.min_examples}"
        )
    by_class = [np.flatnonzero(y == c) for c in np.unique(y)]
    for draw in range(1, MAX_DIRICHLET_DRAWS + 1):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        for members in by_class:
            shuffled = rng.permutation(members)
            proportions = rng.dirichlet(np.full(clients, config.alpha))
            cuts = (np.cumsum(proportions)[:-1] * len(shuffled)).astype(int)
            for client, piece in enumerate(np.split(shuffled, cuts)):
                parts[client].append(piece)
        merged = [np.concatenate(pieces) for pieces in parts]
        if min(len(p) for p in merged) >= config.min_examples:
            if draw > 1:
                logger.debug("dirichlet partition accepted at draw %d", draw)
            return merged
    raise ValueError(
        f"dirichlet partition: no split in {MAX_DIRICHLET_DRAWS} draws gave every one of "
        f"{clients} clients min_examples={config.min_examples} (alpha={config.alpha}, "
        f"{len(y)} examples); raise alpha, lower min_examples or use fewer clients"
    )


def _shards(
    config: ShardsPartition, y: np.ndarray, clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    shards = config.shards
    total = clients * shards
    if len(y) < total:
        raise ValueError(
            f"shards partition: {len(y)} examples cannot fill {clients} clients x {shards} shards"
        )
    classes, sizes = np.unique(y, return_counts=True)
    # Largest-remainder apportionment of the shards to classes, by class size.
    quota = total * sizes / len(y)
    counts = np.floor(quota).astype(int)
    order = np.argsort(-(quota - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    pieces: list[np.ndarray] = []
    for label, count in zip(classes, counts, strict=True):
        if count:
            members = rng.permutation(np.flatnonzero(y == label))
            pieces.extend(np.array_split(members, count))
    dealt = rng.permutation(total)
    return [
        np.concatenate([pieces[s] for s in dealt[k * shards : (k + 1) * shards]])
        for k in range(clients)
    ]


PARTITIONS.register("iid", section=IIDPartition, factory=_iid)
PARTITIONS.register("dirichlet", section=DirichletPartition, factory=_dirichlet)
PARTITIONS.register("shards", section=ShardsPartition, factory=_shards)
