"""One federated client round, timed stage by stage, on the CPU and (when present) on CUDA.

The client trains and encodes on the chosen device; the server decodes and averages on the
CPU, as a GPU client talking to a CPU server does in a real deployment. Stages: downlink
decode on the client, local training, encoding (top-k 1% + error feedback, serialization),
and the server's validate + decode + average. The model is ResNet-20 on CIFAR-10-shaped
data (random images written in CIFAR's binary format to a temporary folder: nothing is
downloaded) or the digits MLP.

    python benchmarks/client_round.py [--model resnet20|mlp] [--steps 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from thinwire.clients import Client
from thinwire.config import Experiment, parse_config
from thinwire.learning import load_federation
from thinwire.metrics import format_bytes
from thinwire.server import Aggregator
from thinwire.wire import decode


def write_fake_cifar(folder: Path, per_batch: int = 512) -> None:
    """Random images in the CIFAR-10 binary layout (1 label byte + 3072 pixel bytes)."""
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, size=(per_batch, 1), dtype=np.uint8)
        pixels = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        (folder / f"{name}.bin").write_bytes(np.hstack([labels, pixels]).tobytes())


def experiment(model: str, device: str, steps: int, root: Path) -> Experiment:
    data = (
        {"dataset": "cifar10", "root": str(root), "clients": 4}
        if model == "resnet20"
        else {"dataset": "digits", "clients": 4}
    )
    return parse_config(
        {
            "name": f"round-{model}",
            "data": data,
            "model": {"kind": model} if model == "resnet20" else {"kind": "mlp", "hidden": [64]},
            "train": {
                "rounds": 1000,
                "local_steps": steps,
                "batch_size": 64,
                "lr": 0.05,
                "optimizer": {"kind": "sgd", "momentum": 0.9},
                "device": device,
            },
            "codec": {
                "scope": "model",
                "select": {"kind": "topk_sampled", "density": 0.01},
                "error_feedback": True,
            },
        }
    )


class Stopwatch:
    """Wall time of a block, with the device synchronized on both ends."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> Stopwatch:
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._start


def measure(model: str, device: str, steps: int, repeats: int, root: Path) -> dict[str, float]:
    client_exp = experiment(model, device, steps, root)
    server_exp = experiment(model, "cpu", steps, root)
    client_side = load_federation(client_exp)
    server_side = load_federation(server_exp)
    dev = client_side.workspace.device
    aggregator = Aggregator(
        experiment=server_exp,
        workspace=server_side.workspace,
        initial=server_side.workspace.tensors(),
    )
    x, y = client_side.client_data(0)
    client = Client(index=0, experiment=client_exp, x=x, y=y, workspace=client_side.workspace)
    rows: list[dict[str, float]] = []
    for round in range(1, repeats + 2):
        downlink = aggregator.broadcast(round, [0])[0]
        with Stopwatch(dev) as down:
            decode(downlink, client.dense.wire_spec)
        with Stopwatch(dev) as train:
            result = client.train_round(downlink, round, delivered=None)
        assert result.data is not None
        with Stopwatch(torch.device("cpu")) as server:
            aggregator.receive(0, result.data)
            aggregator.finish_round()
        rows.append(
            {
                "client_round_s": train.seconds,
                "downlink_decode_s": down.seconds,
                "server_s": server.seconds,
                "update_bytes": len(result.data),
                "downlink_bytes": len(downlink),
            }
        )
    rows = rows[1:]  # the first round pays for warm-up
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    summary["params"] = sum(s.numel for s in client.workspace.spec)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["resnet20", "mlp"], default="resnet20")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_fake_cifar(Path(tmp))
        for device in devices:
            results[device] = measure(args.model, device, args.steps, args.repeats, Path(tmp))
    table = Table(
        title=f"one client round: {args.model}, {args.steps} local steps of 64, "
        "top-1% + EF; server decodes on the CPU"
    )
    for column in (
        "client device",
        "params",
        "client round",
        "vs cpu",
        "downlink decode",
        "server decode+avg",
        "update",
        "downlink",
    ):
        table.add_column(column, justify="right")
    for device, r in results.items():
        table.add_row(
            device,
            f"{r['params']:.0f}",
            f"{r['client_round_s'] * 1e3:.1f} ms",
            f"{results['cpu']['client_round_s'] / r['client_round_s']:.1f}x",
            f"{r['downlink_decode_s'] * 1e3:.1f} ms",
            f"{r['server_s'] * 1e3:.1f} ms",
            format_bytes(r["update_bytes"]),
            format_bytes(r["downlink_bytes"]),
        )
    Console(width=140).print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
