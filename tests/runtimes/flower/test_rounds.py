"""The Flower round loop (`FlowerStar`) against in-process SuperNodes running the ClientApp."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from flower_local import LocalGrid, set_task_identity
from flwr.app import Array, ArrayRecord, Context, Message

from thinwire.config import Experiment, parse_config
from thinwire.learning import load_federation, simulation_threads
from thinwire.metrics import RunRecorder, load_records
from thinwire.runtimes.flower.client_app import app as client_app
from thinwire.runtimes.flower.messages import (
    TRAIN,
    default_state_dir,
    read_instruction,
    read_run_config,
)
from thinwire.runtimes.flower.rounds import FlowerStar, QuorumError
from thinwire.runtimes.flower.state import state_key
from thinwire.runtimes.simulation import simulate
from thinwire.server import aggregator, sample_clients
from thinwire.voting import VALUES, index_payload, support_size, values_payload
from thinwire.voting import VOTE as VOTE_TENSOR
from thinwire.wire import Kind, Update, encode
from thinwire.wire import update_pb2 as pb

TOPK_EF = {"scope": "model", "select": {"kind": "topk", "density": 0.05}, "error_feedback": True}
MULTISCALE = {"quantize": {"kind": "multiscale_qsgd", "bits": 4, "scales": 2, "bucket": 256}}
POWERSGD = {"lowrank": {"kind": "powersgd", "rank": 2}, "error_feedback": True}


def experiment(tmp_path: Path, **sections: Any) -> Experiment:
    runtime = {"kind": "flower", "poll_interval_s": 0.005, "round_timeout_s": 2.0}
    runtime.update(sections.pop("runtime", {}))
    raw = {
        "name": "star",
        "seed": 3,
        "data": {"dataset": "digits", "clients": 3},
        "model": {"kind": "mlp", "hidden": [16]},
        "train": {"rounds": 3, "local_steps": 4, "lr": 0.1, "device": "cpu"},
        "codec": TOPK_EF,
        "runtime": runtime,
        "output": str(tmp_path / "runs"),
        **sections,
    }
    return parse_config(raw)


def run_config(exp: Experiment) -> dict[str, str]:
    text = yaml.safe_dump(exp.model_dump(mode="json"))
    return {"experiment": text, "run-dir": "", "resume": ""}


def star(exp: Experiment, grid: LocalGrid, tmp_path: Path, **kwargs: Any) -> FlowerStar:
    recorder = RunRecorder(exp, run_dir=tmp_path / "run")
    return FlowerStar(
        grid=grid, experiment=exp, federation=load_federation(exp), recorder=recorder, **kwargs
    )


@pytest.fixture(autouse=True)
def task_identity() -> None:
    set_task_identity()


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Torch's default on a 2-core host. The simulator runs on `simulation_threads` (one for
    these models); on a 1-core host the Flower path ran on that many by chance alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def replacing_replies(
    grid: LocalGrid, partition: int, edit: Callable[[Message, Context], Message]
) -> None:
    """Makes `partition`'s node pass its train replies through `edit`."""

    def app(message: Message, context: Context) -> Message:
        reply = client_app(message, context)
        return edit(reply, context) if message.metadata.message_type == TRAIN else reply

    grid.client_apps[grid.node(partition)] = app


def dying_at(grid: LocalGrid, partition: int, round: int) -> None:
    """Makes `partition`'s node stop answering from train message `round` on."""
    node = grid.node(partition)
    push = grid.push_messages

    def push_then_die(messages: Any) -> Any:
        messages = list(messages)
        for m in messages:
            to_node = m.metadata.dst_node_id == node and m.metadata.message_type == TRAIN
            if to_node and read_instruction(m.content).round >= round:
                grid.dead.add(node)
        return push(messages)

    grid.push_messages = push_then_die  # type: ignore[method-assign]


CENSOR = {"kind": "censor", "threshold": {"kind": "constant", "tau": 0.01}}
"""All three clients send in round 1, then 1 to 3 of them stay silent each round."""
RANDOM_ACCESS = {"kind": "random_access", "rule": {"kind": "aog", "threshold": 0.5}}
PRIVACY = {
    "noise_multiplier": 1.0,
    "delta": 1e-3,
    "max_grad_norm": 1.0,
    "sparsity": {"final_rate": 0.5, "schedule": "linear"},
}
VOTE = {"density": 0.05, "mask": "previous"}
"""Majority-vote sparse SGD; only its one-exchange variant runs on Flower."""
SHARED_MASK = {"scope": "model", "select": {"kind": "shared_mask"}}
POLICY_KEYS = ("censored", "reused", "slot_successes", "slot_collisions", "slot_idle", "epsilon")


