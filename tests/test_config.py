"""The experiment schema: every error names the file, the dotted field and what was expected."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from thinwire.config import (
    ConfigError,
    DGCFeedback,
    Experiment,
    NoFeedback,
    ResidualFeedback,
    TopK,
    apply_overrides,
    load_config,
    parse_config,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, overrides=()) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    assert str(info.value).startswith(f"{path}: ")
    return info.value.problems


def test_minimal_file_gets_every_default(tmp_path):
    experiment = load_config(write(tmp_path, "name: demo\n"))
    assert isinstance(experiment, Experiment)
    assert experiment.data.dataset == "digits"
    assert experiment.codec.select.kind == "none"
    assert experiment.policy.kind == "always"
    assert experiment.runtime.kind == "simulation"


def test_out_of_range_value_names_the_dotted_path_and_the_value(tmp_path):
    assert problems(tmp_path, "name: a\ncodec: {select: {kind: topk, density: 2}}") == [
        "codec.select.density: must be in (0, 1], got 2"
    ]


def test_unknown_key_is_an_error_not_ignored(tmp_path):
    assert problems(tmp_path, "name: a\ncodec: {selct: {kind: topk, density: 0.1}}") == [
        "codec.selct: unknown key"
    ]
    assert problems(tmp_path, "name: a\nepochs: 3") == ["epochs: unknown key"]


def test_unknown_kind_lists_the_valid_ones(tmp_path):
    [problem] = problems(tmp_path, "name: a\ncodec: {select: {kind: topq, density: 0.1}}")
    assert problem.startswith("codec.select: unknown selector kind 'topq'; expected one of")
    assert "topk, topk_sampled" in problem and " random_k," in problem


def test_missing_kind_and_missing_field(tmp_path):
    assert problems(tmp_path, "name: a\ncodec: {select: {density: 0.1}}") == [
        "codec.select: missing 'kind'"
    ]
    assert problems(tmp_path, "name: a\ncodec: {select: {kind: topk}}") == [
        "codec.select.density: required field is missing"
    ]
    assert problems(tmp_path, "seed: 1") == ["name: required field is missing"]


def test_a_field_of_another_kind_cannot_be_written(tmp_path):
    assert problems(tmp_path, "name: a\ncodec: {select: {kind: topk, density: 0.1, lam: 1}}") == [
        "codec.select.lam: unknown key"
    ]


def test_every_problem_is_reported_at_once(tmp_path):
    found = problems(tmp_path, "name: a\ntrain: {lr: -1, device: gpu, rounds: 0}")
    assert found == [
        "train.rounds: input should be greater than or equal to 1, got 0",
        "train.lr: must be > 0, got -1",
        "train.device: must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got 'gpu'",
    ]


def test_list_items_are_named_by_index(tmp_path):
    assert problems(tmp_path, "name: a\nmodel: {kind: mlp, hidden: [64, 0]}") == [
        "model.hidden[1]: input should be greater than or equal to 1, got 0"
    ]


def test_cross_field_rules(tmp_path):
    assert problems(tmp_path, "name: a\ndata: {dataset: mnist}") == [
        "data: dataset 'mnist' reads local files: set data.root"
    ]
    assert problems(tmp_path, "name: a\ntrain: {local_steps: 5, local_epochs: 1}") == [
        "train: set either train.local_steps or train.local_epochs, not both"
    ]
    [problem] = problems(tmp_path, "name: a\ndata: {clients: 3}\nchannel: {uplink_mbps: [1, 2]}")
    assert problem == "(top level): channel.uplink_mbps lists 2 values for 3 clients"


def test_local_epochs_replaces_the_default_step_budget(tmp_path):
    experiment = load_config(write(tmp_path, "name: a\ntrain: {local_epochs: 2}"))
    assert experiment.train.local_steps is None
    assert experiment.train.local_epochs == 2


def test_error_feedback_shorthand(tmp_path):
    def feedback(text):
        return load_config(write(tmp_path, f"name: a\ncodec: {{error_feedback: {text}}}")).codec

    assert feedback("true").error_feedback == ResidualFeedback()
    assert feedback("false").error_feedback == NoFeedback()
    assert feedback("{kind: dgc, momentum: 0.5}").error_feedback == DGCFeedback(momentum=0.5)


def test_invalid_yaml_names_line_and_column(tmp_path):
    [problem] = problems(tmp_path, "name: a\n  bad: [")
    assert problem.startswith("line 2, column")
    assert "not valid YAML" in problem


def test_missing_file_and_non_mapping_document(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "absent.yaml")
    assert problems(tmp_path, "- 1\n- 2") == ["expected a mapping of sections, got list"]


def test_overrides_are_dotted_and_parsed_as_yaml(tmp_path):
    path = write(tmp_path, "name: a\ncodec: {select: {kind: topk, density: 0.1}}")
    experiment = load_config(path, ["codec.select.density=0.001", "train.rounds=7"])
    assert experiment.codec.select == TopK(density=0.001)
    assert experiment.train.rounds == 7
    flow = load_config(path, ["codec.select={kind: random_k, density: 0.5}"])
    assert flow.codec.select.kind == "random_k"


def test_bad_overrides(tmp_path):
    path = write(tmp_path, "name: a\nseed: 3")
    with pytest.raises(ConfigError, match="not of the form dotted.key=value"):
        load_config(path, ["seed"])
    with pytest.raises(ConfigError, match="seed is a value, not a section"):
        load_config(path, ["seed.x=1"])
    with pytest.raises(ConfigError, match=r"codec.select.density: must be in \(0, 1\], got 5"):
        load_config(path, ["codec.select={kind: topk, density: 5}"])


def test_apply_overrides_leaves_its_input_alone():
    raw = {"train": {"rounds": 3}}
    assert apply_overrides(raw, ["train.rounds=9"]) == {"train": {"rounds": 9}}
    assert raw == {"train": {"rounds": 3}}


def test_sections_are_frozen():
    experiment = parse_config({"name": "a"})
    with pytest.raises(ValidationError, match="frozen"):
        experiment.train.rounds = 3  # type: ignore[misc]
