"""Server-side aggregation rules: FedAvg in float64, trimmed mean, median, clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.config import AggregationConfig, ConfigError, parse_config
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.server.rules import build_rule, clipped, median, trimmed_mean, weighted_mean
from thinwire.wire import Kind, Payload, RawValues, SparseSupport, Update, client_id, encode


def contributions(values: list[list[float]], weights: list[float] | None = None):
    weights = weights or [1.0] * len(values)
    return [({"w": torch.tensor(v)}, w) for v, w in zip(values, weights, strict=True)]


def test_weighted_mean_sums_in_float64_so_extreme_finite_updates_do_not_overflow() -> None:
    # 3e38 * 2**40 is far outside float32; the old float32 sum gave inf.
    out = weighted_mean()(contributions([[3e38, 1.0], [3e38, 3.0]], [2.0**40, 2.0**40]))
    assert out["w"].dtype == torch.float32
    torch.testing.assert_close(out["w"], torch.tensor([3e38, 2.0]))


def test_weighted_mean_weighs_by_examples() -> None:
    out = weighted_mean()(contributions([[1.0], [4.0]], [30.0, 10.0]))
    torch.testing.assert_close(out["w"], torch.tensor([(30 * 1.0 + 10 * 4.0) / 40]))


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_median_matches_numpy_per_coordinate(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    values = torch.randn(n, 1000, generator=g)
    out = median()(contributions(values.tolist()))
    expected = np.median(values.double().numpy(), axis=0)
    torch.testing.assert_close(out["w"], torch.from_numpy(expected).float())


def test_trimmed_mean_drops_beta_of_each_end_per_coordinate() -> None:
    # 10 updates, beta 0.2: the 2 largest and 2 smallest of each coordinate go.
    values = [[float(i), float(-i)] for i in range(10)]
    values[0][0] = 1e30  # an outlier in coordinate 0
    out = trimmed_mean(0.2)(contributions(values))
    kept_0 = sorted(v[0] for v in values)[2:8]
    kept_1 = sorted(v[1] for v in values)[2:8]
    torch.testing.assert_close(out["w"], torch.tensor([np.mean(kept_0), np.mean(kept_1)]).float())


def test_trimmed_mean_with_beta_zero_is_the_plain_mean() -> None:
    values = [[1.0, 2.0], [3.0, 10.0], [5.0, 0.0]]
    out = trimmed_mean(0.0)(contributions(values))
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 4.0]))


def test_clipping_bounds_each_updates_norm_before_the_rule() -> None:
    rule = clipped(weighted_mean(), 1.0)
    out = rule(contributions([[3.0, 4.0], [0.3, 0.4]]))  # norms 5 (clipped to 1) and 0.5
    torch.testing.assert_close(out["w"], torch.tensor([(0.6 + 0.3) / 2, (0.8 + 0.4) / 2]))


def test_build_rule_follows_the_section() -> None:
    values = contributions([[0.0], [1.0], [100.0]])
    assert float(build_rule(AggregationConfig())(values)["w"]) == pytest.approx(101 / 3)
    median_rule = AggregationConfig.model_validate({"rule": {"kind": "median"}})
    assert float(build_rule(median_rule)(values)["w"]) == 1.0
    clipped_median = AggregationConfig.model_validate(
        {"rule": {"kind": "median"}, "clip_norm": 0.5}
    )
    assert float(build_rule(clipped_median)(values)["w"]) == 0.5


def test_a_coordinate_a_sparse_update_does_not_carry_counts_as_zero() -> None:
    # Three top-k style updates of a 4-vector: coordinate 3 is sent by one client only, so
    # the median says "most clients do not move it"; the mean moves it by a third.
    experiment = tiny_experiment(
        codec={"select": {"kind": "topk", "density": 0.5}, "scope": "model"},
        aggregation={"rule": {"kind": "median"}},
    )
    workspace = load_federation(experiment).workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    n = sum(s.numel for s in workspace.spec)
    before = torch.cat([v.reshape(-1) for v in aggregator.model.values()])
    aggregator.broadcast(1, [0, 1, 2])
    sent = {0: ([0, 1], [0.1, 0.2]), 1: ([0, 2], [0.3, 0.2]), 2: ([0, 3], [0.2, 0.9])}
    for client, (indices, values) in sent.items():
        k = n // 2
        index = torch.tensor(indices + list(range(10, 10 + k - 2)))
        value = torch.tensor(values + [0.0] * (k - 2))
        payload = Payload((n,), SparseSupport(index), RawValues(value))
        update = Update(
            client_id(client), 1, Kind.MODEL_DELTA, {"model": payload}, {"num_examples": 5.0}
        )
        assert aggregator.receive(client, encode(update)).accepted
    aggregator.finish_round()
    step = torch.cat([v.reshape(-1) for v in aggregator.model.values()]) - before
    torch.testing.assert_close(step[:4], torch.tensor([0.2, 0.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"topology": {"kind": "ring"}, "aggregation": {"rule": {"kind": "median"}}},
            "aggregation.rule 'median' combines the star's client updates",
        ),
        (
            {"topology": {"kind": "ring"}, "aggregation": {"clip_norm": 1.0}},
            "aggregation.clip_norm clips the star's client updates",
        ),
        (
            {
                "policy": {"kind": "random_access"},
                "channel": {"slots": 4},
                "aggregation": {"rule": {"kind": "trimmed_mean"}},
            },
            "random-access uplink sums what got through",
        ),
        ({"aggregation": {"rule": {"kind": "trimmed_mean", "beta": 0.5}}}, "beta"),
        ({"aggregation": {"max_norm_ratio": 0}}, "max_norm_ratio"),
    ],
)
def test_the_section_refuses_what_the_experiment_cannot_honour(sections, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"name": "x", **sections})


def test_sign_vote_takes_the_majority_sign_one_client_one_vote() -> None:
    from thinwire.server.rules import sign_vote

    out = sign_vote()(
        contributions(
            [
                [1.0, -2.0, 0.0, -1.0, 3.0],
                [-1.0, -2.0, 0.0, 1.0, -1.0],
                [5.0, 3.0, 0.0, -1.0, -1.0],
            ],
            [1000.0, 1.0, 1.0],  # example counts do not buy votes, magnitudes neither
        )
    )
    assert out["w"].dtype == torch.float32
    assert out["w"].tolist() == [1.0, -1.0, 1.0, -1.0, -1.0]


def test_sign_vote_breaks_ties_toward_plus_one_so_the_vote_is_always_one_bit() -> None:
    from thinwire.server.rules import sign_vote

    out = sign_vote()(contributions([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0]]))
    assert out["w"].tolist() == [1.0, 1.0, 1.0]


def test_signsgd_with_majority_vote_moves_every_coordinate_by_the_step_and_sends_signs() -> None:
    # The protocol end to end in the simulator: sign uplink, vote, sign downlink. Each
    # round every coordinate of the global model moves by exactly +-lr, and each message
    # in either direction costs one bit per coordinate plus a fixed overhead.
    from thinwire.simulate import simulate

    sections = {
        "codec": {"quantize": {"kind": "sign"}},
        "downlink": {"quantize": {"kind": "sign"}},
        "aggregation": {"rule": {"kind": "sign_vote"}},
    }
    step = 0.01
    one = simulate(tiny_experiment(train={"rounds": 1, "server": {"lr": step}}, **sections))
    two = simulate(tiny_experiment(train={"rounds": 2, "server": {"lr": step}}, **sections))
    moved = torch.cat([(two.model[k] - one.model[k]).reshape(-1) for k in one.model])
    torch.testing.assert_close(moved.abs(), torch.full_like(moved, step), rtol=0, atol=1e-6)
    n = moved.numel()
    record = two.records[-1]
    per_update = record["bytes_up"] / record["updates_sent"]
    assert n / 8 <= per_update <= n / 8 + 200
    assert n / 8 * 4 <= record["bytes_down"] <= (n / 8 + 200) * 4  # four clients


def test_every_declared_rule_has_a_factory() -> None:
    from thinwire.registry import AGGREGATION_RULES

    assert set(AGGREGATION_RULES.kinds()) == {"mean", "trimmed_mean", "median", "sign_vote"}
    for kind in AGGREGATION_RULES.kinds():
        assert callable(AGGREGATION_RULES.factory(kind)), kind


def test_a_registered_rule_validates_and_builds() -> None:
    from typing import Literal

    from thinwire.config import Section, parse_config
    from thinwire.registry import AGGREGATION_RULES

    class FirstRule(Section):
        kind: Literal["first"] = "first"

    saved = dict(AGGREGATION_RULES._entries)
    AGGREGATION_RULES.register(
        "first",
        section=FirstRule,
        factory=lambda section: lambda contributions: contributions[0][0],
    )
    try:
        experiment = parse_config({"name": "t", "aggregation": {"rule": {"kind": "first"}}})
        values = [({"w": torch.tensor([3.0])}, 1.0), ({"w": torch.tensor([5.0])}, 1.0)]
        assert float(build_rule(experiment.aggregation)(values)["w"]) == 3.0
    finally:
        AGGREGATION_RULES._entries = saved
