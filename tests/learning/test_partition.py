from typing import Literal

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from thinwire.config import (
    DataConfig,
    DirichletPartition,
    IIDPartition,
    Section,
    ShardsPartition,
    SyntheticData,
    parse_config,
)
from thinwire.learning import client_indices, load_dataset, partition
from thinwire.registry import PARTITIONS

# 10 classes x 1000 examples, in label order.
LABELS = torch.arange(10).repeat_interleave(1000)


def _tv_to_global(labels, parts):
    """Mean total-variation distance between each client's label mix and the global one."""
    classes = int(labels.max()) + 1
    overall = torch.bincount(labels, minlength=classes).float() / len(labels)
    distances = []
    for part in parts:
        mix = torch.bincount(labels[part], minlength=classes).float() / len(part)
        distances.append(0.5 * (mix - overall).abs().sum().item())
    return sum(distances) / len(distances)


def _assert_disjoint(parts, n):
    joined = torch.cat(parts)
    assert len(torch.unique(joined)) == len(joined)
    assert joined.min() >= 0 and joined.max() < n
    for part in parts:
        assert part.dtype == torch.int64
        assert torch.equal(part, part.sort().values)


def test_iid_deals_near_equal_parts_with_the_global_label_mix():
    parts = partition(LABELS, 7, IIDPartition(), seed=0)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == len(LABELS) and max(sizes) - min(sizes) <= 1
    _assert_disjoint(parts, len(LABELS))
    assert _tv_to_global(LABELS, parts) < 0.08


def test_dirichlet_skew_grows_as_alpha_shrinks():
    skewed = partition(LABELS, 10, DirichletPartition(alpha=0.1), seed=0)
    mild = partition(LABELS, 10, DirichletPartition(alpha=1.0), seed=0)
    flat = partition(LABELS, 10, DirichletPartition(alpha=100.0), seed=0)
    tv = [_tv_to_global(LABELS, p) for p in (skewed, mild, flat)]
    assert tv[0] > 0.5
    assert tv[0] > tv[1] > tv[2]
    assert tv[2] < 0.08
    for parts in (skewed, mild, flat):
        assert sum(len(p) for p in parts) == len(LABELS)
        _assert_disjoint(parts, len(LABELS))


def test_dirichlet_gives_every_client_min_examples():
    labels = torch.arange(10).repeat_interleave(20)
    parts = partition(labels, 20, DirichletPartition(alpha=0.3, min_examples=5), seed=1)
    assert min(len(p) for p in parts) >= 5


def test_dirichlet_that_cannot_meet_min_examples_says_what_to_change():
    labels = torch.arange(2).repeat_interleave(10)
    config = DirichletPartition(alpha=0.01, min_examples=2)
    with pytest.raises(ValueError, match="raise alpha, lower min_examples or use fewer clients"):
        partition(labels, 10, config, seed=0)


def test_shards_give_each_client_at_most_shards_labels():
    labels = load_dataset(DataConfig(dataset="digits"), seed=0).y_train  # uneven classes
    for clients, shards in [(10, 2), (7, 3), (30, 1)]:
        parts = partition(labels, clients, ShardsPartition(shards=shards), seed=0)
        assert len(parts) == clients
        assert all(1 <= len(torch.unique(labels[p])) <= shards for p in parts)
        _assert_disjoint(parts, len(labels))
        assert sum(len(p) for p in parts) == len(labels)
        sizes = [len(p) for p in parts]
        assert max(sizes) <= 1.5 * min(sizes)


def test_fewer_shards_than_classes_leaves_classes_unused():
    parts = partition(LABELS, 2, ShardsPartition(shards=2), seed=0)
    used = torch.unique(LABELS[torch.cat(parts)])
    assert len(used) == 4
    assert all(len(p) == 2000 for p in parts)


