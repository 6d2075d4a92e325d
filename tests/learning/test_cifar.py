import os
import pickle

import numpy as np
import pytest
import torch

from thinwire.config import DataConfig
from thinwire.learning import DatasetError, load_dataset

NAMES = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
MEAN = torch.tensor([0.4914, 0.4822, 0.4465])
STD = torch.tensor([0.2470, 0.2435, 0.2616])


def _batches(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return {
        name: (rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, 10, n).tolist())
        for name in NAMES
    }


def _write_python(folder, batches, protocol=2, numpy1_names=False):
    """Writes batches as the originals are: a dict with bytes keys, a uint8 array, a list."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in batches.items():
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}.png".encode() for i in range(len(labels))],
        }
        raw = pickle.dumps(batch, protocol=protocol)
        if numpy1_names:  # the originals were written by NumPy 1.x
            raw = raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        (folder / name).write_bytes(raw)


def _write_binary(folder, batches):
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in batches.items():
        records = np.concatenate([np.array(labels, np.uint8)[:, None], data], axis=1)
        (folder / f"{name}.bin").write_bytes(records.tobytes())


def _expected(batches, names):
    data = np.concatenate([batches[n][0] for n in names])
    x = torch.from_numpy(data).float().div(255).view(-1, 3, 32, 32)
    labels = torch.tensor([y for n in names for y in batches[n][1]])
    return (x - MEAN.view(1, 3, 1, 1)) / STD.view(1, 3, 1, 1), labels


def _load(root):
    return load_dataset(DataConfig(dataset="cifar10", root=root), seed=0)


def _check(data, batches):
    assert (data.name, data.input_shape, data.num_classes) == ("cifar10", (3, 32, 32), 10)
    x_train, y_train = _expected(batches, NAMES[:5])
    x_test, y_test = _expected(batches, NAMES[5:])
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_train.dtype == torch.float32
    assert torch.allclose(data.x_train, x_train) and torch.allclose(data.x_test, x_test)
    assert torch.equal(data.y_train, y_train) and torch.equal(data.y_test, y_test)
    assert data.y_train.dtype == torch.int64


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_reads_python_batches(tmp_path, protocol):
    batches = _batches()
    _write_python(tmp_path / "cifar-10-batches-py", batches, protocol=protocol)
    _check(_load(tmp_path), batches)


def test_reads_batches_written_by_numpy_1(tmp_path):
    batches = _batches()
    _write_python(tmp_path, batches, numpy1_names=True)
    assert b"numpy.core.multiarray" in (tmp_path / "test_batch").read_bytes()
    _check(_load(tmp_path), batches)


def test_reads_binary_batches(tmp_path):
    batches = _batches()
    _write_binary(tmp_path / "cifar-10-batches-bin", batches)
    _check(_load(tmp_path), batches)


def test_pixels_are_red_green_blue_planes_in_row_major_order(tmp_path):
    batches = _batches()
    data = batches["test_batch"][0]
    data[0] = 0
    data[0, 1024 + 5 * 32 + 7] = 255  # green, row 5, column 7
    _write_python(tmp_path, batches)
    x = _load(tmp_path).x_test[0]
    assert x[1, 5, 7] == pytest.approx((1 - 0.4822) / 0.2435)
    assert x[1, 7, 5] == pytest.approx(-0.4822 / 0.2435)


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_calls_os_system_is_refused_before_it_runs(tmp_path):
    batches = _batches()
    _write_python(tmp_path, batches)
    exploit = _Exploit()
    exploit.marker = tmp_path / "pwned"
    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": exploit}, protocol=2))
    with pytest.raises(
        DatasetError, match=r"data_batch_3: .*refusing the global (posix|os)\.system"
    ):
        _load(tmp_path)
    assert not exploit.marker.exists()


def test_a_pickle_of_other_builtins_is_refused(tmp_path):
    _write_python(tmp_path, _batches())
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": {1, 2}.__class__}))
    with pytest.raises(DatasetError, match="refusing the global builtins.set"):
        _load(tmp_path)


def test_missing_batches_name_files_and_folders(tmp_path):
    with pytest.raises(DatasetError) as error:
        _load(tmp_path)
    message = str(error.value)
    assert "data_batch_1" in message and "test_batch.bin" in message
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert str(tmp_path / "cifar-10-batches-bin") in message


def test_a_missing_batch_is_named(tmp_path):
    _write_python(tmp_path, _batches())
    (tmp_path / "data_batch_4").unlink()
    with pytest.raises(DatasetError, match=f"{tmp_path} lacks data_batch_4"):
        _load(tmp_path)


def test_a_truncated_pickle_is_reported(tmp_path):
    _write_python(tmp_path, _batches())
    path = tmp_path / "data_batch_2"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DatasetError, match="data_batch_2: not a CIFAR-10 python batch"):
        _load(tmp_path)


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ([1, 2, 3], "holds a list, not a dict"),
        ({b"labels": [1]}, "'data'"),
        ({b"data": np.zeros((1, 3072), np.float32), b"labels": [1]}, "not a 2-D uint8 array"),
        ({b"data": np.zeros((1, 100), np.uint8), b"labels": [1]}, "images have 100 values"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "2 images but 1 labels"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, "labels must lie in 0..9"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": ["cat"]}, "not a list of ints"),
    ],
)
def test_malformed_batches_are_reported(tmp_path, batch, problem):
    _write_python(tmp_path, _batches())
    (tmp_path / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError, match=problem):
        _load(tmp_path)


def test_a_binary_batch_of_partial_records_is_reported(tmp_path):
    _write_binary(tmp_path, _batches())
    path = tmp_path / "data_batch_5.bin"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DatasetError, match="data_batch_5.bin: .* not a whole number of 3073-byte"):
        _load(tmp_path)
