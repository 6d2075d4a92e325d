"""Where one ClientApp train message spends its time, phase by phase, in a fresh process.

Flower starts a fresh `flwr-clientapp` process for every message, so every phase below is
paid per client per round: importing thinwire's ClientApp (torch, Flower, thinwire),
building the federation (data partition and model), reading the client's state from the
node's state folder, applying the downlink, training, encoding the update, and saving the
state again. For comparison the script also times what keeping the same state in Flower's
`context.state` cost before (flattening it into a `RecordDict` and Flower's serialization
of it, which the ClientApp ran in its exit handler under a 5-second force-exit timer).

The model is the digits MLP with one hidden layer of `--hidden` units (140,000: 10.5M
parameters), top-1% with error feedback both ways, as in tests/e2e/test_flower_scale.py.

    python benchmarks/clientapp_message.py [--hidden 140000] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

CHILD = r"""
import json, sys, time
marks = [("start", time.perf_counter())]
def mark(name): marks.append((name, time.perf_counter()))
import torch
mark("import torch")
from thinwire.clients import Client
from thinwire.clients.flower_app import app  # noqa: F401  (what the ClientApp imports)
from thinwire.clients.flower_state import StateStore, experiment_digest
from thinwire.config import parse_config
from thinwire.learning import load_federation
from thinwire.server import Aggregator
mark("import thinwire + Flower")
raw, folder, steps = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
exp = parse_config(raw)
federation = load_federation(exp)
x, y = federation.client_data(0)
client = Client(index=0, experiment=exp, x=x, y=y, workspace=federation.workspace)
mark("build federation + client")
server = Aggregator(experiment=exp, workspace=federation.workspace,
                    initial=federation.workspace.tensors())
first = server.broadcast(1, [0])[0]
store = StateStore(__import__("pathlib").Path(folder), experiment=experiment_digest(exp),
                   partition=0, keep=2)
result = client.train_round(first, 1, delivered=None)
store.save(client.state, 1)
server.receive(0, result.data); server.finish_round()
second = server.broadcast(2, [0])[0]
fresh = Client(index=0, experiment=exp, x=x, y=y, workspace=federation.workspace)
mark("(setup: round 1, not counted)")
fresh.state, _ = store.load(1, fresh.state, federation.workspace.tensors())
mark("load state (mmap + SHA-256)")
start = time.perf_counter()
result = fresh.train_round(second, 2, delivered=True)
mark("train + encode (round 2)")
store.save(fresh.state, 2)
mark("save state (atomic, fsync)")
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from thinwire.statetree import flatten
records = RecordDict({"tensors": ArrayRecord({
    k: Array(dtype="float32" if v.dtype == torch.float32 else "uint8", shape=tuple(v.shape),
             stype="thinwire/tensor", data=v.contiguous().view(torch.uint8).numpy().tobytes())
    for k, v in flatten(fresh.state).items() if isinstance(v, torch.Tensor)})})
contents = {i: o.deflate() for i, o in get_all_nested_objects(records).items()}
mark("before: state into context.state (flatten + deflate)")
size = sum(len(c) for c in contents.values())
print(json.dumps({"marks": marks, "state_bytes": size, "update_bytes": len(result.data)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=140_000)
    parser.add_argument("--steps", type=int, default=5)
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
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(raw), folder, str(args.steps)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    if done.returncode != 0:
        sys.exit(f"the measured process failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    marks = report["marks"]
    table = Table(title=f"one ClientApp train message, MLP [{args.hidden}] on digits")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    for (_, before), (name, after) in zip(marks, marks[1:], strict=False):
        table.add_row(name, f"{after - before:.2f}")
    console = Console()
    console.print(table)
    console.print(
        f"state kept per client: {report['state_bytes'] / 1e6:.1f} MB; "
        f"update sent: {report['update_bytes'] / 1e6:.2f} MB"
    )
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    console.print(f"load average at the end: {' '.join(load)}")


if __name__ == "__main__":
    main()
