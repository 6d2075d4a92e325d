"""A hostile client in a real Flower run: its updates are refused and counted, the run ends.

examples/flower.yaml (a top-1% server) on Flower's own processes, with thinwire's ClientApp
behind a mod that replaces partition 1's update each round with one of issue 11's attacks:
a QSGD-form update, a sign-form update, and a top-k update of 1e30 values. Before the
receive path checked forms, the first made `finish_round` raise and ended the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from thinwire.metrics import load_records

from .flower_cluster import ROOT, Cluster, free_port, start_local_federation, write_app_with_client

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

RUN_TIMEOUT_S = 240

HOSTILE_CLIENT = '''\
"""Test-only ClientApp: partition 1 sends one of issue 11's hostile updates each round."""

from flwr.app import Array, ArrayRecord
from flwr.clientapp import ClientApp
from hostile_updates import hostile_bytes

from thinwire.runtimes.flower import client_app
from thinwire.wire import TensorSpec
from thinwire.wire import update_pb2 as pb

ATTACKS = {1: "qsgd_to_topk", 2: "sign_to_topk", 3: "topk_1e30"}


def hostile_update(message, context, call_next):
    reply = call_next(message, context)
    if context.node_config["partition-id"] != 1 or "update" not in reply.content:
        return reply
    honest = pb.Update.FromString(reply.content["update"]["update"].data)
    spec = [TensorSpec(t.name, tuple(t.shape)) for t in honest.tensors]
    data = hostile_bytes(ATTACKS[honest.round], spec, 1, honest.round)
    array = Array(dtype="uint8", shape=(len(data),), stype="thinwire/update", data=data)
    reply.content["update"] = ArrayRecord({"update": array})
    return reply


app = ClientApp()
app.query()(client_app.identify)
app.train(mods=[hostile_update])(client_app.train)
app.evaluate()(client_app.evaluate)
'''


def test_a_hostile_client_is_refused_every_round_and_the_run_finishes(tmp_path: Path) -> None:
    output = tmp_path / "runs"
    app = tmp_path / "app"
    cluster = Cluster(tmp_path)
    port = free_port()
    overrides = [f"output={output}", "runtime.round_timeout_s=60"]
    write_app_with_client(
        cluster,
        app,
        overrides,
        module="hostile_client",
        source=HOSTILE_CLIENT,
        extra=(ROOT / "tests" / "hostile_updates.py",),
    )
    try:
        start_local_federation(cluster, port)
        flwr = cluster.start("flwr-run", ["flwr", "run", str(app), "local", "--stream"])
        flwr.wait(timeout=RUN_TIMEOUT_S)
    finally:
        cluster.stop()
    log = cluster.log("flwr-run")
    assert flwr.returncode == 0, log
    (run_dir,) = sorted(output.glob("flower-star-*"))
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 3
    records = load_records(run_dir)
    assert [r["rejected"] for r in records] == [1, 1, 1]
    assert [r["updates_sent"] for r in records] == [3, 3, 3]
    assert "qsgd(s=4, bucket=0) values, but this receiver's codec sends sparse" in log
    assert "sign(bucket=0) values, but this receiver's codec sends sparse" in log
    assert "above this receiver's bound" in log
    checkpoint = torch.load(run_dir / "checkpoints" / "round-000003.pt", weights_only=True)
    assert all(bool(torch.isfinite(v).all()) for v in checkpoint["state"]["model"].values())
