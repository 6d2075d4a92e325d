"""Where one ClientApp train message spends its time, phase by phase, in a fresh process.

Flower starts a fresh `flwr-clientapp` process for every message, so every phase below is
paid per client per round: importing thinwire's ClientApp module (torch, Flower, thinwire),
building the client (its data partition and the model), reading the client's state from the
node's state folder, applying the downlink, training, encoding the update, and saving the
state again. The last column is the process's peak resident set (VmHWM) at the end of each
phase, against the model's own size (parameters x 4 bytes). Two ways of building the client
are timed, in alternating fresh processes so that both see the same load:

- `rebuilt`: what every message did before the node-local partition cache: load the data
  set, partition it over every client and build the seeded model (`load_federation`), paying
  for the modules that path imported then: `scipy.special` with the ClientApp module, and
  sympy (`torch.fx.experimental.symbolic_shapes`), which `Module.to_empty` imported the
  first time it materialized a meta-device model;
- `cached`: what the ClientApp does now: its partition from the node's cache
  (`thinwire.runtimes.flower.partition`), then a blank model (no initial weights drawn: the
  downlink overwrites them).

A third way runs the real ClientApp the way `thinwire client` does: one long-lived process
(under `thinwire.runtimes.flower.clientapp_executor.executor_task`) trains round 1 and then
round 2 with the client and its state kept in memory, saving the state after the reply.

A separate process first trains round 1 and writes the client's state, the cache and the
round-2 downlink, so none of that warms the measured processes. For comparison the script
also times what keeping the same state in Flower's `context.state` cost before (flattening it
into a `RecordDict` and Flower's serialization of it, which the ClientApp ran in its exit
handler under a 5-second force-exit timer).

The model is the digits MLP with one hidden layer of `--hidden` units (140,000: 10.5M
parameters), top-1% with error feedback both ways, as in tests/e2e/test_flower_scale.py.

    python benchmarks/clientapp_message.py [--hidden 140000] [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

SETUP = r"""
import json, sys
from pathlib import Path
from thinwire.clients import Client
from thinwire.runtimes.flower.partition import load_partition
from thinwire.runtimes.flower.state import StateStore, state_key
from thinwire.config import parse_config
from thinwire.learning import load_federation
from thinwire.server import Aggregator
raw, folder = json.loads(sys.argv[1]), Path(sys.argv[2])
exp = parse_config(raw)
federation = load_federation(exp)
x, y = federation.client_data(0)
client = Client(index=0, experiment=exp, x=x, y=y, workspace=federation.workspace)
server = Aggregator(experiment=exp, workspace=federation.workspace,
                    initial=federation.workspace.tensors())
first = server.broadcast(1, [0])[0]
(folder / "downlink-1.bin").write_bytes(first)
result = client.train_round(first, 1, delivered=None)
StateStore(folder, experiment=state_key(exp), partition=0, keep=2).save(client.state, 1)
server.receive(0, result.data); server.finish_round()
(folder / "downlink-2.bin").write_bytes(server.broadcast(2, [0])[0])
load_partition(folder, exp, 0)
"""

CHILD = r"""
import json, sys, time
def hwm():  # the process's peak resident set so far, KiB (never decreases)
    status = open("/proc/self/status").read().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
marks = [("start", time.perf_counter(), hwm())]
def mark(name): marks.append((name, time.perf_counter(), hwm()))
raw, folder, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
import torch
mark("import torch")
if mode == "rebuilt":
    import scipy.special  # noqa: F401  (the ClientApp module imported it before)
from thinwire.runtimes.flower.client_app import app  # noqa: F401  (what Flower imports)
mark("import the ClientApp module (thinwire + Flower)")
from pathlib import Path
from thinwire.clients import Client
from thinwire.runtimes.flower.partition import load_partition
from thinwire.runtimes.flower.state import StateStore, state_key
from thinwire.config import parse_config
from thinwire.learning import Workspace, build_model, load_federation, resolve_device
exp = parse_config(raw)
if mode == "rebuilt":
    import torch.fx.experimental.symbolic_shapes  # noqa: F401  (sympy, via Module.to_empty)
    federation = load_federation(exp)
    x, y = federation.client_data(0)
    workspace = federation.workspace
else:
    data = load_partition(Path(folder), exp, 0)
    device = resolve_device(exp.train.device)
    model = build_model(exp.model, data.input_shape, data.num_classes, seed=None,
                        device=device)
    x, y, workspace = data.x.to(device), data.y.to(device), Workspace(model, device)
client = Client(index=0, experiment=exp, x=x, y=y, workspace=workspace)
mark("build the client (data + model)")
store = StateStore(Path(folder), experiment=state_key(exp), partition=0, keep=2)
client.state, _ = store.load(1, client.state, workspace.tensors())
mark("load state (mmap + SHA-256)")
downlink = (Path(folder) / "downlink-2.bin").read_bytes()
result = client.train_round(downlink, 2, delivered=True)
mark("train + encode (round 2)")
store.save(client.state, 2)
mark("save state (atomic, fsync)")
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from thinwire.statetree import flatten
records = RecordDict({"tensors": ArrayRecord({
    k: Array(dtype="float32" if v.dtype == torch.float32 else "uint8", shape=tuple(v.shape),
             stype="thinwire/tensor", data=v.contiguous().view(torch.uint8).numpy().tobytes())
    for k, v in flatten(client.state).items() if isinstance(v, torch.Tensor)})})
contents = {i: o.deflate() for i, o in get_all_nested_objects(records).items()}
mark("before the state folder: state into context.state")
size = sum(len(c) for c in contents.values())
heavy = [m for m in ("sympy", "scipy.special", "torch._dynamo") if m in sys.modules]
model_bytes = 4 * sum(v.numel() for v in workspace.tensors().values())
print(json.dumps({"marks": marks, "state_bytes": size, "update_bytes": len(result.data),
                  "heavy": heavy, "model_bytes": model_bytes}))
