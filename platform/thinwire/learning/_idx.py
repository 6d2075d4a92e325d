"""MNIST and Fashion-MNIST from their IDX files (LeCun et al.; Xiao et al. 2017).

The IDX format is a 4-byte magic number (two zero bytes, a type code, the number of
dimensions), one big-endian uint32 per dimension, then the values in row-major order. Both
data sets ship four files, optionally gzipped:

    train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte

Every header is checked against what the data set must be (unsigned bytes, N x 28 x 28
images, N labels below 10) and the payload length against the header, so a truncated
download or a swapped file is reported instead of becoming garbage tensors.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from thinwire.learning._files import DatasetError, find_folder, read_file

__all__ = ["IDX_FILES", "load_idx_dataset", "parse_idx"]

IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_UBYTE = 0x08
_SIDE = 28
_CLASSES = 10


def parse_idx(data: bytes, *, ndim: int, source: str) -> np.ndarray:
    """Parses an unsigned-byte IDX file with `ndim` dimensions into a uint8 array.

    Raises:
        DatasetError: a bad magic number, type code, rank, or payload length.
    """
    if len(data) < 4 + 4 * ndim:
        raise DatasetError(f"{source}: {len(data)} bytes is too short for an IDX header")
    if data[0] != 0 or data[1] != 0 or data[2] != _UBYTE or data[3] != ndim:
        raise DatasetError(
            f"{source}: magic number {data[:4].hex()} is not an unsigned-byte IDX file with "
            f"{ndim} dimension(s) (expected 0000080{ndim})"
        )
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = 4 + 4 * ndim + math.prod(shape)
    if len(data) != expected:
        raise DatasetError(
            f"{source}: the header promises {shape} values ({expected} bytes) but the file "
            f"has {len(data)} bytes (truncated or corrupt)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _split(folder: Path, images_name: str, labels_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    images = parse_idx(read_file(folder, images_name), ndim=3, source=str(folder / images_name))
    labels = parse_idx(read_file(folder, labels_name), ndim=1, source=str(folder / labels_name))
    if images.shape[1:] != (_SIDE, _SIDE):
        raise DatasetError(
            f"{folder / images_name}: images are {images.shape[1]}x{images.shape[2]}, "
            f"expected {_SIDE}x{_SIDE}"
        )
    if len(images) != len(labels):
        raise DatasetError(
            f"{folder}: {images_name} holds {len(images)} images but {labels_name} holds "
            f"{len(labels)} labels"
        )
    if len(labels) and labels.max() >= _CLASSES:
        raise DatasetError(f"{folder / labels_name}: label {labels.max()} is not below 10")
    x = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def load_idx_dataset(
    root: Path, subfolder: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loads (x_train, y_train, x_test, y_test) from the IDX files in `root` or `root/subfolder`.

    Images come back as float32 (N, 1, 28, 28) in [0, 1], labels as int64.

    Raises:
        DatasetError: missing, unreadable or malformed files.
    """
    folder = find_folder(root, [subfolder], IDX_FILES)
    x_train, y_train = _split(folder, IDX_FILES[0], IDX_FILES[1])
    x_test, y_test = _split(folder, IDX_FILES[2], IDX_FILES[3])
    return x_train, y_train, x_test, y_test
