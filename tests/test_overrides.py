"""--set, --unset and sweep points edit the file the way a user would."""

import pytest

from thinwire.config import SGD, Adam, CodecConfig, ConfigError, load_config, override

FILE = """\
name: base
model: {kind: mlp, hidden: [64, 32]}
train: {rounds: 3, optimizer: {kind: sgd, momentum: 0.9}}
codec: {select: {kind: topk, density: 0.01}, error_feedback: true}
"""


@pytest.fixture
def path(tmp_path):
    file = tmp_path / "exp.yaml"
    file.write_text(FILE)
    return file


def test_switching_a_kind_replaces_the_section_and_notes_what_was_dropped(path):
    notes = []
    experiment = load_config(path, ["train.optimizer.kind=adam"], notes=notes)
    assert experiment.train.optimizer == Adam()
    assert notes == ["train.optimizer: kind is now 'adam'; dropped momentum"]
    then = load_config(path, ["train.optimizer.kind=adam", "train.optimizer.weight_decay=0.1"])
    assert then.train.optimizer == Adam(weight_decay=0.1)


def test_setting_the_same_kind_keeps_the_section(path):
    notes = []
    experiment = load_config(path, ["train.optimizer.kind=sgd"], notes=notes)
    assert experiment.train.optimizer == SGD(momentum=0.9) and notes == []


def test_list_items_are_set_by_index(path):
    assert load_config(path, ["model.hidden.0=128"]).model.hidden == [128, 32]
    with pytest.raises(ConfigError, match="index 2 is past the list's 2 items"):
        load_config(path, ["model.hidden.2=8"])


def test_an_index_into_a_default_list_starts_from_the_default(tmp_path):
    file = tmp_path / "exp.yaml"
    file.write_text("name: a\n")
    assert load_config(file, ["model.hidden.0=16"]).model.hidden == [16]  # default [64]


def test_a_field_of_an_absent_section_starts_from_its_default_kind(tmp_path):
    file = tmp_path / "exp.yaml"
    file.write_text("name: a\n")
    experiment = load_config(file, ["runtime.checkpoint_every=5"])
    assert experiment.runtime.kind == "simulation" and experiment.runtime.checkpoint_every == 5


def test_unset_and_null_remove_a_section_where_it_cannot_be_null(path):
    for experiment in (
        load_config(path, unset=["codec"]),
        load_config(path, ["codec=null"]),
    ):
        assert experiment.codec == CodecConfig()


def test_null_stays_null_where_null_means_none(path):
    on = load_config(path, ["privacy={noise_multiplier: 1.0, delta: 1e-4}"])
    assert on.privacy is not None
    raw = override({"privacy": {"noise_multiplier": 1.0}}, ["privacy=null"]).raw
    assert raw == {"privacy": None}


def test_unset_of_an_absent_key_is_harmless(path):
    assert load_config(path, unset=["downlink", "privacy.delta"]).downlink is None


def test_malformed_overrides_say_what_form_is_expected(path):
    with pytest.raises(ConfigError, match="not of the form dotted.key=value"):
        load_config(path, ["model.hidden[0]=1"])
    with pytest.raises(ConfigError, match="train.rounds is a value, not a section"):
        load_config(path, ["train.rounds.x=1"])


def test_unset_removes_a_list_item(path):
    assert load_config(path, unset=["model.hidden.0"]).model.hidden == [32]