@pytest.mark.parametrize(
    "sections",
    [
        {},
        {"downlink": TOPK_EF, "train": {"rounds": 3, "local_steps": 4, "participation": 0.67}},
        pytest.param(
            {"policy": CENSOR, "codec": {}, "train": {"rounds": 4, "local_steps": 4}},
            marks=pytest.mark.slow,
        ),
        pytest.param(
            {
                "policy": RANDOM_ACCESS,
                "data": {"dataset": "digits", "clients": 6},
                "channel": {"slots": 2},
            },
            marks=pytest.mark.slow,
        ),
        {"privacy": PRIVACY, "codec": SHARED_MASK},
        {"codec": MULTISCALE, "downlink": MULTISCALE},
        {
            "codec": {},
            "vote": VOTE,
            "train": {"rounds": 3, "local_steps": 4, "participation": 0.67},
        },
        {"codec": {"quantize": {"kind": "two_mean_sign"}, "error_feedback": True}},
        # The warm-start Q and the residual live in the node's state folder between rounds.
        {"codec": POWERSGD, "train": {"rounds": 3, "local_steps": 4, "participation": 0.67}},
    ],
    ids=[
        "topk-ef",
        "compressed-downlink-partial-participation",
        "censoring",
        "random-access",
        "dp-random-sparsification",
        "multiscale-qsgd-both-ways",
        "majority-vote-previous-mask-partial-participation",
        "two-mean-sign-ef",
        "powersgd-ef-partial-participation",
    ],
)
@pytest.mark.usefixtures("two_threads")
def test_a_run_equals_the_simulated_run_bit_for_bit(tmp_path: Path, sections: dict) -> None:
    sections = dict(sections)
    if "train" in sections:
        sections["train"] = {**sections["train"], "lr": 0.1, "device": "cpu"}
    exp = experiment(tmp_path, **sections)
    grid = LocalGrid(run_config(exp), exp.data.clients)
    flower = star(exp, grid, tmp_path)
    model = flower.run()
    expected = simulate(exp)
    for name, tensor in expected.model.items():
        assert torch.equal(model[name], tensor), name
    for got, want in zip(flower.recorder.records, expected.records, strict=True):
        for key in ("accuracy", "loss", "train_loss", "bytes_up", "bytes_down", "participants"):
            assert got[key] == want[key], key
        for key in POLICY_KEYS:
            assert got.get(key) == want.get(key), key
    for round in (1, 2, 3):
        sent = [m for m in grid.sent_of_type(TRAIN) if read_instruction(m.content).round == round]
        nodes = sorted(m.metadata.dst_node_id for m in sent)
        assert nodes == [grid.node(c) for c in sample_clients(exp, round)]


@pytest.mark.usefixtures("two_threads")
def test_the_server_computes_on_the_simulators_thread_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    evaluate = aggregator.evaluate

    def counted(*args: Any) -> Any:
        seen.append(torch.get_num_threads())
        return evaluate(*args)

    monkeypatch.setattr(aggregator, "evaluate", counted)
    exp = experiment(tmp_path, train={"rounds": 1, "local_steps": 1, "lr": 0.1})
    star(exp, LocalGrid(run_config(exp), 3), tmp_path).run()
    assert seen == [simulation_threads(exp)] == [1]
    assert torch.get_num_threads() == 2  # and restores torch's setting


def test_censored_rounds_send_no_update_bytes_and_reuse_the_last_update(tmp_path: Path) -> None:
    exp = experiment(
        tmp_path, policy=CENSOR, codec={}, train={"rounds": 5, "local_steps": 4, "lr": 0.1}
    )
    grid = LocalGrid(run_config(exp), 3)
    flower = star(exp, grid, tmp_path)
    flower.run()
    records = flower.recorder.records
    assert [r["censored"] for r in records] == [0, 3, 2, 3, 1]
    update_bytes = records[0]["bytes_up"] // 3  # a dense update has one size
    for record in records:
        assert record["updates_sent"] + record["censored"] == record["participants"]
        assert record["reused"] == record["censored"]  # CSGD averages their last update
        assert record["bytes_up"] == record["updates_sent"] * update_bytes  # none from silence
    assert len(grid.sent_of_type(TRAIN)) == 15  # a censored client is still asked every round