"""

KEPT = r"""
import json, sys, time, uuid
def hwm():
    status = open("/proc/self/status").read().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
marks = [("start", time.perf_counter(), hwm())]
def mark(name): marks.append((name, time.perf_counter(), hwm()))
raw, folder = json.loads(sys.argv[1]), sys.argv[2]
from pathlib import Path
import yaml
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from thinwire.runtimes.flower.client_app import app
from thinwire.runtimes.flower.clientapp_executor import executor_task
from thinwire.runtimes.flower.messages import TRAIN, instruction, read_train_reply
mark("start the executor (imports; once per node)")
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0
ctx = Context(run_id=1, node_id=1, state=RecordDict(), run_config={
    "experiment": yaml.safe_dump(raw), "run-dir": "", "resume": ""},
    node_config={"partition-id": 0, "num-partitions": 3, "state-dir": folder})
def send(round, state_round, delivered):
    downlink = (Path(folder) / f"downlink-{round}.bin").read_bytes()
    sent = Message(instruction(downlink, round, delivered, state_round), 1, TRAIN)
    sent.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    with executor_task() as deferred:
        reply = app(sent, ctx)
    assert not reply.has_error(), reply.error
    return read_train_reply(reply.content), deferred
_, deferred = send(1, 0, None)
for work in deferred:
    work()
mark("round 1 (build the client, train, save; once per run)")
got, deferred = send(2, 1, True)
mark("round 2: kept client and state, train + encode (the reply)")
for work in deferred:
    work()
mark("round 2: save state, after the reply")
print(json.dumps({"marks": marks, "update_bytes": len(got.update or b"")}))
"""

MODES = ("rebuilt", "cached")


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if done.returncode != 0:
        sys.exit(f"a measured process failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=140_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    topk = {"scope": "model", "select": {"kind": "topk", "density": 0.01}, "error_feedback": True}
    raw = {
        "name": "clientapp-message",
        "data": {"dataset": "digits", "clients": 3, "partition": {"kind": "dirichlet"}},
        "model": {"kind": "mlp", "hidden": [args.hidden]},
        "train": {
            "local_steps": args.steps,
            "device": "cpu",
            "optimizer": {"kind": "sgd", "momentum": 0.9},
        },
        "codec": topk,
        "downlink": topk,
    }
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    phases: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    peaks: dict[str, list[float]] = {}  # the cached mode's peak RSS at each phase's end, KiB
    report: dict[str, int] = {}
    kept: dict[str, list[tuple[float, float]]] = {}  # phase: (seconds, peak KiB) per process
    with tempfile.TemporaryDirectory() as folder:
        _run(SETUP, json.dumps(raw), folder)
        for _ in range(args.repeats):
            for mode in MODES:  # alternating, so both see the same load
                report = json.loads(_run(CHILD, json.dumps(raw), folder, mode).splitlines()[-1])
                marks = report["marks"]
                for (_, before, _), (name, after, peak) in zip(marks, marks[1:], strict=False):
                    phases[mode].setdefault(name, []).append(after - before)
                    if mode == "cached":
                        peaks.setdefault(name, []).append(peak)
            with tempfile.TemporaryDirectory() as node:  # a node of its own: no state kept yet
                for name in ("downlink-1.bin", "downlink-2.bin"):
                    (Path(node) / name).write_bytes((Path(folder) / name).read_bytes())
                marks = json.loads(_run(KEPT, json.dumps(raw), node).splitlines()[-1])["marks"]
            for (_, before, _), (name, after, peak) in zip(marks, marks[1:], strict=False):
                kept.setdefault(name, []).append((after - before, peak))
    table = Table(
        title=f"one ClientApp train message, MLP [{args.hidden}] on digits "
        f"(median of {args.repeats} fresh processes each)"
    )
    table.add_column("phase")
    for mode in MODES:
        table.add_column(f"{mode} (s)", justify="right")
    table.add_column("cached: peak RSS so far (x model)", justify="right")
    model_kib = report["model_bytes"] / 1024
    for name in phases["cached"]:
        peak = statistics.median(peaks[name])
        table.add_row(
            name,
            *(f"{statistics.median(phases[m][name]):.2f}" for m in MODES),
            f"{peak / 2**10:.0f} MiB ({peak / model_kib:.1f}x)",
        )
    message = [
        sum(statistics.median(v) for k, v in phases[m].items() if not k.startswith("before"))
        for m in MODES
    ]
    table.add_row("message total", *(f"{t:.2f}" for t in message))
    console = Console()
    console.print(table)
    under = Table(
        title="the same client under the ClientAppExecutor (`thinwire client`): one long-lived "
        f"process, the real ClientApp (median of {args.repeats})"
    )
    under.add_column("phase")
    under.add_column("kept (s)", justify="right")
    under.add_column("peak RSS so far (x model)", justify="right")
    for name, values in kept.items():
        peak = statistics.median(p for _, p in values)
        under.add_row(
            name,
            f"{statistics.median(t for t, _ in values):.2f}",
            f"{peak / 2**10:.0f} MiB ({peak / model_kib:.1f}x)",
        )
    console.print(under)
    console.print(f"heavy modules the last measured process imported: {report['heavy'] or 'none'}")
    console.print(
        f"state kept per client: {report['state_bytes'] / 1e6:.1f} MB; "
        f"update sent: {report['update_bytes'] / 1e6:.2f} MB"
    )
    end = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    console.print(f"load average at the start: {' '.join(load)}; at the end: {' '.join(end)}")


if __name__ == "__main__":
    main()
