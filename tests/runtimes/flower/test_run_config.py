"""The written Flower app carries every field as its own run-config key."""

import tomllib

import pytest
from star_helpers import tiny_experiment

from thinwire.config import ConfigError
from thinwire.runtimes.flower.deploy import write_app
from thinwire.runtimes.flower.messages import read_run_config


@pytest.fixture
def run_config(tmp_path):
    experiment = tiny_experiment(
        codec={"select": {"kind": "topk", "density": 0.05}, "error_feedback": True},
        train={"optimizer": {"kind": "sgd", "momentum": 0.9}},
    )
    path = write_app(tmp_path / "app", experiment=experiment)
    return experiment, tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"]


def test_every_field_is_a_key_and_reads_back_unchanged(run_config):
    experiment, config = run_config
    assert config["train.rounds"] == 2 and config["codec.select.density"] == 0.05
    assert config["model.hidden"] == "[16]" and config["downlink"] == "null"
    assert read_run_config(config).experiment == experiment


def test_a_key_overrides_one_field(run_config):
    _, config = run_config
    changed = read_run_config({**config, "train.rounds": 7, "codec.select.density": 0.5})
    assert changed.experiment.train.rounds == 7
    assert changed.experiment.codec.select.density == 0.5
    assert changed.experiment.train.optimizer.momentum == 0.9  # untouched


def test_lists_nulls_and_kinds_are_set_as_yaml_text(run_config):
    _, config = run_config
    changed = read_run_config(
        {
            **config,
            "model.hidden": "[32, 8]",
            "train.optimizer.kind": "adam",
            "downlink": "{select: {kind: topk, density: 0.5}}",
        }
    ).experiment
    assert changed.model.hidden == [32, 8]
    assert changed.train.optimizer.kind == "adam"  # momentum dropped with the old kind
    assert changed.downlink is not None and changed.downlink.select.density == 0.5


def test_a_bad_value_names_the_field(run_config):
    _, config = run_config
    with pytest.raises(ConfigError, match="codec.select.density: must be in"):
        read_run_config({**config, "codec.select.density": 3.0})
