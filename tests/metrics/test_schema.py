"""The round record's schema: one definition of the keys, and every runtime keeps to it.

The Flower loop, the ddp ranks and `thinwire peer --report` write through `RunRecorder.add`,
which refuses a key the schema does not define, so their own tests check them; the
simulators return their records, so they are checked here.
"""

import math
import typing

import pytest
from star_helpers import tiny_experiment

from thinwire.metrics import CORE_KEYS, KEYS, RoundCounts, RoundRecord, round_record, schema
from thinwire.runtimes.simulation import simulate

CORE = {
    "bytes_up": 10,
    "bytes_down": 20,
    "cum_bytes_up": 30,
    "cum_bytes_down": 40,
    "updates_sent": 2,
    "sim_time_s": 0.5,
    "compute_s": 0.25,
    "wall_s": 1.0,
}


class Evaluation(typing.NamedTuple):
    loss: float
    accuracy: float


def test_every_key_is_defined_once_with_its_unit_and_meaning():
    assert list(KEYS) == [*CORE_KEYS, *RoundCounts.__annotations__]
    assert RoundRecord.__required_keys__ == set(CORE_KEYS)
    assert RoundRecord.__optional_keys__ == set(RoundCounts.__annotations__)
    constants = {
        value
        for name, value in vars(schema).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }
    assert set(KEYS) <= constants  # every key has its constant
    assert set(KEYS) | set(schema.SUMMARY_KEYS) == constants  # and no constant is stray
    assert all(k.unit and k.meaning for k in [*KEYS.values(), *schema.SUMMARY_KEYS.values()])


def test_round_record_keeps_the_core_keys_first_and_the_counts_in_the_order_given():
    record = round_record(
        round=3, evaluation=None, train_losses=[1.0, 2.0], **CORE, rejected=1, participants=4
    )
    assert list(record) == [*CORE_KEYS, "rejected", "participants"]
    assert math.isnan(record["accuracy"]) and math.isnan(record["loss"])
    assert record["train_loss"] == 1.5 and record["round"] == 3


def test_round_record_takes_accuracy_and_loss_from_the_evaluation():
    record = round_record(round=1, evaluation=Evaluation(0.5, 0.75), train_losses=[], **CORE)
    assert (record["accuracy"], record["loss"]) == (0.75, 0.5)
    assert math.isnan(record["train_loss"])  # no trainer this round


def test_undefined_keys_names_what_the_schema_lacks():
    assert schema.undefined_keys({"round": 1, "epsilon": 0.5}) == []
    assert schema.undefined_keys({"round": 1, "mine": 0, "yours": 1}) == ["mine", "yours"]


STAR = [*CORE_KEYS, "participants", "rejected", "censored", "reused"]
SLOTS = ["slot_successes", "slot_collisions", "slot_idle"]
GOSSIP = [*CORE_KEYS, "consensus_distance", "fired", "missing", "rejected", "refreshed"]


@pytest.mark.filterwarnings("ignore:DP noise is drawn from seeds")
@pytest.mark.parametrize(
    ("sections", "keys"),
    [
        ({}, STAR),
        (
            {
                "policy": {"kind": "random_access", "rule": {"kind": "aog"}},
                "channel": {"slots": 2},
                "codec": {"select": {"kind": "topk", "density": 0.1}},
            },
            [*STAR, *SLOTS],
        ),
        (
            {"privacy": {"noise_multiplier": 1.0, "delta": 1e-4, "max_grad_norm": 1.0}},
            [*STAR, "epsilon"],
        ),
        (
            {
                "data": {"clients": 4},
                "topology": {"kind": "ring"},
                "gossip": {"kind": "choco", "gamma": 0.5},
                "codec": {"select": {"kind": "topk", "density": 0.1}},
            },
            GOSSIP,
        ),
    ],
    ids=["star", "random-access", "private", "gossip"],
)
def test_the_simulators_write_only_schema_keys_in_the_order_run_folders_hold(sections, keys):
    records = simulate(tiny_experiment(**sections)).records
    for record in records:
        assert schema.undefined_keys(record) == []
        assert list(record) == keys  # metrics.jsonl lines keep their key order
