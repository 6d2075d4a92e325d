"""thinwire's ClientApp as a SuperNode calls it: one message at a time, state on the node's disk."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from flwr.app import Context, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

from thinwire.clients import Client
from thinwire.config import Experiment, parse_config
from thinwire.learning import evaluate, load_federation, simulation_threads
from thinwire.learning import trainer as trainer_module
from thinwire.runtimes.flower import client_app, partition
from thinwire.runtimes.flower.client_app import app
from thinwire.runtimes.flower.clientapp_executor import executor_task
from thinwire.runtimes.flower.messages import (
    EVALUATE,
    IDENTIFY,
    TRAIN,
    Identity,
    default_state_dir,
    instruction,
    is_state_lost,
    read_evaluation,
    read_identity,
    read_train_reply,
)
from thinwire.runtimes.flower.partition import partition_folder
from thinwire.runtimes.flower.state import StateStore, state_key
from thinwire.server import Aggregator


@pytest.fixture(autouse=True)
def task_identity() -> None:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0


@pytest.fixture
def exp() -> Experiment:
    return parse_config(
        {
            "name": "c",
            "seed": 5,
            "data": {"clients": 3},
            "model": {"kind": "mlp", "hidden": [8]},
            "train": {"local_steps": 3, "device": "cpu"},
            "codec": {"select": {"kind": "topk", "density": 0.1}, "error_feedback": True},
        }
    )


def context(exp: Experiment, **node_config: object) -> Context:
    text = yaml.safe_dump(exp.model_dump(mode="json"))
    return Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 1, "num-partitions": 3, **node_config},
        state=RecordDict(),
        run_config={"experiment": text, "run-dir": "", "resume": ""},
    )


def first_downlink(exp: Experiment, client: int = 1) -> bytes:
    """The server's round-1 message to `client` (the full initial model)."""
    workspace = load_federation(exp).workspace
    server = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    return server.broadcast(1, [client])[client]


def message(content: RecordDict, message_type: str) -> Message:
    sent = Message(content, 7, message_type)
    sent.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return sent


def test_it_tells_the_server_its_partition(exp: Experiment) -> None:
    reply = app(message(RecordDict(), IDENTIFY), context(exp))
    assert read_identity(reply.content) == Identity(1, 3)


def test_a_supernode_without_a_partition_answers_with_how_to_start_it(exp: Experiment) -> None:
    ctx = context(exp)
    del ctx.node_config["partition-id"]
    reply = app(message(RecordDict(), IDENTIFY), ctx)
    assert reply.has_error() and reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert "thinwire client --partition" in reply.error.reason


def test_a_run_config_may_import_only_the_plugins_the_node_allows(exp: Experiment) -> None:
    sent = exp.model_copy(update={"plugins": ["colorsys"]})
    reply = app(message(instruction(first_downlink(sent), 1), TRAIN), context(sent))
    assert reply.has_error()
    assert "plugins[0]" in reply.error.reason and "--allow-plugin colorsys" in reply.error.reason
    allowed = app(
        message(instruction(first_downlink(sent), 1), TRAIN),
        context(sent, **{"allow-plugins": "colorsys"}),
    )
    assert not allowed.has_error()


def test_two_rounds_equal_the_simulators_client_with_state_kept_on_the_nodes_disk(
    exp: Experiment, tmp_path: Path
) -> None:
    federation = load_federation(exp)
    server = Aggregator(
        experiment=exp, workspace=federation.workspace, initial=federation.workspace.tensors()
    )
    x, y = federation.client_data(1)
    reference = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    ctx = context(exp, **{"state-dir": str(tmp_path / "state")})
    delivered = None
    for round in (1, 2):
        downlink = server.broadcast(round, [1])[1]
        order = instruction(downlink, round, delivered, state_round=round - 1)
        reply = app(message(order, TRAIN), ctx)
        got = read_train_reply(reply.content)
        want = reference.train_round(downlink, round, delivered=delivered)
        assert got.update == want.data  # bit for bit, residual restored from the state folder
        assert (got.num_examples, got.train_loss) == (want.num_examples, want.train_loss)
        assert server.receive(1, got.update).accepted
        delivered = server.finish_round().delivered[1]
    saved = StateStore(tmp_path / "state", experiment=state_key(exp), partition=1, keep=1).rounds()
    assert saved == [1, 2]  # the last two rounds
    # context.state holds a small record only: no tensor travels with the context.
    assert not ctx.state.array_records
    assert dict(ctx.state.config_records["thinwire.state"])["round"] == 2


