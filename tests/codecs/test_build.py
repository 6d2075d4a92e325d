"""From config to codec: every kind maps to its factory; names are guarded."""

import pytest
import torch

from thinwire.codecs import build, chain, top_k
from thinwire.config import (
    QSGD,
    CodecConfig,
    HardThreshold,
    ResidualFeedback,
    TopK,
    WaveletTransform,
    parse_config,
)
from thinwire.registry import FEEDBACKS, QUANTIZERS, SELECTORS, TRANSFORMS


def config(**sections) -> CodecConfig:
    return CodecConfig.model_validate(sections)


def test_build_chains_the_configured_stages():
    codec = build(
        config(
            transform={"kind": "wavelet", "wavelet": "haar", "level": 2},
            select={"kind": "topk", "density": 0.1},
            quantize={"kind": "fp16"},
            error_feedback=True,
        ),
        seed=0,
    )
    assert codec.name == "ef(wavelet(haar,2)+top_k(0.1)+fp16)"
    x = torch.randn(64)
    payload, state = codec.encode(x, codec.init(x))
    assert payload.count == 7 and payload.values.data.dtype == torch.float16
    assert state.residual.shape == (64,)


def test_build_from_an_experiment_yaml_section():
    experiment = parse_config(
        {
            "name": "t",
            "codec": {
                "select": {"kind": "random_k", "density": 0.5},
                "quantize": {"kind": "qsgd", "levels": 4},
                "error_feedback": {"kind": "dgc", "momentum": 0.5},
            },
        }
    )
    codec = build(experiment.codec, seed=1)
    assert codec.name == "dgc(random_k(0.5)+qsgd(4))"


def test_seeds_reach_random_stages_and_differ_between_them():
    cfg = config(select={"kind": "random_k", "density": 0.1}, quantize={"kind": "qsgd"})
    x = torch.randn(1000)
    a, b, c = build(cfg, seed=1), build(cfg, seed=1), build(cfg, seed=2)
    pa, pb, pc = (codec.encode(x, codec.init(x))[0] for codec in (a, b, c))
    assert pa.support == pb.support and pa.support != pc.support
    assert pa.support.seed != a.init(x).quantizer.seed  # selector and quantizer differ


@pytest.fixture
def restored():
    """Every codec registry as it was before the test."""
    saved = [(r, dict(r._entries)) for r in (TRANSFORMS, SELECTORS, QUANTIZERS, FEEDBACKS)]
    yield
    for registry, entries in saved:
        registry._entries = entries


def test_unknown_kind_lists_the_valid_ones(restored):
    cfg = config(select={"kind": "topk", "density": 0.1})
    del SELECTORS._entries["topk"]
    with pytest.raises(
        ValueError, match=r"unknown selector kind 'topk'; expected one of .*random_k"
    ):
        build(cfg, seed=0)


@pytest.mark.parametrize(
    ("registry", "kind", "section"),
    [
        (TRANSFORMS, "wavelet", WaveletTransform),
        (SELECTORS, "topk", TopK),
        (QUANTIZERS, "qsgd", QSGD),
        (FEEDBACKS, "residual", ResidualFeedback),
    ],
)
def test_re_registering_needs_force(restored, registry, kind, section):
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        registry.register(kind, section=section, factory=lambda c, s: None)
    registry.register(kind, section=section, factory=lambda c, s: None, force=True)
    assert registry.factory(kind)(None, 0) is None


def test_a_replaced_factory_builds(restored):
    SELECTORS.register(
        "topk", section=TopK, factory=lambda c, seed: top_k(c.density / 2), force=True
    )
    codec = build(config(select={"kind": "topk", "density": 0.2}), seed=0)
    assert codec.name == chain(top_k(0.1)).name


def test_kind_names_must_be_strings_the_section_admits():
    with pytest.raises(ValueError, match="non-empty string"):
        SELECTORS.register("", section=TopK, factory=lambda c, s: None)
    with pytest.raises(ValueError, match="does not admit 'top'"):
        SELECTORS.register("top", section=HardThreshold, factory=lambda c, s: None)


def test_the_json_schema_lists_every_registered_kind():
    schema = CodecConfig.model_json_schema()

    def tags(field: str) -> set[str]:
        names = set()
        for variant in schema["properties"][field]["oneOf"]:
            kind = variant["properties"]["kind"]
            names.update(kind.get("enum") or [kind["const"]])
        return names

    assert tags("transform") == set(TRANSFORMS.kinds())
    assert tags("select") == set(SELECTORS.kinds())
    assert tags("quantize") == set(QUANTIZERS.kinds())
    assert tags("error_feedback") == set(FEEDBACKS.kinds())


def test_every_declared_kind_has_a_factory():
    for registry in (TRANSFORMS, SELECTORS, QUANTIZERS, FEEDBACKS):
        for kind in registry.kinds():
            assert callable(registry.factory(kind)), (registry.family, kind)
