"""The Flower message protocol: what each builder writes, each reader accepts or refuses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from thinwire.config import ConfigError, parse_config
from thinwire.runtimes.flower.messages import (
    UPDATE_STYPE,
    ClientEvaluation,
    Identity,
    StateLost,
    TrainReply,
    evaluation_reply,
    identity_reply,
    instruction,
    is_state_lost,
    node_identity,
    node_state_dir,
    read_evaluation,
    read_identity,
    read_instruction,
    read_run_config,
    read_train_reply,
    train_reply,
    update_array,
    update_bytes,
)
from thinwire.wire import WireError


def test_update_bytes_travel_as_a_raw_uint8_array() -> None:
    data = bytes(range(256)) * 3
    array = update_array(data)
    assert (array.dtype, tuple(array.shape), array.stype) == ("uint8", (768,), UPDATE_STYPE)
    assert update_bytes(ArrayRecord({"update": array}), "update") == data


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (ArrayRecord({"other": update_array(b"x")}), "holding only 'update'"),
        (
            ArrayRecord(
                {"update": Array(dtype="uint8", shape=(1,), stype="numpy.ndarray", data=b"x")}
            ),
            "stype 'thinwire/update'",
        ),
        (
            ArrayRecord({"update": Array(dtype="int8", shape=(1,), stype=UPDATE_STYPE, data=b"x")}),
            "dtype uint8",
        ),
        (
            ArrayRecord(
                {"update": Array(dtype="uint8", shape=(5,), stype=UPDATE_STYPE, data=b"x")}
            ),
            "does not match 1 bytes",
        ),
    ],
)
def test_update_bytes_refuse_anything_else(record: ArrayRecord, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        update_bytes(record, "update")


def test_an_instruction_round_trips_with_and_without_delivered() -> None:
    for delivered in (None, True, False):
        order = read_instruction(instruction(b"model", 7, delivered))
        assert (order.downlink, order.round, order.delivered) == (b"model", 7, delivered)


def test_an_instruction_names_the_round_the_clients_state_must_be_at() -> None:
    assert read_instruction(instruction(b"model", 7, None, 6)).state_round == 6
    assert read_instruction(instruction(b"model", 7)).state_round == 0  # start afresh
    with pytest.raises(ValueError, match=r"state_round must be in \[0, 7\), got 7"):
        instruction(b"model", 7, None, 7)
    content = instruction(b"model", 7)
    content["round"] = ConfigRecord({"round": 7, "state-round": 9})
    with pytest.raises(WireError, match="round 7 with 'state-round' 9"):
        read_instruction(content)


def test_an_error_reason_tells_a_lost_state_from_other_failures() -> None:
    assert is_state_lost(f"StateLost: {StateLost('no state of round 2')}")
    assert not is_state_lost("ValueError: StateLost: quoted")


def test_a_nodes_state_folder_defaults_under_flowers_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    assert node_state_dir({"partition-id": 0}) == tmp_path / "thinwire-state"
    assert node_state_dir({"state-dir": "/data/state"}) == Path("/data/state")
    with pytest.raises(ValueError, match="thinwire client --state-dir DIR"):
        node_state_dir({"state-dir": ""})


def test_an_instruction_without_its_round_is_refused() -> None:
    content = instruction(b"model", 1)
    content["round"] = ConfigRecord({"delivered": True})
    with pytest.raises(WireError, match="'round' must be an integer"):
        read_instruction(content)


def test_a_train_reply_round_trips_with_or_without_an_update() -> None:
    for update in (b"\x01\x02", None):
        reply = TrainReply(update, 12, 0.5, 0.25)
        assert read_train_reply(train_reply(reply)) == reply


def test_a_diverged_loss_is_reported_as_it_is() -> None:
    reply = read_train_reply(train_reply(TrainReply(b"u", 3, math.nan, 0.1)))
    assert math.isnan(reply.train_loss)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda c: c.__delitem__("metrics"), "no 'metrics' record"),
        (lambda c: c.__setitem__("metrics", ConfigRecord({"x": 1})), "must be a MetricRecord"),
        (
            lambda c: c.__setitem__("metrics", MetricRecord({"num-examples": 1.5})),
            "'num-examples' must be an integer",
        ),
        (
            lambda c: c["metrics"].__setitem__("compute-s", -1.0),
            "'compute-s' must be >= 0",
        ),
    ],
)
def test_a_malformed_train_reply_is_refused(edit, problem: str) -> None:  # type: ignore[no-untyped-def]
    content = train_reply(TrainReply(b"u", 3, 0.1, 0.1))
    edit(content)
    with pytest.raises(WireError, match=problem):
        read_train_reply(content)


def test_evaluations_round_trip_and_implausible_ones_are_refused() -> None:
    evaluation = ClientEvaluation(40, 0.7, 0.875)
    assert read_evaluation(evaluation_reply(evaluation)) == evaluation
    with pytest.raises(WireError, match="implausible"):
        read_evaluation(evaluation_reply(ClientEvaluation(40, 0.7, 1.5)))


def test_a_node_config_names_its_partition() -> None:
    assert node_identity({"partition-id": 2, "num-partitions": 3}) == Identity(2, 3)
    assert node_identity({"partition-id": 4}) == Identity(4, None)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({}, "'partition-id' must be an integer >= 0, got None"),
        ({"partition-id": "0"}, "must be an integer"),
        ({"partition-id": True}, "must be an integer"),
        ({"partition-id": 3, "num-partitions": 3}, "'num-partitions' must be an integer > "),
    ],
)
def test_a_bad_node_config_says_how_to_start_the_supernode(config: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as error:
        node_identity(config)
    assert "thinwire client --partition" in str(error.value)


def test_identities_round_trip_and_out_of_range_ones_are_refused() -> None:
    for identity in (Identity(0, 3), Identity(5, None)):
        assert read_identity(identity_reply(identity)) == identity
    with pytest.raises(WireError, match="not in"):
        read_identity(RecordDict({"identity": ConfigRecord({"partition-id": -1})}))


def test_the_run_config_carries_the_experiment_yaml() -> None:
    experiment = parse_config({"name": "x", "data": {"clients": 4}})
    text = yaml.safe_dump(experiment.model_dump(mode="json"))
    settings = read_run_config({"experiment": text, "run-dir": "/runs/x", "resume": ""})
    assert settings.experiment == experiment
    assert (settings.run_dir, settings.resume) == ("/runs/x", "")


def test_a_bad_run_config_names_the_key_or_the_field() -> None:
    with pytest.raises(ValueError, match="'run-dir' must be a string"):
        read_run_config({"experiment": "name: x", "resume": ""})
    with pytest.raises(ConfigError, match="data.clients"):
        read_run_config(
            {"experiment": "{name: x, data: {clients: 0}}", "run-dir": "", "resume": ""}
        )
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_run_config({"experiment": "name: [", "run-dir": "", "resume": ""})
