"""The configuration reference is generated from the schema and kept current."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from thinwire.cli import app
from thinwire.config import Experiment
from thinwire.reference import find, reference_markdown, sections

PAGE = Path(__file__).parents[1] / "docs" / "config-reference.md"


def test_the_committed_page_is_what_the_schema_says():
    assert PAGE.read_text() == reference_markdown(), (
        "docs/config-reference.md is stale: thinwire schema --markdown > docs/config-reference.md"
    )


def test_every_field_of_every_kind_is_described():
    documented = {e.path for s in sections() for e in s.entries}
    assert set(Experiment.model_fields) <= documented
    for path in (
        "codec.select.density",
        "train.optimizer.momentum",
        "runtime.checkpoint_every",
        "topology.p",
        "privacy.delta",
        "policy.threshold.tau",
    ):
        assert path in documented, path


def test_an_entry_states_type_default_range_and_meaning():
    [section] = find("train.participation")
    [entry] = section.entries
    assert entry.type == "float"
    assert entry.default == "1.0"
    assert entry.range == "(0, 1]"
    assert entry.doc == "Fraction of clients sampled each round (seeded)."


def test_a_tagged_union_lists_each_kind_as_its_own_section():
    kinds = [s.kind for s in find("train.optimizer")]
    assert kinds == ["sgd", "adam"]


def test_the_page_gives_every_data_layout():
    page = reference_markdown()
    for name in ("mnist", "fashion_mnist", "cifar10"):
        assert f"- **{name}**:" in page
    assert "t10k-images-idx3-ubyte" in page and "cifar-10-batches-py" in page


def test_schema_command_prints_a_field_and_suggests_close_names():
    runner = CliRunner()
    result = runner.invoke(app, ["schema", "codec.select"])
    assert result.exit_code == 0 and "codec.select.density" in result.output
    wrong = runner.invoke(app, ["schema", "codec.select.dnsity"])
    assert wrong.exit_code == 2 and "did you mean codec.select.density" in wrong.output


def test_unknown_field_raises_key_error():
    with pytest.raises(KeyError):
        find("no.such.field")
