import pytest
import torch
from sklearn.datasets import load_digits

from thinwire.config import ConfigError, DataConfig, parse_config
from thinwire.learning import Dataset, DatasetError, load_dataset, load_federation
from thinwire.registry import DATASETS
from thinwire.runtimes.simulation import simulate


def test_every_declared_dataset_has_a_loader_and_a_layout():
    assert DATASETS.kinds() == ("cifar10", "digits", "fashion_mnist", "mnist", "synthetic")
    for name, entry in DATASETS.entries().items():
        assert callable(DATASETS.loader(name)) and entry.layout, name


def test_an_unknown_dataset_names_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet'; expected one of cifar10, "):
        parse_config({"name": "x", "data": {"dataset": "imagenet"}})


@pytest.fixture
def blobs():
    """A registered data set of its own: four Gaussian blobs in 2-D, generated from the seed."""

    def load(config: DataConfig, seed: int) -> Dataset:
        generator = torch.Generator().manual_seed(seed)
        y = torch.arange(400) % 4
        x = torch.randn(400, 2, generator=generator) * 0.3 + torch.stack([y % 2, y // 2], 1)
        return Dataset("blobs", x[:320], y[:320], x[320:], y[320:], 4, (2,))

    saved = dict(DATASETS._entries)
    DATASETS.register("blobs", reads_files=False, layout="Generated in memory.", loader=load)
    yield
    DATASETS._entries = saved


def test_a_registered_dataset_validates_and_trains_through_load_federation(blobs):
    experiment = parse_config(
        {
            "name": "blobs",
            "data": {"dataset": "blobs", "clients": 4},
            "model": {"kind": "logreg"},
            "train": {"rounds": 5, "local_steps": 10, "lr": 0.5, "device": "cpu"},
        }
    )
    assert experiment.model_dump(mode="json")["data"]["dataset"] == "blobs"
    federation = load_federation(experiment)
    assert federation.dataset.input_shape == (2,) and len(federation.partitions) == 4
    run = simulate(experiment)
    assert run.records[-1]["accuracy"] > 0.5
    only = "data.root applies only to mnist, fashion_mnist, cifar10"
    with pytest.raises(ConfigError, match=only):
        parse_config({"name": "x", "data": {"dataset": "blobs", "root": "."}})


def test_registering_a_taken_dataset_needs_force():
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        DATASETS.register("digits", reads_files=False, layout="", loader=lambda c, s: None)


def test_digits_are_8x8_images_in_the_unit_interval():
    data = load_dataset(DataConfig(dataset="digits"), seed=0)
    assert isinstance(data, Dataset)
    assert (data.name, data.input_shape, data.num_classes, data.natural) == (
        "digits",
        (1, 8, 8),
        10,
        None,
    )
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert data.x_train.shape[1:] == (1, 8, 8) and data.x_test.shape[1:] == (1, 8, 8)
    assert len(data.y_train) + len(data.y_test) == 1797
    assert data.x_train.min() == 0.0 and data.x_train.max() == 1.0


def test_digits_are_scikit_learns_digits_read_without_importing_it():
    import subprocess
    import sys

    script = (
        "import sys; from thinwire.config import DataConfig; "
        "from thinwire.learning import load_dataset; "
        "load_dataset(DataConfig(dataset='digits'), seed=0); print('sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    data = load_dataset(DataConfig(dataset="digits", test_fraction=0.25), seed=0)
    ours = torch.cat([data.x_train, data.x_test]).flatten(1)
    labels = torch.cat([data.y_train, data.y_test])
    bunch = load_digits()
    reference = torch.from_numpy(bunch.images).float().div(16.0).flatten(1)
    order = torch.cat([_rows(ours_row, reference) for ours_row in ours[:50]])
    assert torch.equal(ours[:50], reference[order])
    assert torch.equal(labels[:50], torch.from_numpy(bunch.target)[order])


def _rows(row: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Index of the first row of `table` equal to `row`."""
    return torch.nonzero((table == row).all(dim=1)).flatten()[:1]


def test_digits_split_is_stratified_by_test_fraction():
    data = load_dataset(DataConfig(dataset="digits", test_fraction=0.25), seed=0)
    total = torch.bincount(torch.cat([data.y_train, data.y_test]), minlength=10)
    test = torch.bincount(data.y_test, minlength=10)
    assert torch.all((test - 0.25 * total).abs() <= 0.5)


def test_digits_split_is_seeded():
    first = load_dataset(DataConfig(dataset="digits"), seed=1)
    again = load_dataset(DataConfig(dataset="digits"), seed=1)
    other = load_dataset(DataConfig(dataset="digits"), seed=2)
    assert torch.equal(first.x_test, again.x_test)
    assert not torch.equal(first.x_test, other.x_test)
    # train and test are disjoint: together they hold every image exactly once
    images = torch.from_numpy(load_digits().images).float().div(16.0).flatten(1)
    pooled = torch.cat([first.x_train, first.x_test]).flatten(1)
    expected_rows, expected_counts = torch.unique(images, dim=0, return_counts=True)
    rows, counts = torch.unique(pooled, dim=0, return_counts=True)
    assert torch.equal(rows, expected_rows) and torch.equal(counts, expected_counts)


def test_to_moves_every_tensor():
    data = load_dataset(DataConfig(dataset="synthetic", clients=3), seed=0).to("meta")
    assert data.x_train.is_meta and data.y_test.is_meta
    assert all(t.is_meta for t in data.natural.train + data.natural.test)


def test_synthetic_data_cannot_be_repartitioned():
    with pytest.raises(ConfigError, match="'synthetic' is generated per client"):
        parse_config(
            {"name": "x", "data": {"dataset": "synthetic", "partition": {"kind": "shards"}}}
        )


@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist", "cifar10"])
def test_a_root_that_is_not_a_folder_is_named(tmp_path, dataset):
    with pytest.raises(DatasetError, match=r"data.root .*nowhere is not a folder"):
        load_dataset(DataConfig(dataset=dataset, root=tmp_path / "nowhere"), seed=0)
