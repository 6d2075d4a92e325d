"""One registry per extensible family: a registered kind validates, dumps, documents, builds."""

from typing import Literal

import pytest
from pydantic import ValidationError

from thinwire.codecs import build, top_k
from thinwire.config import CodecConfig, Density, Experiment, Section, TopK, parse_config
from thinwire.reference import find, reference_markdown
from thinwire.registry import SELECTORS, Registry, registries


class MyTopK(Section):
    """Top-k at half the density (a test kind)."""

    kind: Literal["my_topk"] = "my_topk"
    density: Density
    """Fraction of coordinates sent, halved."""


@pytest.fixture
def my_topk():
    """`my_topk` registered as a selector for the test, removed after it."""
    saved = dict(SELECTORS._entries)
    SELECTORS.register("my_topk", section=MyTopK, factory=lambda c, seed: top_k(c.density / 2))
    yield
    SELECTORS._entries = saved


def test_a_registered_kind_validates_and_builds(my_topk):
    # The first failing case: registered, yet `union_tag_invalid`.
    config = CodecConfig.model_validate({"select": {"kind": "my_topk", "density": 0.2}})
    assert isinstance(config.select, MyTopK)
    assert build(config, seed=0).name == "top_k(0.1)+fp32"


def test_a_kind_registered_after_import_validates_in_an_experiment(my_topk):
    experiment = parse_config({"name": "t", "codec": {"select": {"kind": "my_topk", "density": 1}}})
    assert experiment.codec.select == MyTopK(density=1.0)


def test_an_unregistered_kind_names_the_registered_ones(my_topk):
    with pytest.raises(ValidationError) as info:
        CodecConfig.model_validate({"select": {"kind": "nope"}})
    [error] = info.value.errors()
    assert error["loc"] == ("select",)
    assert error["msg"].startswith("unknown selector kind 'nope'; expected one of adaptive, ")
    assert "my_topk" in error["msg"]


def test_an_error_inside_a_kind_keeps_its_location(my_topk):
    with pytest.raises(ValidationError) as info:
        Experiment.model_validate({"name": "t", "codec": {"select": {"kind": "my_topk"}}})
    [error] = info.value.errors()
    assert error["loc"] == ("codec", "select", "density") and error["type"] == "missing"
    problems = []
    try:
        parse_config({"name": "t", "codec": {"select": {"kind": "my_topk", "density": 2}}})
    except ValueError as exc:
        problems = str(exc).splitlines()
    assert problems == ["<config>: codec.select.density: must be in (0, 1], got 2"]


def test_missing_kind_and_not_a_mapping():
    for value, expected in (({"density": 0.1}, "missing 'kind'"), (3, "expected a selector")):
        with pytest.raises(ValidationError, match=expected):
            CodecConfig.model_validate({"select": value})


def test_the_default_applies_when_the_key_is_absent():
    assert CodecConfig.model_validate({}).select.kind == "none"


def test_a_section_built_in_code_passes_and_a_foreign_one_does_not(my_topk):
    assert CodecConfig(select=MyTopK(density=0.5)).select.kind == "my_topk"
    with pytest.raises(ValidationError, match="not a registered selector section"):
        CodecConfig(select=CodecConfig())


def test_dump_and_round_trip(my_topk):
    config = CodecConfig.model_validate({"select": {"kind": "my_topk", "density": 0.5}})
    dumped = config.model_dump(mode="json")
    assert dumped["select"] == {"kind": "my_topk", "density": 0.5}
    assert CodecConfig.model_validate(dumped) == config
    assert CodecConfig.model_validate_json(config.model_dump_json()) == config


def test_re_registering_needs_force(my_topk):
    with pytest.raises(ValueError, match="'my_topk' is already registered; pass force=True"):
        SELECTORS.register("my_topk", section=MyTopK, factory=lambda c, seed: None)
    SELECTORS.register("my_topk", section=MyTopK, factory=lambda c, seed: None, force=True)
    assert SELECTORS.factory("my_topk")(MyTopK(density=0.5), 0) is None


