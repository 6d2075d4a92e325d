"""The `privacy` section: one noise setting, delta in (0, 1), and the sections it must fit."""

import pytest

from thinwire.config import ConfigError, PrivacyConfig, parse_config


def test_privacy_is_off_by_default_and_parses_with_defaults():
    assert parse_config({"name": "t"}).privacy is None
    privacy = parse_config({"name": "t", "privacy": {"target_epsilon": 3.0}}).privacy
    assert privacy == PrivacyConfig(target_epsilon=3.0, delta=1e-5, max_grad_norm=1.0)
    sparse = parse_config(
        {"name": "t", "privacy": {"noise_multiplier": 1.1, "sparsity": {"final_rate": 0.9}}}
    ).privacy
    assert sparse.sparsity.final_rate == 0.9 and sparse.sparsity.schedule == "linear"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"privacy": {"delta": 1e-5}}, "set exactly one of privacy.target_epsilon"),
        (
            {"privacy": {"target_epsilon": 3.0, "noise_multiplier": 1.0}},
            "set exactly one of privacy.target_epsilon",
        ),
        ({"privacy": {"target_epsilon": 3.0, "delta": 1.0}}, "privacy.delta: must be in (0, 1)"),
        ({"privacy": {"target_epsilon": -1.0}}, "privacy.target_epsilon: must be > 0"),
        (
            {"privacy": {"noise_multiplier": 1.0, "sparsity": {"final_rate": 1.0}}},
            "privacy.sparsity.final_rate",
        ),
        (
            {"privacy": {"noise_multiplier": 1.0}, "topology": {"kind": "ring"}},
            "privacy trains the star's clients",
        ),
        (
            {
                "privacy": {"noise_multiplier": 1.0},
                "policy": {
                    "kind": "censor",
                    "threshold": {"kind": "constant", "tau": 1.0},
                    "batch": {"kind": "linear"},
                },
            },
            "fixed batch size",
        ),
        (
            {"codec": {"scope": "model", "select": {"kind": "shared_mask"}}},
            "set privacy.sparsity",
        ),
        (
            {
                "codec": {"select": {"kind": "shared_mask"}},
                "privacy": {"noise_multiplier": 1.0, "sparsity": {"final_rate": 0.5}},
            },
            "needs codec.scope: model",
        ),
    ],
)
def test_bad_privacy_settings_name_the_field(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_config({"name": "t", **raw})
    assert message in str(info.value)