@pytest.mark.parametrize(
    "config",
    [IIDPartition(), DirichletPartition(alpha=0.5), ShardsPartition(shards=2)],
    ids=lambda c: c.kind,
)
def test_partitions_are_deterministic_by_seed(config):
    first = partition(LABELS, 10, config, seed=5)
    again = partition(LABELS, 10, config, seed=5)
    other = partition(LABELS, 10, config, seed=6)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (IIDPartition(), "iid partition: 5 examples cannot give each of 6 clients one"),
        (DirichletPartition(min_examples=1), "cannot give each of 6 clients min_examples=1"),
        (ShardsPartition(shards=1), "5 examples cannot fill 6 clients x 1 shards"),
    ],
    ids=["iid", "dirichlet", "shards"],
)
def test_too_few_examples_for_the_clients_is_an_error(config, message):
    with pytest.raises(ValueError, match=message):
        partition(torch.arange(5), 6, config, seed=0)


def test_labels_must_be_integers():
    with pytest.raises(ValueError, match="1-D integer tensor"):
        partition(torch.zeros(10), 2, IIDPartition(), seed=0)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(20, 300),
    classes=st.integers(1, 12),
    clients=st.integers(1, 10),
    kind=st.sampled_from(["iid", "dirichlet", "shards"]),
    seed=st.integers(0, 2**63 - 1),
)
def test_every_partition_is_disjoint_and_in_range(n, classes, clients, kind, seed):
    labels = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed % 997))
    config = {
        "iid": IIDPartition(),
        "dirichlet": DirichletPartition(alpha=1.0, min_examples=1),
        "shards": ShardsPartition(shards=2),
    }[kind]
    parts = partition(labels, clients, config, seed=seed)
    assert len(parts) == clients
    _assert_disjoint(parts, n)
    if kind != "shards":
        assert sum(len(p) for p in parts) == n
    assert all(len(p) >= 1 for p in parts)


def test_client_indices_partitions_a_pooled_dataset():
    config = DataConfig(dataset="digits", clients=5, partition=ShardsPartition(shards=2))
    data = load_dataset(config, seed=0)
    parts = client_indices(data, config, seed=0)
    expected = partition(data.y_train, 5, ShardsPartition(shards=2), seed=0)
    assert all(torch.equal(a, b) for a, b in zip(parts, expected, strict=True))


def test_client_indices_keeps_synthetic_data_s_own_split():
    config = DataConfig(dataset="synthetic", clients=4, synthetic=SyntheticData(dim=5))
    data = load_dataset(config, seed=0)
    parts = client_indices(data, config, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(parts, data.natural.train, strict=True))
    with pytest.raises(ValueError, match="generated for 4 clients but data.clients is 3"):
        client_indices(data, DataConfig(dataset="synthetic", clients=3), seed=0)


class DealPartition(Section):
    """Example i to client i mod clients, the first `skip` examples left out (a test kind)."""

    kind: Literal["deal"] = "deal"
    skip: int = 0


def _deal(config: DealPartition, y: np.ndarray, clients: int, rng: np.random.Generator):
    index = np.arange(config.skip, len(y))
    return [index[index % clients == c] for c in range(clients)]


@pytest.fixture
def deal():
    """`deal` registered as a partition for the test, removed after it."""
    saved = dict(PARTITIONS._entries)
    PARTITIONS.register("deal", section=DealPartition, factory=_deal)
    yield
    PARTITIONS._entries = saved


def test_a_registered_partition_validates_from_yaml_and_splits(deal):
    experiment = parse_config(
        {"name": "t", "data": {"clients": 3, "partition": {"kind": "deal", "skip": 2}}}
    )
    assert experiment.data.partition == DealPartition(skip=2)
    dataset = load_dataset(experiment.data, seed=0)
    parts = client_indices(dataset, experiment.data, seed=0)
    assert [p.dtype for p in parts] == [torch.int64] * 3
    assert parts[0][:2].tolist() == [3, 6] and parts[2][:2].tolist() == [2, 5]
    assert sum(len(p) for p in parts) == len(dataset.y_train) - 2


def test_an_unknown_partition_kind_names_the_registered_ones():
    with pytest.raises(ValueError, match="unknown partition kind 'nope'; expected one of dir"):
        parse_config({"name": "t", "data": {"partition": {"kind": "nope"}}})


def test_every_declared_partition_kind_has_a_factory():
    assert PARTITIONS.kinds() == ("dirichlet", "iid", "shards")
    for kind in PARTITIONS.kinds():
        assert callable(PARTITIONS.factory(kind)), kind
