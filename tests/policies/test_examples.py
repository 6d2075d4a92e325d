"""The examples of each feature load as written, and the benchmark's variants of them too."""

from pathlib import Path

import pytest

from thinwire.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("name", "overrides", "check"),
    [
        ("censor.yaml", [], lambda e: e.policy.kind == "censor"),
        ("censor_convex.yaml", [], lambda e: e.policy.batch.kind == "geometric"),
        ("random_access.yaml", [], lambda e: e.policy.rule.kind == "aog"),
        (
            "random_access.yaml",
            ["policy.rule={kind: round_robin}"],
            lambda e: e.channel.slots == 5,
        ),
        ("dp_sparse.yaml", [], lambda e: e.codec.select.kind == "shared_mask"),
        (
            "dp_sparse.yaml",
            ["privacy.sparsity=null", "codec.select={kind: none}"],
            lambda e: e.privacy.sparsity is None,
        ),
    ],
)
def test_example_loads(name, overrides, check):
    assert check(load_config(EXAMPLES / name, overrides))
