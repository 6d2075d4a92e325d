"""From config to codec: every kind maps to its factory; names are guarded."""

import pytest
import torch

from thinwire.codecs import (
    build,
    chain,
    kinds,
    register_feedback,
    register_quantizer,
    register_selector,
    register_transform,
    top_k,
)
from thinwire.codecs import registry as registry_module
from thinwire.config import CodecConfig, parse_config


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


def test_unknown_kind_lists_the_valid_ones(monkeypatch):
    cfg = config(select={"kind": "topk", "density": 0.1})
    monkeypatch.delitem(registry_module._SELECTORS, "topk")
    with pytest.raises(
        ValueError, match=r"unknown selector kind 'topk'; registered kinds: .*random_k"
    ):
        build(cfg, seed=0)


@pytest.mark.parametrize(
    ("register", "role", "kind"),
    [
        (register_transform, "transform", "wavelet"),
        (register_selector, "selector", "topk"),
        (register_quantizer, "quantizer", "qsgd"),
        (register_feedback, "feedback", "residual"),
    ],
)
def test_re_registering_needs_force(monkeypatch, register, role, kind):
    registry = registry_module._REGISTRIES[role]
    monkeypatch.setitem(registry, kind, registry[kind])  # restored after the test
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        register(kind, lambda c, s: None)
    register(kind, lambda c, s: None, force=True)
    assert registry[kind](None, 0) is None


def test_registering_a_new_kind_makes_it_buildable(monkeypatch):
    monkeypatch.setitem(registry_module._SELECTORS, "topk", registry_module._SELECTORS["topk"])
    register_selector("topk", lambda c, seed: top_k(c.density / 2), force=True)
    codec = build(config(select={"kind": "topk", "density": 0.2}), seed=0)
    assert codec.name == chain(top_k(0.1)).name


def test_kind_names_must_be_strings():
    with pytest.raises(ValueError, match="non-empty string"):
        register_selector("", lambda c, s: None)


def test_every_config_kind_is_registered():
    # The config schema's tagged unions and the registries must name the same kinds.
    schema = CodecConfig.model_json_schema()

    def tags(field: str) -> set[str]:
        variants = schema["properties"][field].get("oneOf") or schema["properties"][field].get(
            "anyOf"
        )
        names = set()
        for variant in variants:
            model = schema["$defs"][variant["$ref"].split("/")[-1]]
            kind = model["properties"]["kind"]
            names.update(kind.get("enum") or [kind["const"]])
        return names

    registered = kinds()
    assert tags("transform") == set(registered["transform"])
    assert tags("select") == set(registered["selector"])
    assert tags("quantize") == set(registered["quantizer"])
    assert tags("error_feedback") == set(registered["feedback"])
