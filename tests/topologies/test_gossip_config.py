"""The `gossip` section of the experiment schema and the checks that tie it to the run."""

from __future__ import annotations

import pytest

from thinwire.config import (
    JWINS_ALPHAS,
    ChocoGossip,
    CodecConfig,
    ConfigError,
    ExactGossip,
    JwinsGossip,
    ScaledSign,
    SparqGossip,
    StepThreshold,
    TopK,
    parse_config,
)


def parse(**sections):
    return parse_config({"name": "t", **sections}, "exp.yaml")


def problems(**sections) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**sections)
    return str(info.value)


RING = {"kind": "ring"}


def test_a_decentralized_run_defaults_to_exact_averaging():
    config = parse(topology=RING)
    assert config.decentralized
    assert config.gossip == ExactGossip()


def test_each_method_parses_with_its_own_fields():
    choco = parse(topology=RING, gossip={"kind": "choco", "gamma": 0.4})
    assert choco.gossip == ChocoGossip(gamma=0.4, estimates="initial")
    sparq = parse(
        topology=RING,
        gossip={
            "kind": "sparq",
            "gamma": 0.3,
            "sync_every": 5,
            "threshold": {"kind": "step", "c": 2, "increment": 1, "every": 10},
        },
    )
    assert isinstance(sparq.gossip, SparqGossip)
    assert sparq.gossip.threshold == StepThreshold(c=2.0, increment=1.0, every=10)
    jwins = parse(topology=RING, gossip={"kind": "jwins"})
    assert jwins.gossip == JwinsGossip()
    assert jwins.gossip.alphas == list(JWINS_ALPHAS)
    assert (jwins.gossip.wavelet, jwins.gossip.level, jwins.gossip.metadata_cap) == (
        "sym2",
        4,
        0.5,
    )


def test_sparq_compresses_with_sign_of_top_one_percent_unless_a_codec_is_given():
    sparq = {"kind": "sparq", "gamma": 0.3, "threshold": {"kind": "constant", "c": 1}}
    default = parse(topology=RING, gossip=sparq).codec
    assert default.select == TopK(density=0.01)
    assert default.quantize == ScaledSign()
    chosen = parse(topology=RING, gossip=sparq, codec={"select": {"kind": "topk", "density": 0.1}})
    assert chosen.codec == CodecConfig(select=TopK(density=0.1))


def test_the_gossip_runtime_makes_even_a_star_graph_decentralized():
    runtime = {"kind": "gossip", "run_id": "r", "pattern": "p-{i}:1", "insecure": True}
    assert parse(runtime=runtime).decentralized
    assert not parse().decentralized


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"gossip": {"kind": "jwins"}}, "gossip applies to decentralized runs"),
        ({"topology": RING, "gossip": {"kind": "choco"}}, "gossip.gamma: required field"),
        ({"topology": RING, "gossip": {"kind": "choco", "gamma": 0}}, "gossip.gamma"),
        ({"topology": RING, "gossip": {"kind": "choco", "gamma": 1.5}}, "gossip.gamma"),
        ({"topology": RING, "gossip": {"kind": "sparq", "gamma": 0.5}}, "gossip.threshold"),
        (
            {"topology": RING, "gossip": {"kind": "jwins", "alphas": []}},
            "gossip.alphas",
        ),
        (
            {"topology": RING, "gossip": {"kind": "jwins", "alphas": [0.2, 1.5]}},
            "gossip.alphas[1]: must be in (0, 1]",
        ),
        ({"topology": RING, "gossip": {"kind": "gradient_tracking"}}, "unknown gossip method kind"),
        (
            {"topology": RING, "codec": {"select": {"kind": "topk", "density": 0.1}}},
            "gossip.kind dpsgd sends full models; remove the codec section",
        ),
        (
            {
                "topology": RING,
                "gossip": {"kind": "jwins"},
                "codec": {"quantize": {"kind": "fp16"}},
            },
            "gossip.kind jwins sends its own wavelet coefficients",
        ),
        (
            {
                "topology": RING,
                "gossip": {"kind": "choco", "gamma": 0.5},
                "codec": {"select": {"kind": "topk", "density": 0.1}, "error_feedback": True},
            },
            "set codec.error_feedback: none",
        ),
        (
            {"topology": {"kind": "matching"}, "gossip": {"kind": "choco", "gamma": 0.5}},
            "gossip.kind choco needs a fixed graph",
        ),
        (
            {"topology": RING, "downlink": {"quantize": {"kind": "fp16"}}},
            "downlink compresses the star's server broadcast",
        ),
        (
            {"topology": RING, "train": {"participation": 0.5}},
            "train.participation samples the star's clients",
        ),
    ],
)
def test_settings_that_do_not_fit_gossip_are_refused_with_the_reason(sections, message):
    assert message in problems(**sections)


def test_jwins_and_dpsgd_run_on_graphs_redrawn_every_round():
    for gossip in ({"kind": "dpsgd"}, {"kind": "jwins"}):
        config = parse(topology={"kind": "matching"}, gossip=gossip)
        assert config.decentralized