def trained_once(exp: Experiment) -> tuple[Context, StateStore]:
    """A context whose node trained round 1, and the store of its state."""
    ctx = context(exp)
    reply = app(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert not reply.has_error()
    return ctx, StateStore(default_state_dir(), experiment=state_key(exp), partition=1, keep=1)


def second_round(exp: Experiment, state_round: int = 1) -> Message:
    """Client 1's round-2 train message, after a round 1 in which it took part."""
    workspace = load_federation(exp).workspace
    server = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    server.broadcast(1, [1])
    server.finish_round()
    return message(instruction(server.broadcast(2, [1])[1], 2, None, state_round), TRAIN)


def test_a_missing_state_folder_is_answered_with_state_lost(exp: Experiment) -> None:
    ctx, store = trained_once(exp)
    shutil.rmtree(store.folder)
    reply = app(second_round(exp), ctx)
    assert reply.has_error() and is_state_lost(reply.error.reason)
    assert "no client 1's state of round 1" in reply.error.reason


def test_a_truncated_state_is_answered_with_state_lost(exp: Experiment) -> None:
    ctx, store = trained_once(exp)
    tensors = store.folder / "round-000001" / "tensors.pt"
    tensors.write_bytes(tensors.read_bytes()[:100])
    reply = app(second_round(exp), ctx)
    assert reply.has_error() and is_state_lost(reply.error.reason)
    assert "tensors.pt has 100 bytes" in reply.error.reason


def test_a_valid_state_swapped_behind_the_nodes_back_is_answered_with_state_lost(
    exp: Experiment,
) -> None:
    ctx, store = trained_once(exp)
    federation = load_federation(exp)
    x, y = federation.client_data(1)
    client = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    saved, _ = store.load(1, client.state, federation.workspace.tensors())
    store.save(saved._replace(pending=torch.zeros(3, dtype=torch.uint8)), 1)  # intact, but other
    reply = app(second_round(exp), ctx)
    assert reply.has_error() and is_state_lost(reply.error.reason)
    assert "is not the one this SuperNode saved" in reply.error.reason


def test_a_resynchronized_client_starts_afresh_whatever_its_folder_holds(
    exp: Experiment,
) -> None:
    ctx, store = trained_once(exp)
    (store.folder / "round-000001" / "manifest.json").write_text("damaged")
    federation = load_federation(exp)
    x, y = federation.client_data(1)
    fresh = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    downlink = first_downlink(exp)
    reply = app(message(instruction(downlink, 1, None, 0), TRAIN), ctx)
    want = fresh.train_round(downlink, 1, delivered=None)
    assert read_train_reply(reply.content).update == want.data
    assert store.rounds() == [1]


def test_a_supernode_of_another_experiment_refuses_to_train(exp: Experiment) -> None:
    downlink = first_downlink(exp)
    reply = app(message(instruction(downlink, 1), TRAIN), context(exp, **{"num-partitions": 5}))
    assert reply.has_error()
    assert "serves partition 1 of 5, but the experiment has 3 clients" in reply.error.reason


def test_a_malformed_downlink_is_answered_with_a_wire_error(exp: Experiment) -> None:
    reply = app(message(instruction(b"\xff" * 40, 1), TRAIN), context(exp))
    assert reply.has_error() and reply.error.reason.startswith("WireError: ")


def test_it_measures_the_global_model_on_its_own_data(exp: Experiment) -> None:
    reply = app(message(instruction(first_downlink(exp), 1), EVALUATE), context(exp))
    got = read_evaluation(reply.content)
    federation = load_federation(exp)  # the initial model is the one sent
    want = evaluate(federation.workspace.model, *federation.client_data(1))
    assert (got.num_examples, got.accuracy) == (want.examples, want.accuracy)
    assert got.loss == pytest.approx(want.loss)


def test_it_trains_and_evaluates_on_the_simulators_thread_count(
    exp: Experiment, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    def counted(run: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append(torch.get_num_threads())
            return run(*args, **kwargs)

        return call

    monkeypatch.setattr(trainer_module, "train_local", counted(trainer_module.train_local))
    monkeypatch.setattr(client_app, "evaluate_model", counted(client_app.evaluate_model))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a 2-core node's default: the simulator runs on 1 thread here
    try:
        for message_type in (TRAIN, EVALUATE):
            app(message(instruction(first_downlink(exp), 1), message_type), context(exp))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [simulation_threads(exp)] * 2 == [1, 1]


def test_state_kept_for_one_model_is_not_offered_to_another(exp: Experiment) -> None:
    ctx, _ = trained_once(exp)
    bigger = exp.model_copy(update={"model": exp.model.model_copy(update={"hidden": [9]})})
    ctx.run_config["experiment"] = yaml.safe_dump(bigger.model_dump(mode="json"))
    reply = app(second_round(bigger), ctx)
    assert reply.has_error() and is_state_lost(reply.error.reason)
    assert "no client 1's state of round 1" in reply.error.reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_with_device_auto_it_trains_on_the_gpu_and_a_cpu_server_accepts_it(
    exp: Experiment,
) -> None:
    gpu = exp.model_copy(update={"train": exp.train.model_copy(update={"device": "auto"})})
    federation = load_federation(exp)  # the server on the CPU
    server = Aggregator(
        experiment=exp, workspace=federation.workspace, initial=federation.workspace.tensors()
    )
    ctx = context(gpu)
    torch.cuda.reset_peak_memory_stats()
    delivered = None
    for round in (1, 2):  # round 2 restores the residual from the state folder onto the GPU
        downlink = server.broadcast(round, [1])[1]
        reply = app(message(instruction(downlink, round, delivered, round - 1), TRAIN), ctx)
        assert not reply.has_error(), reply.error
        update = read_train_reply(reply.content).update
        assert update is not None and server.receive(1, update).accepted
        delivered = server.finish_round().delivered[1]
    assert torch.cuda.max_memory_allocated() > 0  # it did train on the GPU


def test_a_second_message_reads_the_partition_from_the_nodes_cache(
    exp: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(exp, **{"state-dir": str(tmp_path)})
    first = app(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert not first.has_error()
    assert partition_folder(tmp_path, exp, 1).is_dir()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a ClientApp rebuilt the federation although its cache is intact")

    monkeypatch.setattr(partition, "load_dataset", refuse)
    again = app(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert read_train_reply(again.content).update == read_train_reply(first.content).update


def test_importing_the_clientapp_leaves_out_what_a_message_does_not_need() -> None:
    # Flower imports the app module in a fresh process for every message, which builds a model.
    unneeded = [
        "sympy",  # torch imports it when a meta-device model is materialized by `to_empty`
        "scipy.special",  # SIDCo's gamma tail, imported when a gamma fit runs
        "sklearn",
        "matplotlib",
        "networkx",
        "opacus",  # DP-SGD, imported when a private run trains
        "torch._dynamo",
        "thinwire.cli",
        "thinwire.metrics.plots",
        "thinwire.runtimes.simulation",
        "thinwire.topologies",
        "thinwire.runtimes.flower.strategy",
    ]
    probe = (
        "import sys, json, thinwire.runtimes.flower.client_app; "
        "from thinwire.config import MLP; from thinwire.learning import build_model; "
        "build_model(MLP(hidden=[64]), (64,), 10, seed=None); "
        "build_model(MLP(), (64,), 10, seed=0); "
        f"print(json.dumps([m for m in {unneeded!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


# ----------------------------------------------------------------- under a ClientAppExecutor


@pytest.fixture(autouse=True)
def nothing_kept() -> Iterator[None]:
    yield
    client_app._kept = None  # a kept client must not reach the next test


def under_executor(sent: Message, ctx: Context) -> Message:
    """`app` as `ClientAppExecutor.run_task` calls it: the reply, then the deferred work."""
    with executor_task() as deferred:
        reply = app(sent, ctx)
    for work in deferred:
        work()
    return reply


def kept_run(exp: Experiment, folder: Path, rounds: int) -> tuple[Context, StateStore, Client]:
    """A node that trained `rounds` rounds under the executor, checked against the simulator."""
    federation = load_federation(exp)
    server = Aggregator(
        experiment=exp, workspace=federation.workspace, initial=federation.workspace.tensors()
    )
    x, y = federation.client_data(1)
    reference = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    ctx = context(exp, **{"state-dir": str(folder)})
    delivered = None
    for round in range(1, rounds + 1):
        downlink = server.broadcast(round, [1])[1]
        order = instruction(downlink, round, delivered, state_round=round - 1)
        got = read_train_reply(under_executor(message(order, TRAIN), ctx).content)
        want = reference.train_round(downlink, round, delivered=delivered)
        assert got.update == want.data  # bit for bit
        assert server.receive(1, got.update).accepted
        delivered = server.finish_round().delivered[1]
    store = StateStore(folder, experiment=state_key(exp), partition=1, keep=2)
    return ctx, store, reference


def test_under_the_executor_the_client_is_kept_and_rounds_equal_the_simulators(
    exp: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"load_partition": 0, "load": 0}

    def counted(name: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return run(*args, **kwargs)

        return call

    monkeypatch.setattr(
        client_app, "load_partition", counted("load_partition", client_app.load_partition)
    )
    monkeypatch.setattr(StateStore, "load", counted("load", StateStore.load))
    ctx, store, _ = kept_run(exp, tmp_path, 3)
    assert calls == {"load_partition": 1, "load": 0}  # built once, its state never read back
    assert store.rounds() == [2, 3]  # and still saved every round
    assert dict(ctx.state.config_records["thinwire.state"])["round"] == 3


def test_under_the_executor_the_state_is_saved_after_the_reply(
    exp: Experiment, tmp_path: Path
) -> None:
    ctx = context(exp, **{"state-dir": str(tmp_path)})
    store = StateStore(tmp_path, experiment=state_key(exp), partition=1, keep=2)
    with executor_task() as deferred:
        reply = app(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert not reply.has_error()
    assert store.rounds() == [] and "thinwire.state" not in ctx.state.config_records
    (save,) = deferred
    save()  # what the executor runs once the reply is pushed, before the context
    assert store.rounds() == [1]
    assert dict(ctx.state.config_records["thinwire.state"])["round"] == 1


def test_under_the_executor_a_mangled_folder_is_still_answered_with_state_lost(
    exp: Experiment, tmp_path: Path
) -> None:
    ctx, store, _ = kept_run(exp, tmp_path, 1)
    tensors = store.folder / "round-000001" / "tensors.pt"
    tensors.write_bytes(tensors.read_bytes()[:100])
    reply = under_executor(second_round(exp), ctx)
    assert reply.has_error() and "tensors.pt has 100 bytes" in reply.error.reason
    ctx, store, _ = kept_run(exp, tmp_path / "deleted", 1)
    shutil.rmtree(store.folder)
    reply = under_executor(second_round(exp), ctx)
    assert reply.has_error() and "no client 1's state of round 1" in reply.error.reason


def test_under_the_executor_an_older_round_is_read_back_from_the_folder(
    exp: Experiment, tmp_path: Path
) -> None:
    # A server resumed from round 1's checkpoint asks a client that trained round 2.
    ctx, store, _ = kept_run(exp, tmp_path, 2)
    federation = load_federation(exp)
    server = Aggregator(
        experiment=exp, workspace=federation.workspace, initial=federation.workspace.tensors()
    )
    x, y = federation.client_data(1)
    reference = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    first = server.broadcast(1, [1])[1]
    result = reference.train_round(first, 1, delivered=None)
    server.receive(1, result.data)
    delivered = server.finish_round().delivered[1]
    downlink = server.broadcast(2, [1])[1]
    order = instruction(downlink, 2, delivered, state_round=1)
    got = read_train_reply(under_executor(message(order, TRAIN), ctx).content)
    assert got.update == reference.train_round(downlink, 2, delivered=delivered).data


def test_under_the_executor_a_resynchronized_client_starts_afresh(
    exp: Experiment, tmp_path: Path
) -> None:
    ctx, _, _ = kept_run(exp, tmp_path, 2)
    federation = load_federation(exp)
    x, y = federation.client_data(1)
    fresh = Client(index=1, experiment=exp, x=x, y=y, workspace=federation.workspace)
    downlink = first_downlink(exp)  # the full model, as a re-synchronization (or a new run) sends
    reply = under_executor(message(instruction(downlink, 1, None, 0), TRAIN), ctx)
    want = fresh.train_round(downlink, 1, delivered=None)
    assert read_train_reply(reply.content).update == want.data  # no residual carried over


def test_under_the_executor_a_save_that_fails_after_the_reply_is_reported_next_round(
    exp: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object, **kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(StateStore, "save", full)
    ctx = context(exp, **{"state-dir": str(tmp_path)})
    reply = under_executor(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert not reply.has_error()  # the update had gone out before the save failed
    monkeypatch.undo()
    lost = under_executor(second_round(exp), ctx)
    assert lost.has_error() and is_state_lost(lost.error.reason)  # never a silent reset


def test_outside_the_executor_nothing_is_kept(exp: Experiment, tmp_path: Path) -> None:
    ctx = context(exp, **{"state-dir": str(tmp_path)})
    app(message(instruction(first_downlink(exp), 1), TRAIN), ctx)
    assert client_app._kept is None  # a fresh flwr-clientapp process ends with its message