def test_delivered_travels_with_a_clients_next_train_message(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    grid = LocalGrid(run_config(exp), 3)
    star(exp, grid, tmp_path).run()
    delivered = [read_instruction(m.content).delivered for m in grid.sent_of_type(TRAIN)]
    assert delivered == [None] * 3 + [True] * 6


def test_a_corrupted_update_is_rejected_counted_and_reported_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def flip(reply: Message, context: Context) -> Message:
        data = bytes(b ^ 0xFF for b in reply.content["update"]["update"].data)
        array = Array(dtype="uint8", shape=(len(data),), stype="thinwire/update", data=data)
        reply.content["update"] = ArrayRecord({"update": array})
        return reply

    exp = experiment(tmp_path)
    grid = LocalGrid(run_config(exp), 3)
    replacing_replies(grid, 1, flip)
    flower = star(exp, grid, tmp_path)
    flower.run()
    assert [r["rejected"] for r in flower.recorder.records] == [1, 1, 1]
    assert [r["updates_sent"] for r in flower.recorder.records] == [3, 3, 3]
    assert "client 1: update dropped: WireError" in caplog.text
    to_client_1 = [
        read_instruction(m.content).delivered
        for m in grid.sent_of_type(TRAIN)
        if m.metadata.dst_node_id == grid.node(1)
    ]
    assert to_client_1 == [None, False, False]


def test_a_reply_without_its_records_is_rejected_and_the_round_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def strip_metrics(reply: Message, context: Context) -> Message:
        del reply.content["metrics"]
        return reply

    exp = experiment(tmp_path)
    grid = LocalGrid(run_config(exp), 3)
    replacing_replies(grid, 0, strip_metrics)
    flower = star(exp, grid, tmp_path)
    flower.run()
    assert [r["rejected"] for r in flower.recorder.records] == [1, 1, 1]
    assert [r["updates_sent"] for r in flower.recorder.records] == [2, 2, 2]
    assert "client 0: malformed reply: WireError: the message has no 'metrics'" in caplog.text


def test_a_reply_without_update_bytes_is_a_silent_client(tmp_path: Path) -> None:
    def silence(reply: Message, context: Context) -> Message:
        del reply.content["update"]
        return reply

    exp = experiment(tmp_path)
    grid = LocalGrid(run_config(exp), 3)
    replacing_replies(grid, 2, silence)
    flower = star(exp, grid, tmp_path)
    flower.run()
    records = flower.recorder.records
    assert [(r["updates_sent"], r["rejected"], r["dropouts"]) for r in records] == [(2, 0, 0)] * 3


def mangling_before(
    grid: LocalGrid, partition: int, round: int, mangle: Callable[[Path], None]
) -> None:
    """Runs `mangle` on `partition`'s state folder before its train message of `round`."""
    node = grid.node(partition)
    inner = grid.client_apps[node]

    def app(message: Message, context: Context) -> Message:
        is_train = message.metadata.message_type == TRAIN
        if is_train and read_instruction(message.content).round == round:
            exp = read_run_config(context.run_config).experiment
            mangle(default_state_dir() / state_key(exp) / f"client-{partition}")
        return inner(message, context)

    grid.client_apps[node] = app


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


@pytest.mark.slow
def test_a_mangled_state_folder_is_counted_and_its_client_resynchronized(
    tmp_path: Path,
) -> None:
    exp = experiment(tmp_path, downlink=TOPK_EF, train={"rounds": 5, "local_steps": 4, "lr": 0.1})
    grid = LocalGrid(run_config(exp), 3)
    mangling_before(grid, 0, 2, shutil.rmtree)  # the whole folder
    mangling_before(grid, 1, 3, lambda f: (f / "round-000002" / "manifest.json").unlink())
    mangling_before(grid, 2, 4, lambda f: truncate(f / "round-000003" / "tensors.pt"))
    flower = star(exp, grid, tmp_path)
    flower.run()
    records = flower.recorder.records
    assert [r["state_lost"] for r in records] == [0, 1, 1, 1, 0]
    assert [r["updates_sent"] for r in records] == [3, 2, 2, 2, 3]
    assert [r["dropouts"] for r in records] == [0] * 5
    sent = {
        (read_instruction(m.content).round, m.metadata.dst_node_id): read_instruction(m.content)
        for m in grid.sent_of_type(TRAIN)
    }
    for client, lost in ((0, 2), (1, 3), (2, 4)):
        resync = sent[(lost + 1, grid.node(client))]
        assert resync.state_round == 0  # a fresh state, and the full model:
        assert len(resync.downlink) > len(sent[(lost + 1, grid.node((client + 1) % 3))].downlink)
    assert records[-1]["loss"] < records[0]["loss"]  # and the run went on learning


def test_a_node_that_stops_answering_drops_out_and_the_run_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(tmp_path, runtime={"min_replies": 2, "round_timeout_s": 0.5})
    grid = LocalGrid(run_config(exp), 3)
    dying_at(grid, 2, round=2)
    flower = star(exp, grid, tmp_path)
    flower.run()
    records = flower.recorder.records
    assert [(r["participants"], r["dropouts"]) for r in records] == [(3, 0), (3, 1), (2, 0)]
    assert [r["updates_sent"] for r in records] == [3, 2, 2]
    assert "client 2 dropped out: no reply by the deadline" in caplog.text
    queries = [m for m in grid.sent_of_type("query") if m.metadata.dst_node_id == grid.node(2)]
    assert len(queries) == 2  # asked once at the start, and again after it dropped out


def test_fewer_replies_than_min_replies_stop_the_run_after_a_checkpoint(tmp_path: Path) -> None:
    exp = experiment(tmp_path, runtime={"min_replies": 2, "round_timeout_s": 0.3})
    grid = LocalGrid(run_config(exp), 3)
    dying_at(grid, 1, round=2)
    dying_at(grid, 2, round=2)
    flower = star(exp, grid, tmp_path)
    with pytest.raises(
        QuorumError, match=r"round 2: 1 of 3 clients answered .* runtime.min_replies is 2"
    ):
        flower.run()
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "round-000001.pt", weights_only=True)
    assert checkpoint["round"] == 1
    for name, tensor in checkpoint["state"]["model"].items():
        assert torch.equal(tensor, flower.aggregator.model[name])


