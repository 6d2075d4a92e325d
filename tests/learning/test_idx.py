import gzip
import struct

import numpy as np
import pytest
import torch

from thinwire.config import DataConfig
from thinwire.learning import DatasetError, load_dataset

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _idx(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    return header + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def _write(folder, name, data: bytes, gz: bool):
    folder.mkdir(parents=True, exist_ok=True)
    if gz:
        (folder / f"{name}.gz").write_bytes(gzip.compress(data))
    else:
        (folder / name).write_bytes(data)


def _dataset(folder, *, gz=False, n_train=12, n_test=5, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        _write(folder, FILES[split][0], _idx(images), gz)
        _write(folder, FILES[split][1], _idx(labels), gz)
        arrays[split] = (images, labels)
    return arrays


def _load(root, dataset="mnist"):
    return load_dataset(DataConfig(dataset=dataset, root=root), seed=0)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_reads_the_four_idx_files(tmp_path, gz):
    arrays = _dataset(tmp_path, gz=gz)
    data = _load(tmp_path)
    assert (data.name, data.input_shape, data.num_classes) == ("mnist", (1, 28, 28), 10)
    assert data.x_train.shape == (12, 1, 28, 28) and data.x_test.shape == (5, 1, 28, 28)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    images, labels = arrays["train"]
    assert torch.equal(data.x_train[:, 0], torch.from_numpy(images).float() / 255)
    assert torch.equal(data.y_train, torch.from_numpy(labels).long())
    assert torch.equal(data.y_test, torch.from_numpy(arrays["test"][1]).long())


def test_fashion_mnist_reads_torchvision_s_layout(tmp_path):
    arrays = _dataset(tmp_path / "FashionMNIST" / "raw", gz=True)
    data = _load(tmp_path, "fashion_mnist")
    assert data.name == "fashion_mnist"
    assert torch.equal(data.y_test, torch.from_numpy(arrays["test"][1]).long())


def test_missing_files_name_the_expected_files_and_folders(tmp_path):
    with pytest.raises(DatasetError) as error:
        _load(tmp_path)
    message = str(error.value)
    assert "train-images-idx3-ubyte" in message and "t10k-labels-idx1-ubyte" in message
    assert str(tmp_path) in message and str(tmp_path / "MNIST" / "raw") in message


def test_a_missing_file_is_named(tmp_path):
    _dataset(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetError, match=f"{tmp_path} lacks t10k-labels-idx1-ubyte"):
        _load(tmp_path)


def test_a_bad_magic_number_is_reported(tmp_path):
    _dataset(tmp_path)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(b"\x00\x00\x08\x03" + path.read_bytes()[4:])  # claims 3 dimensions
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte: magic number 00000803"):
        _load(tmp_path)


def test_a_truncated_file_is_reported(tmp_path):
    _dataset(tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        _load(tmp_path)


def test_images_of_the_wrong_size_are_reported(tmp_path):
    _dataset(tmp_path)
    _write(tmp_path, FILES["train"][0], _idx(np.zeros((12, 27, 27), np.uint8)), False)
    with pytest.raises(DatasetError, match="images are 27x27, expected 28x28"):
        _load(tmp_path)


def test_image_and_label_counts_must_agree(tmp_path):
    _dataset(tmp_path)
    _write(tmp_path, FILES["test"][1], _idx(np.zeros(4, np.uint8)), False)
    with pytest.raises(DatasetError, match="holds 5 images but t10k-labels-idx1-ubyte holds 4"):
        _load(tmp_path)


def test_labels_above_nine_are_reported(tmp_path):
    _dataset(tmp_path)
    _write(tmp_path, FILES["test"][1], _idx(np.full(5, 10, np.uint8)), False)
    with pytest.raises(DatasetError, match="label 10 is not below 10"):
        _load(tmp_path)


def test_a_corrupt_gzip_file_is_reported(tmp_path):
    _dataset(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte.gz: cannot read the file"):
        _load(tmp_path)
