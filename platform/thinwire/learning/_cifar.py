"""CIFAR-10 (Krizhevsky 2009) from its "python version" or "binary version" batches.

The python version is six pickled dicts (`data_batch_1`..`data_batch_5`, `test_batch`),
each with `data`, a uint8 array (N, 3072) holding the red, green and blue 32x32 planes of
each image, and `labels`, a list of N ints. Unpickling can run arbitrary code, so these files
are read with `_BatchUnpickler`, which resolves only the handful of NumPy and codec globals a
pickled uint8 array needs and refuses everything else (a batch that names `os.system`
fails before anything is called). The binary version (`data_batch_1.bin`...) stores each
image as one label byte followed by the 3072 pixel bytes.

Pixels are scaled to [0, 1] and normalized per channel with the CIFAR-10 training set's
mean and standard deviation, so inputs are roughly zero-mean and unit-variance.
"""

from __future__ import annotations

import codecs
import io
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from thinwire.learning._files import DatasetError, find_folder, read_file

__all__ = ["CIFAR10_MEAN", "CIFAR10_STD", "load_cifar10"]

try:  # NumPy >= 1.26 exposes numpy._core; older pickles still name numpy.core.
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - NumPy < 1.26
    from numpy.core import multiarray as _multiarray  # type: ignore[no-redef]
    from numpy.core import numeric as _numeric  # type: ignore[no-redef]

PYTHON_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
BINARY_FILES = tuple(f"{name}.bin" for name in PYTHON_FILES)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
_PIXELS = 3 * 32 * 32
_CLASSES = 10

_ALLOWED_GLOBALS: Mapping[tuple[str, str], Callable[..., Any] | type] = {
    # How pickle rebuilds an ndarray (protocols 0-4) and its dtype; numpy.core in files
    # written by NumPy 1.x (the originals), numpy._core by NumPy 2.
    ("numpy.core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    # Protocol 5 rebuilds arrays from their raw buffer.
    ("numpy.core.numeric", "_frombuffer"): _numeric._frombuffer,  # type: ignore[attr-defined]
    ("numpy._core.numeric", "_frombuffer"): _numeric._frombuffer,  # type: ignore[attr-defined]
    # Python 3 writes bytes objects under protocol <= 2 as _codecs.encode(str, "latin1").
    ("_codecs", "encode"): codecs.encode,
}


class _BatchUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild NumPy arrays, lists, dicts and strings, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        """Resolves only the globals in `_ALLOWED_GLOBALS`; refuses every other one."""
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing the global {module}.{name}: a CIFAR-10 batch needs only NumPy arrays"
            ) from None


def _field(batch: Mapping[Any, Any], key: str) -> Any:
    # The originals were pickled by Python 2 and unpickle with bytes keys.
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise KeyError(key)


def _python_batch(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    source = folder / name
    raw = read_file(folder, name)
    try:
        batch = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # a corrupt pickle raises nearly anything
        raise DatasetError(f"{source}: not a CIFAR-10 python batch ({exc})") from None
    try:
        if not isinstance(batch, Mapping):
            raise TypeError(f"holds a {type(batch).__name__}, not a dict")
        data, labels = _field(batch, "data"), _field(batch, "labels")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
            raise TypeError("'data' is not a 2-D uint8 array")
        labels = np.asarray(labels)
        if labels.dtype.kind not in "iu" or labels.ndim != 1:
            raise TypeError("'labels' is not a list of ints")
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"{source}: not a CIFAR-10 python batch ({exc})") from None
    return _checked(source, data, labels)


def _binary_batch(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    source = folder / name
    raw = np.frombuffer(read_file(folder, name), dtype=np.uint8)
    record = 1 + _PIXELS
    if raw.size == 0 or raw.size % record:
        raise DatasetError(
            f"{source}: {raw.size} bytes is not a whole number of {record}-byte records "
            "(label byte + 3072 pixel bytes); truncated or corrupt"
        )
    rows = raw.reshape(-1, record)
    return _checked(source, rows[:, 1:], rows[:, 0])


def _checked(source: Path, data: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if data.shape[1] != _PIXELS:
        raise DatasetError(f"{source}: images have {data.shape[1]} values, expected {_PIXELS}")
    if len(data) != len(labels):
        raise DatasetError(f"{source}: {len(data)} images but {len(labels)} labels")
    if len(labels) and (labels.min() < 0 or labels.max() >= _CLASSES):
        raise DatasetError(f"{source}: labels must lie in 0..9")
    return data, labels.astype(np.int64)


def _tensors(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[torch.Tensor, torch.Tensor]:
    data = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    x = torch.from_numpy(data).float().div_(255.0).view(-1, 3, 32, 32)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return x.sub_(mean).div_(std), torch.from_numpy(labels)


def load_cifar10(root: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loads (x_train, y_train, x_test, y_test) from the CIFAR-10 batches under `root`.

    Looks for the python batches in `root` and `root/cifar-10-batches-py`, then for the
    binary ones in `root` and `root/cifar-10-batches-bin`. Images come back as normalized
    float32 (N, 3, 32, 32), labels as int64.

    Raises:
        DatasetError: no complete set of batches, or a batch that is corrupt, malformed, or
            asks the unpickler for anything but NumPy arrays.
    """
    try:
        folder = find_folder(root, ["cifar-10-batches-py"], PYTHON_FILES)
        files, read = PYTHON_FILES, _python_batch
    except DatasetError as python_missing:
        try:
            folder = find_folder(root, ["cifar-10-batches-bin"], BINARY_FILES)
            files, read = BINARY_FILES, _binary_batch
        except DatasetError as binary_missing:
            raise DatasetError(
                f"CIFAR-10 not found. Python version: {python_missing}. "
                f"Binary version: {binary_missing}"
            ) from None
    x_train, y_train = _tensors([read(folder, name) for name in files[:5]])
    x_test, y_test = _tensors([read(folder, files[5])])
    return x_train, y_train, x_test, y_test
