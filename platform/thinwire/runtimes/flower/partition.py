"""A client's data partition in a node-local cache, so a message need not rebuild the federation.

Flower starts a fresh ClientApp process for every message. Without a cache each one loads the
whole data set and partitions it over every client only to keep one client's share; with a
file data set (MNIST, CIFAR-10) that is most of a cold start. `load_partition` keeps the
share in the SuperNode's state folder instead, beside the client states
(`thinwire.runtimes.flower.state`), keyed by what determines it: the experiment's `data`
section and `seed` (`data_digest`) and the partition id:

    <state-dir>/partitions/<data digest>/client-<partition>/
        tensors.pt      x (N, *input shape) float32 and y (N,) int64 (read back memory-mapped)
        manifest.json   data digest, partition, input shape, class count, size and SHA-256
                        of tensors.pt, and the digest of it all

The folder is written whole or not at all (`thinwire.runtimes.flower.node_files`) and checked on
every read like a state: a cache that is missing, damaged or not of this partition is
rebuilt from the data set and written again, never trusted; a cache that cannot be written
(a full or read-only disk) is logged and the message goes on with the rebuilt partition. The
cache trusts a file data set under `data.root` not to change under the same config: after
replacing those files, delete `<state-dir>/partitions`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.config import Experiment
from thinwire.learning import client_indices, load_dataset
from thinwire.runtimes.flower.node_files import Damaged, read_manifest, read_tensors, write_folder

__all__ = ["Partition", "data_digest", "load_partition", "partition_folder"]

logger = logging.getLogger(__name__)

_FORMAT = "thinwire-partition"
_VERSION = 1


class Partition(NamedTuple):
    """One client's share of the training data, and what a model built for it needs."""

    x: torch.Tensor  # (N, *input_shape) float32, on the CPU
    y: torch.Tensor  # (N,) int64 in [0, num_classes), on the CPU
    input_shape: tuple[int, ...]  # one example's shape, without the batch axis
    num_classes: int


def data_digest(experiment: Experiment) -> str:
    """Names the data a partition comes from: the `data` section and the seed that splits it."""
    config = experiment.model_dump(mode="json", include={"data", "seed"})
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def partition_folder(root: Path, experiment: Experiment, partition: int) -> Path:
    """Where `load_partition` caches `partition` of `experiment` under the node folder `root`."""
    return root / "partitions" / data_digest(experiment) / f"client-{partition}"


def load_partition(root: Path, experiment: Experiment, partition: int) -> Partition:
    """Client `partition`'s training data, from the node's cache or built (and cached).

    Args:
        root: the node's state folder (`thinwire client --state-dir`).
        experiment: the run's experiment.
        partition: the client index, below `experiment.data.clients`.

    Raises:
        DatasetError: the data set cannot be loaded to rebuild the partition.
        ValueError: the data cannot be split over the clients as configured.
    """
    folder = partition_folder(root, experiment, partition)
    identity = _identity(experiment, partition)
    if folder.is_dir():
        try:
            return _read(folder, identity)
        except Damaged as exc:
            logger.warning("rebuilding the cached partition in %s: %s", folder, exc)
    built = _build(experiment, partition)
    body = {
        **identity,
        "input_shape": list(built.input_shape),
        "num_classes": built.num_classes,
    }
    try:
        write_folder(folder, {"x": built.x, "y": built.y}, body)
    except OSError as exc:
        logger.warning("cannot cache client %d's partition in %s: %s", partition, folder, exc)
    return built


def _identity(experiment: Experiment, partition: int) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "version": _VERSION,
        "data": data_digest(experiment),
        "partition": partition,
    }


def _build(experiment: Experiment, partition: int) -> Partition:
    """The partition as `load_federation(experiment).client_data(partition)` gives it."""
    dataset = load_dataset(experiment.data, seed=experiment.seed)
    indices = client_indices(dataset, experiment.data, seed=experiment.seed)[partition]
    return Partition(
        dataset.x_train[indices].contiguous(),
        dataset.y_train[indices].contiguous(),
        tuple(dataset.input_shape),
        dataset.num_classes,
    )


def _read(folder: Path, identity: dict[str, Any]) -> Partition:
    """The cached partition in `folder`, once its files and contents check out."""
    body, _ = read_manifest(folder, identity)
    tensors = read_tensors(folder, body)
    shape, classes = body.get("input_shape"), body.get("num_classes")
    if not (
        isinstance(shape, list)
        and shape
        and all(isinstance(d, int) and d > 0 for d in shape)
        and isinstance(classes, int)
        and classes >= 2
    ):
        raise Damaged(f"the manifest's input_shape {shape!r} or num_classes {classes!r} is wrong")
    x, y = tensors.get("x"), tensors.get("y")
    if x is None or y is None or set(tensors) != {"x", "y"}:
        raise Damaged(f"tensors.pt holds {sorted(tensors)}, not x and y")
    if x.dtype != torch.float32 or tuple(x.shape[1:]) != tuple(shape) or x.shape[0] == 0:
        raise Damaged(f"x is {x.dtype} {tuple(x.shape)}, not float32 (N, *{tuple(shape)})")
    if y.dtype != torch.int64 or y.shape != (x.shape[0],):
        raise Damaged(f"y is {y.dtype} {tuple(y.shape)}, not int64 ({x.shape[0]},)")
    if int(y.min()) < 0 or int(y.max()) >= classes:
        raise Damaged(f"y holds labels outside [0, {classes})")
    return Partition(x, y, tuple(shape), classes)
