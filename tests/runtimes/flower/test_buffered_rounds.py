"""The asynchronous star's Flower loop (`FlowerBuffered`) against in-process SuperNodes: equal
to the simulator where the arrival order cannot matter, and never stalled by a client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from flower_local import LocalGrid
from flwr.app import Array, ArrayRecord, Context, Message
from test_rounds import (  # noqa: F401  (fixtures)
    dying_at,
    experiment,
    replacing_replies,
    run_config,
    task_identity,
    two_threads,
)

from thinwire.learning import load_federation
from thinwire.metrics import RunRecorder
from thinwire.runtimes.flower.buffered import FlowerBuffered
from thinwire.runtimes.flower.messages import TRAIN, read_instruction
from thinwire.runtimes.flower.strategy import QuorumError
from thinwire.runtimes.simulation import simulate

KEYS = ("accuracy", "loss", "train_loss", "bytes_up", "bytes_down", "updates_sent")
ASYNC_KEYS = ("participants", "buffered", "staleness_mean", "staleness_max", "rejected")


def buffered(tmp_path: Path, grid: LocalGrid, exp: Any, **kwargs: Any) -> FlowerBuffered:
    recorder = RunRecorder(exp, run_dir=tmp_path / "run")
    return FlowerBuffered(
        grid=grid, experiment=exp, federation=load_federation(exp), recorder=recorder, **kwargs
    )


@pytest.mark.parametrize(
    "server",
    [
        {"buffer": 3, "staleness": {"kind": "constant"}},
        {"buffer": 1, "concurrency": 1},
    ],
    ids=["k-equals-m-equals-clients", "one-in-flight"],
)
@pytest.mark.usefixtures("two_threads")
def test_a_run_in_a_deterministic_order_equals_the_simulated_run_bit_for_bit(
    tmp_path: Path, server: dict
) -> None:
    exp = experiment(
        tmp_path,
        server={"kind": "buffered_async", **server},
        train={"rounds": 4, "local_steps": 4, "lr": 0.1, "device": "cpu"},
    )
    grid = LocalGrid(run_config(exp), 3)
    flower = buffered(tmp_path, grid, exp)
    model = flower.run()
    expected = simulate(exp)
    for name, tensor in expected.model.items():
        assert torch.equal(model[name], tensor), name
    for got, want in zip(flower.recorder.records, expected.records, strict=True):
        for key in KEYS + ASYNC_KEYS:
            assert got[key] == want[key], key
    if server["buffer"] == 3:  # and the same messages as the synchronous star sends
        rounds = [read_instruction(m.content).round for m in grid.sent_of_type(TRAIN)]
        assert rounds == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]


def test_an_asynchronous_run_steps_every_k_arrivals_in_arrival_order(tmp_path: Path) -> None:
    # K = 2 of M = 3: every step buffers two updates, and whoever waited over a step is stale.
    exp = experiment(
        tmp_path,
        server={"kind": "buffered_async", "buffer": 2},
        train={"rounds": 5, "local_steps": 4, "lr": 0.1, "device": "cpu"},
    )
    grid = LocalGrid(run_config(exp), 3)
    flower = buffered(tmp_path, grid, exp)
    flower.run()
    records = flower.recorder.records
    assert [r["round"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["buffered"] for r in records] == [2] * 5
    assert sum(r["participants"] for r in records) == 3 + 2 * 4
    assert max(r["staleness_max"] for r in records) >= 1
    assert all(r["dropouts"] == r["rejected"] == 0 for r in records)
    assert records[-1]["cum_bytes_up"] == sum(r["bytes_up"] for r in records)
    sent = grid.sent_of_type(TRAIN)
    state_rounds = {}
    for m in sent:  # every task names the round of the client's previous one
        order = read_instruction(m.content)
        node = m.metadata.dst_node_id
        assert order.state_round == state_rounds.get(node, 0) < order.round
        state_rounds[node] = order.round


def test_a_node_that_stops_answering_does_not_stall_the_buffer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(
        tmp_path,
        server={"kind": "buffered_async", "buffer": 3},
        runtime={"round_timeout_s": 0.3, "first_round_timeout_s": 0.3},
        train={"rounds": 3, "local_steps": 4, "lr": 0.1, "device": "cpu"},
    )
    grid = LocalGrid(run_config(exp), 3)
    dying_at(grid, 2, round=2)
    flower = buffered(tmp_path, grid, exp)
    flower.run()
    records = flower.recorder.records
    assert [(r["buffered"], r["dropouts"]) for r in records] == [(3, 0), (2, 1), (2, 0)]
    assert "client 2 dropped out: no reply by the deadline" in caplog.text


def test_a_run_whose_every_task_is_lost_stops_with_a_quorum_error(tmp_path: Path) -> None:
    exp = experiment(
        tmp_path,
        server={"kind": "buffered_async", "buffer": 2},
        runtime={"round_timeout_s": 0.3, "first_round_timeout_s": 0.3},
    )
    grid = LocalGrid(run_config(exp), 3)
    for partition in range(3):
        dying_at(grid, partition, round=2)
    flower = buffered(tmp_path, grid, exp)
    # Step 1 takes two updates; the third, stale, goes into step 2 with the two lost tasks;
    # the last live client's task is lost too, and nothing is left to step on.
    with pytest.raises(QuorumError, match="version 2: none of the 1 tasks since the last step"):
        flower.run()
    records = flower.recorder.records
    assert [(r["buffered"], r["staleness_max"], r["dropouts"]) for r in records] == [
        (2, 0, 0),
        (1, 1, 2),
    ]


def test_a_corrupted_update_is_rejected_counted_and_the_buffer_goes_on(tmp_path: Path) -> None:
    def flip(reply: Message, context: Context) -> Message:
        data = bytes(b ^ 0xFF for b in reply.content["update"]["update"].data)
        array = Array(dtype="uint8", shape=(len(data),), stype="thinwire/update", data=data)
        reply.content["update"] = ArrayRecord({"update": array})
        return reply

    exp = experiment(
        tmp_path,
        server={"kind": "buffered_async", "buffer": 3},
        train={"rounds": 3, "local_steps": 4, "lr": 0.1, "device": "cpu"},
    )
    grid = LocalGrid(run_config(exp), 3)
    replacing_replies(grid, 1, flip)
    flower = buffered(tmp_path, grid, exp)
    flower.run()
    records = flower.recorder.records
    assert [(r["buffered"], r["rejected"]) for r in records] == [(2, 1)] * 3
    to_client_1 = [
        read_instruction(m.content).delivered
        for m in grid.sent_of_type(TRAIN)
        if m.metadata.dst_node_id == grid.node(1)
    ]
    assert to_client_1 == [None, False, False]


def test_resume_is_refused_with_a_reason(tmp_path: Path) -> None:
    exp = experiment(tmp_path, server={"kind": "buffered_async"})
    with pytest.raises(ValueError, match="asynchronous server's run"):
        buffered(tmp_path, LocalGrid(run_config(exp), 3), exp, resume=tmp_path / "x")
