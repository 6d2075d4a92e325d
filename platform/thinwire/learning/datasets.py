"""Data sets as tensors: `load_dataset` and the `Dataset` it returns.

Nothing is ever downloaded. `digits` ships inside scikit-learn and `synthetic` is
generated; `mnist`, `fashion_mnist` and `cifar10` read their standard files from
`data.root` and fail with an error naming the file and folders they expected.

| dataset | input_shape | classes | test split | scaling |
|---|---|---|---|---|
| digits | (1, 8, 8) | 10 | seeded, stratified, `test_fraction` | [0, 1] |
| synthetic | (dim,) | classes | per client, `test_fraction` | none |
| mnist, fashion_mnist | (1, 28, 28) | 10 | official (10k) | [0, 1] |
| cifar10 | (3, 32, 32) | 10 | official (10k) | per-channel mean/std |
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from thinwire.config import DataConfig, SyntheticData
from thinwire.learning._cifar import BINARY_FILES, PYTHON_FILES, load_cifar10
from thinwire.learning._files import DatasetError
from thinwire.learning._idx import IDX_FILES, load_idx_dataset
from thinwire.learning._synthetic import generate_synthetic
from thinwire.registry import DATASETS

__all__ = ["ClientSplit", "Dataset", "DatasetError", "load_dataset"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class ClientSplit:
    """A data set's own split over clients: per client, indices into the train and test sets."""

    train: tuple[torch.Tensor, ...]  # int64 indices into x_train, one tensor per client
    test: tuple[torch.Tensor, ...]  # int64 indices into x_test, one tensor per client


@dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded data set: float32 features, int64 labels, and what a model needs to know."""

    name: str
    x_train: torch.Tensor  # (N_train, *input_shape) float32
    y_train: torch.Tensor  # (N_train,) int64 in [0, num_classes)
    x_test: torch.Tensor  # (N_test, *input_shape) float32
    y_test: torch.Tensor  # (N_test,) int64 in [0, num_classes)
    num_classes: int
    input_shape: tuple[int, ...]
    natural: ClientSplit | None = None
    """The split the data was generated with (synthetic); None when it must be partitioned."""

    def to(self, device: torch.device | str) -> Dataset:
        """Returns a copy with every tensor (features, labels, client indices) on `device`."""
        natural = self.natural
        if natural is not None:
            natural = ClientSplit(
                train=tuple(t.to(device) for t in natural.train),
                test=tuple(t.to(device) for t in natural.test),
            )
        return Dataset(
            name=self.name,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
            num_classes=self.num_classes,
            input_shape=self.input_shape,
            natural=natural,
        )


def load_dataset(config: DataConfig, *, seed: int) -> Dataset:
    """Loads the data set `config.dataset` names, on the CPU.

    Args:
        config: the experiment's `data` section.
        seed: seeds digits' train/test split and synthetic's generator; ignored by data sets
            with an official split.

    Returns:
        The `Dataset`; move it with `Dataset.to(device)`.

    Raises:
        DatasetError: files missing, unreadable or malformed (the message names the file
            and the folders searched).

    Examples:
        >>> data = load_dataset(DataConfig(dataset="digits"), seed=0)
        >>> data.input_shape, data.num_classes, len(data.y_train) + len(data.y_test)
        ((1, 8, 8), 10, 1797)
    """
    dataset: Dataset = DATASETS.loader(config.dataset)(config, seed)
    logger.info(
        "loaded %s: %d train / %d test examples, input %s, %d classes",
        dataset.name,
        len(dataset.y_train),
        len(dataset.y_test),
        dataset.input_shape,
        dataset.num_classes,
    )
    return dataset


def _stratified_split(
    labels: torch.Tensor, test_fraction: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    # Per class, round(test_fraction * n_c) shuffled examples go to the test set.
    train, test = [], []
    for label in torch.unique(labels).tolist():
        members = torch.nonzero(labels == label).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        cut = round(test_fraction * len(members))
        test.append(members[:cut])
        train.append(members[cut:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values


def _digits_file() -> Path:
    """scikit-learn's copy of the UCI handwritten digits, found without importing sklearn.

    Importing scikit-learn costs over a second, and every Flower ClientApp message and
    every gossip peer is a fresh process: the file is read directly instead, exactly as
    `sklearn.datasets.load_digits` reads it (1,797 rows of 64 pixels and a label).
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("dataset 'digits' ships with scikit-learn, which is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise DatasetError(f"dataset 'digits': scikit-learn's data file {path} is missing")
    return path


def _digits(config: DataConfig, seed: int) -> Dataset:
    table = np.loadtxt(_digits_file(), delimiter=",")
    x = torch.from_numpy(table[:, :-1].reshape(-1, 8, 8)).float().div_(16.0).unsqueeze(1)
    y = torch.from_numpy(table[:, -1].astype(np.int64))
    train, test = _stratified_split(y, config.test_fraction, torch.Generator().manual_seed(seed))
    return Dataset("digits", x[train], y[train], x[test], y[test], 10, (1, 8, 8))


def _synthetic(config: DataConfig, seed: int) -> Dataset:
    params = config.synthetic or SyntheticData()
    split = generate_synthetic(
        params, config.clients, test_fraction=config.test_fraction, seed=seed
    )
    return Dataset(
        name="synthetic",
        x_train=split.x_train,
        y_train=split.y_train,
        x_test=split.x_test,
        y_test=split.y_test,
        num_classes=params.classes,
        input_shape=(params.dim,),
        natural=ClientSplit(train=split.train, test=split.test),
    )


def _root(config: DataConfig) -> Path:
    if config.root is None:  # the config forbids this; kept for a clear error all the same
        raise DatasetError(f"dataset {config.dataset!r} reads local files: set data.root")
    if not config.root.is_dir():
        raise DatasetError(f"data.root {config.root} is not a folder")
    return config.root


def _idx_loader(name: str, subfolder: str) -> Callable[[DataConfig, int], Dataset]:
    def load(config: DataConfig, seed: int) -> Dataset:
        del seed  # official split
        x_train, y_train, x_test, y_test = load_idx_dataset(_root(config), subfolder)
        return Dataset(name, x_train, y_train, x_test, y_test, 10, (1, 28, 28))

    return load


def _cifar10(config: DataConfig, seed: int) -> Dataset:
    del seed  # official split
    x_train, y_train, x_test, y_test = load_cifar10(_root(config))
    return Dataset("cifar10", x_train, y_train, x_test, y_test, 10, (3, 32, 32))


_IDX_LAYOUT = (
    "`data.root` or `data.root/{sub}` holds the four IDX files, each plain or gzipped "
    "(`.gz`): " + ", ".join(f"`{name}`" for name in IDX_FILES) + ". Images are unsigned "
    "bytes, N x 28 x 28; labels are N bytes below 10. Official split (60k / 10k)."
)

# `thinwire.config` declares these names (they validate without this module); their
# loaders and layouts (what `data.root` must hold, for the reference) register here.
DATASETS.register(
    "digits",
    reads_files=False,
    layout="Nothing to provide: scikit-learn's 1,797 8x8 handwritten digits, read from "
    "the file scikit-learn installs. Split by `data.test_fraction`, stratified and seeded.",
    loader=_digits,
)
DATASETS.register(
    "synthetic",
    reads_files=False,
    layout="Nothing to provide: FedProx's Synthetic(alpha, beta), generated per "
    "client from the seed (`data.synthetic`).",
    loader=_synthetic,
)
# The second folder is torchvision's layout, accepted as well as the files in root.
DATASETS.register(
    "mnist",
    reads_files=True,
    layout=_IDX_LAYOUT.format(sub="MNIST/raw"),
    loader=_idx_loader("mnist", "MNIST/raw"),
)
DATASETS.register(
    "fashion_mnist",
    reads_files=True,
    layout=_IDX_LAYOUT.format(sub="FashionMNIST/raw"),
    loader=_idx_loader("fashion_mnist", "FashionMNIST/raw"),
)
DATASETS.register(
    "cifar10",
    reads_files=True,
    layout="`data.root` or `data.root/cifar-10-batches-py` holds the python version: "
    + ", ".join(f"`{name}`" for name in PYTHON_FILES)
    + " (pickled dicts of `data`, uint8 N x 3072, and `labels`; read without running "
    "pickled code); or `data.root` or `data.root/cifar-10-batches-bin` holds the binary "
    "version: "
    + ", ".join(f"`{name}`" for name in BINARY_FILES)
    + " (one label byte, then 3,072 pixel bytes per image). Each file plain or gzipped. "
    "Official split (50k / 10k).",
    loader=_cifar10,
)