def test_the_run_waits_for_its_clients_then_starts_without_the_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(tmp_path, runtime={"connect_timeout_s": 0.3})
    grid = LocalGrid(run_config(exp), 3)
    grid.dead.add(grid.node(1))  # never answers its identify query
    flower = star(exp, grid, tmp_path)
    flower.run()
    assert "starting without clients [1]" in caplog.text
    assert [r["participants"] for r in flower.recorder.records] == [2, 2, 2]


def test_too_few_clients_at_the_start_stop_the_run(tmp_path: Path) -> None:
    exp = experiment(tmp_path, runtime={"connect_timeout_s": 0.2, "min_replies": 3})
    grid = LocalGrid(run_config(exp), 3)
    grid.dead.add(grid.node(0))
    with pytest.raises(QuorumError, match="2 of 3 clients connected"):
        star(exp, grid, tmp_path).run()


def test_a_node_started_for_another_experiment_is_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(tmp_path, runtime={"connect_timeout_s": 0.3})
    grid = LocalGrid(run_config(exp), 3, node_configs={2: {"partition-id": 2, "num-partitions": 5}})
    flower = star(exp, grid, tmp_path)
    flower.run()
    assert "serves partition 2 of 5, but this experiment has 3 clients" in caplog.text
    assert [r["participants"] for r in flower.recorder.records] == [2, 2, 2]
    assert (
        len([m for m in grid.sent_of_type("query") if m.metadata.dst_node_id == grid.node(2)]) == 1
    )


def test_client_evaluation_measures_the_global_model_on_every_client(tmp_path: Path) -> None:
    exp = experiment(tmp_path, runtime={"client_eval": True})
    grid = LocalGrid(run_config(exp), 3)
    flower = star(exp, grid, tmp_path)
    flower.run()
    records = flower.recorder.records
    assert len(grid.sent_of_type("evaluate")) == 9
    assert all(0.0 <= r["client_accuracy"] <= 1.0 for r in records)
    assert records[-1]["client_loss"] < records[0]["client_loss"] * 1.5
    assert records[0]["eval_bytes_down"] == records[0]["bytes_down"]  # the full model, 3 times


def replies_lost_from(grid: LocalGrid, round: int) -> None:
    """From train message `round` on, clients train (and keep their state) but no reply
    comes back: the server died mid-round, as far as the clients can tell."""
    push = grid.push_messages

    def push_then_lose(messages: Any) -> Any:
        messages = list(messages)
        ids = list(push(messages))
        for message, message_id in zip(messages, ids, strict=True):
            is_train = message.metadata.message_type == TRAIN
            if is_train and read_instruction(message.content).round >= round:
                grid._replies.pop(message_id, None)
        return ids

    grid.push_messages = push_then_lose  # type: ignore[method-assign]


