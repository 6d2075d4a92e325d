import pytest
import torch

from thinwire.config import DataConfig, SyntheticData
from thinwire.learning import load_dataset


def _load(seed=0, clients=10, **synthetic):
    return load_dataset(
        DataConfig(dataset="synthetic", clients=clients, synthetic=SyntheticData(**synthetic)),
        seed=seed,
    )


def test_shapes_and_natural_split():
    data = _load(dim=20, classes=5)
    assert data.input_shape == (20,) and data.num_classes == 5
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert data.x_train.shape[1] == 20
    assert data.y_train.min() >= 0 and data.y_train.max() < 5
    assert len(data.natural.train) == len(data.natural.test) == 10
    assert torch.equal(torch.cat(data.natural.train), torch.arange(len(data.y_train)))
    assert torch.equal(torch.cat(data.natural.test), torch.arange(len(data.y_test)))


@pytest.mark.slow
def test_client_sizes_are_lognormal_around_samples_per_client_with_a_floor():
    data = _load(clients=200, dim=5, samples_per_client=100)
    sizes = torch.tensor(
        [len(a) + len(b) for a, b in zip(data.natural.train, data.natural.test, strict=True)]
    )
    assert sizes.min() >= 10
    assert 80 <= sizes.float().median() <= 125
    assert sizes.max() > 2 * sizes.min()
    test_share = sum(len(t) for t in data.natural.test) / sizes.sum()
    assert abs(test_share - 0.2) < 0.01
    assert all(len(t) >= 1 for t in data.natural.train + data.natural.test)


def test_generation_is_deterministic_by_seed():
    first, again, other = _load(seed=3), _load(seed=3), _load(seed=4)
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.y_test, again.y_test)
    assert first.x_train.shape != other.x_train.shape or not torch.equal(
        first.x_train, other.x_train
    )


def test_clients_differ_in_inputs_and_labels():
    data = _load(clients=10, alpha=1.0, beta=1.0, samples_per_client=400)
    parts = data.natural.train
    means = torch.stack([data.x_train[p, 0].mean() for p in parts])
    # feature 0 has unit variance within a client, so a client mean of >= 40 examples varies
    # by about 0.15 from sampling alone; the clients' centres v_k spread by ~sqrt(2).
    assert means.std() > 0.5
    mixes = torch.stack([torch.bincount(data.y_train[p], minlength=10) / len(p) for p in parts])
    overall = torch.bincount(data.y_train, minlength=10) / len(data.y_train)
    assert 0.5 * (mixes - overall).abs().sum(1).mean() > 0.3


def test_larger_beta_spreads_the_clients_inputs_further():
    narrow = _load(clients=20, alpha=0.0, beta=0.0)
    wide = _load(clients=20, alpha=0.0, beta=5.0)

    def spread(data):
        means = torch.stack([data.x_train[p].mean(0) for p in data.natural.train])
        return means.std(0).mean()

    assert spread(wide) > 2 * spread(narrow)


def test_within_a_client_feature_j_has_variance_j_to_the_minus_1_2():
    data = _load(clients=1, dim=30, samples_per_client=20000)
    variance = data.x_train.var(0)
    expected = torch.arange(1, 31, dtype=torch.float32).pow(-1.2)
    assert torch.allclose(variance, expected, rtol=0.1)