def test_a_builtin_kind_is_replaced_only_with_force():
    class OtherTopK(Section):
        kind: Literal["topk"] = "topk"
        density: Density

    saved = dict(SELECTORS._entries)
    try:
        with pytest.raises(ValueError, match="'topk' is already registered"):
            SELECTORS.register("topk", section=OtherTopK, factory=lambda c, seed: None)
        SELECTORS.register("topk", section=OtherTopK, factory=lambda c, seed: None, force=True)
        select = CodecConfig.model_validate({"select": {"kind": "topk", "density": 0.1}}).select
        assert isinstance(select, OtherTopK)
    finally:
        SELECTORS._entries = saved


def test_a_section_must_be_a_section_with_a_kind_literal():
    class NoKind(Section):
        density: float = 0.1

    with pytest.raises(TypeError, match="needs a field `kind: Literal"):
        SELECTORS.register("no_kind", section=NoKind, factory=lambda c, seed: None)
    with pytest.raises(TypeError, match="Section subclass"):
        SELECTORS.register("d", section=dict, factory=lambda c, seed: None)  # type: ignore[arg-type]


def test_an_unknown_factory_lookup_raises_value_error():
    with pytest.raises(ValueError, match="unknown selector kind 'nope'; expected one of"):
        SELECTORS.factory("nope")


def test_a_declared_kind_without_a_factory_says_so():
    family: Registry = Registry("example")
    try:

        @family.declare
        class Example(Section):
            kind: Literal["example"] = "example"

        assert family.kinds() == ("example",)
        with pytest.raises(ValueError, match="validates but has no factory"):
            family.factory("example")
        family.register("example", section=Example, factory=lambda section: "built")
        assert family.factory("example")(Example()) == "built"
    finally:
        from thinwire import registry

        registry._ALL.remove(family)


def test_the_schema_lists_a_registered_kind(my_topk):
    schema = CodecConfig.model_json_schema()
    kinds = [v["properties"]["kind"]["const"] for v in schema["properties"]["select"]["oneOf"]]
    assert "my_topk" in kinds and "topk" in kinds
    [section] = [s for s in find("codec.select") if s.kind == "my_topk"]
    assert [e.path for e in section.entries] == ["codec.select.kind", "codec.select.density"]
    assert "## `codec.select`, kind `my_topk`" in reference_markdown()


def test_every_family_is_listed():
    assert {"transform", "selector", "quantizer", "feedback"} <= set(registries())
    assert registries()["selector"] is SELECTORS


def test_builtin_sections_validate_without_their_builders():
    # thinwire.config declares every built-in section: validating imports no codec module.
    import subprocess
    import sys

    probe = (
        "import sys; from thinwire.config import parse_config; "
        "parse_config({'name': 't', 'codec': {'select': {'kind': 'topk', 'density': 0.1}}}); "
        "print('thinwire.codecs' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr
    assert TopK in SELECTORS.sections()


def test_a_registered_section_checks_the_experiment_it_is_in():
    class ModelWideTopK(Section):
        kind: Literal["model_topk"] = "model_topk"
        density: Density

        def check_experiment(self, experiment, where):
            if experiment.codec.scope != "model":
                raise ValueError(f"{where} 'model_topk' needs codec.scope: model")

    saved = dict(SELECTORS._entries)
    SELECTORS.register("model_topk", section=ModelWideTopK, factory=lambda c, seed: None)
    try:
        codec = {"select": {"kind": "model_topk", "density": 0.1}}
        with pytest.raises(ValueError, match="codec.select 'model_topk' needs codec.scope: model"):
            parse_config({"name": "t", "codec": codec})
        assert parse_config({"name": "t", "codec": {**codec, "scope": "model"}}).codec.scope
    finally:
        SELECTORS._entries = saved


def test_every_declared_kind_of_every_family_has_a_factory_once_its_builders_load():
    import thinwire.codecs
    import thinwire.learning
    import thinwire.policies
    import thinwire.runtimes.ddp
    import thinwire.runtimes.run_folder
    import thinwire.server
    import thinwire.topologies.graph
    import thinwire.topologies.methods  # noqa: F401

    for family, registry in registries().items():
        for kind in registry.kinds():
            assert callable(registry.factory(kind)), (family, kind)