@pytest.mark.parametrize(
    "sections",
    [
        {},
        pytest.param({"downlink": TOPK_EF}, marks=pytest.mark.slow),
        pytest.param({"policy": CENSOR, "codec": {}}, marks=pytest.mark.slow),
        {"codec": {}, "vote": VOTE},
    ],
    ids=["topk-ef", "compressed-downlink", "censoring", "majority-vote-previous-mask"],
)
@pytest.mark.usefixtures("two_threads")
def test_a_resumed_run_equals_the_uninterrupted_one_bit_for_bit(
    tmp_path: Path, sections: dict
) -> None:
    train = {"rounds": 4, "local_steps": 4, "lr": 0.1}
    runtime = {"checkpoint_every": 1, "min_replies": 3, "round_timeout_s": 0.5}
    exp = experiment(tmp_path, train=train, runtime=runtime, **sections)
    reference = simulate(exp)
    grid = LocalGrid(run_config(exp), 3)
    replies_lost_from(grid, 3)  # every client trains round 3 and saves it; the server dies
    with pytest.raises(QuorumError, match="round 3"):
        star(exp, grid, tmp_path / "a").run()
    checkpoint = tmp_path / "a" / "run" / "checkpoints" / "round-000002.pt"

    grid = LocalGrid(run_config(exp), 3)  # the same nodes' disks, a new run
    resumed = star(exp, grid, tmp_path / "b", resume=checkpoint)
    model = resumed.run()
    for name, tensor in reference.model.items():
        assert torch.equal(model[name], tensor), name
    records = resumed.recorder.records
    assert [r["round"] for r in records] == [3, 4]
    for got, want in zip(records, reference.records[2:], strict=True):
        for key in ("accuracy", "loss", "train_loss", "bytes_up", "bytes_down", "cum_bytes_up"):
            assert got[key] == want[key], key
        assert got["state_lost"] == 0
    states = [read_instruction(m.content).state_round for m in grid.sent_of_type(TRAIN)]
    assert states == [2, 2, 2, 3, 3, 3]  # each client continued from its own state


@pytest.mark.slow
def test_a_resumed_run_resynchronizes_a_client_whose_state_is_gone(tmp_path: Path) -> None:
    exp = experiment(tmp_path, downlink=TOPK_EF, runtime={"checkpoint_every": 2})
    star(exp, LocalGrid(run_config(exp), 3), tmp_path / "a").run()
    checkpoint = tmp_path / "a" / "run" / "checkpoints" / "round-000002.pt"
    shutil.rmtree(default_state_dir() / state_key(exp) / "client-1")
    grid = LocalGrid(run_config(exp), 3)
    resumed = star(exp, grid, tmp_path / "b", resume=checkpoint)
    resumed.run()
    (record,) = resumed.recorder.records
    assert (record["state_lost"], record["updates_sent"]) == (1, 2)
    uninterrupted = load_records(tmp_path / "a" / "run")
    assert record["bytes_down"] == uninterrupted[2]["bytes_down"]  # deltas, as before


def test_a_round_whose_clients_all_left_stops_the_run_after_a_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(tmp_path, runtime={"round_timeout_s": 0.3})
    grid = LocalGrid(run_config(exp), 3)
    listed = grid.get_node_ids
    grid.get_node_ids = lambda: [] if grid.sent_of_type(TRAIN) else listed()  # type: ignore[method-assign]
    flower = star(exp, grid, tmp_path)
    with pytest.raises(QuorumError, match="round 2: 0 of its 3 sampled clients are connected"):
        flower.run()
    assert "client 0: node 1000 left the federation" in caplog.text
    assert [r["round"] for r in flower.recorder.records] == [1]
    assert (tmp_path / "run" / "checkpoints" / "round-000001.pt").is_file()


def test_a_hostile_vote_from_a_node_is_rejected_counted_and_the_rounds_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = experiment(tmp_path, codec={}, vote=VOTE)
    d = sum(s.numel for s in load_federation(exp).workspace.spec)
    k = support_size(VOTE["density"], d)

    def overvote(reply: Message, context: Context) -> Message:
        honest = pb.Update.FromString(reply.content["update"]["update"].data)
        tensors = {VOTE_TENSOR: index_payload(torch.arange(k + 1), d)}  # one index too many
        if honest.round > 1:
            tensors = {VALUES: values_payload(torch.zeros(k)), **tensors}
        metrics = {"num_examples": 1.0}
        data = encode(Update(honest.sender, honest.round, Kind.MODEL_DELTA, tensors, metrics))
        array = Array(dtype="uint8", shape=(len(data),), stype="thinwire/update", data=data)
        reply.content["update"] = ArrayRecord({"update": array})
        return reply

    grid = LocalGrid(run_config(exp), 3)
    replacing_replies(grid, 1, overvote)
    flower = star(exp, grid, tmp_path)
    model = flower.run()
    assert [r["rejected"] for r in flower.recorder.records] == [1, 1, 1]
    assert f"lists {k + 1} indices, at most K = {k}" in caplog.text
    assert all(bool(torch.isfinite(v).all()) for v in model.values())
