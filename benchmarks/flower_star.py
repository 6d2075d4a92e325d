"""Rounds per minute of the star on real Flower 1.42 processes: Flower's FedAvg vs thinwire.

Three clients train an MLP on digits (1M or 10M parameters, 2 local steps) for a few rounds:

- `fedavg`: Flower's own FedAvg strategy (`Strategy.start`), dense fp32 arrays both ways,
  with a ClientApp that trains exactly as thinwire's clients do;
- `topk-up`: thinwire, top-1% updates with error feedback up, the dense model down;
- `topk-both`: thinwire, top-1% with error feedback both ways (the downlink codec sends
  compressed model deltas; round 1 still sends every client the full model).

thinwire's clients are `thinwire client` SuperNodes, which run every message in one
long-lived process (`thinwire.runtimes.flower.clientapp_executor`). The schemes
`topk-up-fresh` and `topk-both-fresh` run the same experiments with `thinwire client
--fresh-process`: a fresh `flwr-clientapp` process per message, as Flower's FedAvg baseline
runs (`flower-supernode` with its default isolation).

Each runs on loopback, then (as root, where `ip netns` and `tc` work) with every client in
its own network namespace behind a veth pair shaped to 20 Mbit/s each way by `tc tbf`.
Per-round times are the ServerApp's own (round start to aggregate); "wire MB/round" is
Flower's count of the bytes its SuperLink moved (`flwr ls`), headers included.

    python benchmarks/flower_star.py                     # the full table (about 15 min)
    python benchmarks/flower_star.py --sizes 1M --no-shaped --rounds 3
    python benchmarks/flower_star.py --sizes 10M --repeats 3   # medians of interleaved passes
    python benchmarks/flower_star.py --sizes 10M --schemes fedavg topk-both topk-both-fresh
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from thinwire.config import Experiment, parse_config
from thinwire.runtimes.flower.deploy import (
    SERVER_APP,
    flower_environment,
    superlink_command,
    supernode_command,
    write_app,
    write_connection,
)

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 3
SIZES = {"1M": 962, "10M": 3125}  # hidden width h of an MLP [h, h] on 8x8 digits
RATE = "20mbit"
RUN_TIMEOUT_S = 1200

FEDAVG_SERVER = '''\
"""Flower's FedAvg over dense arrays, timing each round (the benchmark's baseline)."""

import json
import time
from pathlib import Path

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from thinwire.learning import load_federation
from thinwire.runtimes.flower.messages import read_run_config

app = ServerApp()


class TimedFedAvg(FedAvg):
    def __init__(self, out: Path, **kwargs):
        super().__init__(**kwargs)
        self.out, self.times, self.started = out, [], 0.0

    def configure_train(self, server_round, arrays, config, grid):
        self.started = time.perf_counter()
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        result = super().aggregate_train(server_round, replies)
        self.times.append(time.perf_counter() - self.started)
        self.out.write_text(json.dumps(self.times))
        return result


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = read_run_config(context.run_config)
    experiment = settings.experiment
    model = load_federation(experiment).workspace.model
    out = Path(settings.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    strategy = TimedFedAvg(
        out / "round_times.json",
        fraction_evaluate=0.0,
        min_train_nodes=3,
        min_available_nodes=3,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=experiment.train.rounds,
    )
'''

FEDAVG_CLIENT = '''\
"""A dense ClientApp that trains exactly as thinwire's Client does (the baseline)."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from thinwire.seeding import train_seed
from thinwire.learning import learning_rate, load_federation, local_steps_for, train_local
from thinwire.runtimes.flower.messages import node_identity, read_run_config

app = ClientApp()


@app.train()
def train(message: Message, context: Context) -> Message:
    experiment = read_run_config(context.run_config).experiment
    partition = node_identity(context.node_config).partition
    round = int(message.content["config"]["server-round"])
    federation = load_federation(experiment)
    model = federation.workspace.model
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    x, y = federation.client_data(partition)
    train_local(
        model,
        x,
        y,
        steps=local_steps_for(experiment.train, int(x.shape[0])),
        batch_size=experiment.train.batch_size,
        lr=learning_rate(experiment.train, round),
        optimizer=experiment.train.optimizer,
        generator=torch.Generator().manual_seed(train_seed(experiment.seed, partition, round)),
    )
    content = RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "metrics": MetricRecord({"num-examples": int(x.shape[0])}),
        }
    )
    return Message(content, reply_to=message)
'''


def experiment(size: str, scheme: str, rounds: int, output: Path) -> Experiment:
    hidden = SIZES[size]
    topk = {"scope": "model", "select": {"kind": "topk", "density": 0.01}, "error_feedback": True}
    raw: dict[str, Any] = {
        "name": f"bench-{scheme}-{size}",
        "seed": 0,
        "data": {"dataset": "digits", "clients": CLIENTS},
        "model": {"kind": "mlp", "hidden": [hidden, hidden]},
        "train": {
            "rounds": rounds,
            "local_steps": 2,
            "lr": 0.01,
            "eval_every": rounds,
            "device": "cpu",
        },
        "runtime": {"kind": "flower", "insecure": True, "round_timeout_s": 600},
        "output": str(output),
    }
    if scheme != "fedavg":
        raw["codec"] = topk
    if scheme.startswith("topk-both"):
        raw["downlink"] = topk
    return parse_config(raw)


def thinwire_client(superlink: str, partition: int, state_dir: Path, scheme: str) -> list[str]:
    """`thinwire client` for one SuperNode; `-fresh` schemes start a process per message."""
    command = ["thinwire", "client", "--superlink", superlink, "--insecure"]
    command += ["--partition", str(partition), "--num-partitions", str(CLIENTS)]
    command += ["--port", str(9094 + partition), "--state-dir", str(state_dir)]
    return command + (["--fresh-process"] if scheme.endswith("-fresh") else [])


def parameters(size: str) -> int:
    h = SIZES[size]
    return 64 * h + h + h * h + h + h * 10 + 10


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def console_scripts(folder: Path) -> Path:
    # Flower's daemons start their app processes by name; these run under this interpreter,
    # so a development checkout's thinwire is the one imported.
    folder.mkdir(parents=True, exist_ok=True)
    for distribution in ("flwr", "thinwire"):
        for entry in metadata.distribution(distribution).entry_points:
            if entry.group == "console_scripts":
                module, _, attribute = entry.value.partition(":")
                path = folder / entry.name
                path.write_text(
                    f"#!{sys.executable}\nimport sys\nfrom {module} import {attribute}\n"
                    f"sys.exit({attribute}())\n"
                )
                path.chmod(0o755)
    return folder


class Processes:
    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append(process)
        return process

    def stop(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def shaped_namespaces(count: int) -> Iterator[list[tuple[str, str, str]]]:
    """`count` network namespaces, each behind a veth shaped to RATE both ways.

    Yields (namespace, host-side address, namespace-side address) per client.
    """
    made: list[tuple[str, str]] = []

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    try:
        links = []
        for i in range(count):
            ns, host, peer = f"twbench{i}", f"twb{i}h", f"twb{i}c"
            ip("netns", "add", ns)
            made.append((ns, host))
            ip("link", "add", host, "type", "veth", "peer", "name", peer)
            ip("link", "set", peer, "netns", ns)
            ip("addr", "add", f"10.78.{i}.1/24", "dev", host)
            ip("link", "set", host, "up")
            ip("netns", "exec", ns, "ip", "addr", "add", f"10.78.{i}.2/24", "dev", peer)
            ip("netns", "exec", ns, "ip", "link", "set", peer, "up")
            ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            tbf = ["root", "tbf", "rate", RATE, "burst", "32kbit", "latency", "400ms"]
            subprocess.run(["tc", "qdisc", "add", "dev", host, *tbf], check=True)
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", peer, *tbf], check=True
            )
            links.append((ns, f"10.78.{i}.1", f"10.78.{i}.2"))
        yield links
    finally:
        for ns, host in made:
            subprocess.run(["ip", "link", "del", host], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.3)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except OSError:
        return False


def flwr_json(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        ["flwr", *args, "--format", "json"], env=env, capture_output=True, text=True
    )
    return json.loads(done.stdout)


# --------------------------------------------------------------------------- one run


def run_once(
    size: str, scheme: str, rounds: int, shaped: bool, work: Path, repeat: int
) -> dict[str, Any]:
    folder = work / f"{scheme}-{size}-{'shaped' if shaped else 'loopback'}-{repeat}"
    (folder / "logs").mkdir(parents=True)
    env = flower_environment(
        {
            **os.environ,
            "PATH": f"{console_scripts(work / 'bin')}{os.pathsep}{os.environ['PATH']}",
            "FLWR_HOME": str(folder / "flwr_home"),
        }
    )
    port = free_port()
    write_connection(Path(env["FLWR_HOME"]), address=f"127.0.0.1:{port}", insecure=True)
    exp = experiment(size, scheme, rounds, folder / "runs")
    processes = Processes(folder / "logs", env)
    with contextlib.ExitStack() as stack:
        stack.callback(processes.stop)
        processes.start("superlink", superlink_command(host="0.0.0.0", port=port))
        wait_for(lambda: healthy(port), 60, "the SuperLink did not start")
        links = stack.enter_context(shaped_namespaces(CLIENTS)) if shaped else None
        for i in range(CLIENTS):
            address = f"{links[i][1]}:{port}" if links else f"127.0.0.1:{port}"
            if scheme == "fedavg":  # Flower's own SuperNode: a fresh process per message
                command = supernode_command(
                    superlink=address, partition=i, partitions=CLIENTS, port=9094 + i, insecure=True
                )
            else:
                command = thinwire_client(address, i, folder / f"state-{i}", scheme)
            if links:
                command = ["ip", "netns", "exec", links[i][0], *command]
            processes.start(f"supernode-{i}", command)

        def online() -> bool:
            nodes = flwr_json(env, "supernode", "ls").get("nodes", [])
            return sum(n["status"] == "online" for n in nodes) == CLIENTS

        wait_for(online, 120, "the SuperNodes did not connect")
        app = folder / "app"
        run_dir = folder / "runs" / "run"
        if scheme == "fedavg":
            pyproject = write_app(app, experiment=exp, run_dir=str(run_dir))
            text = pyproject.read_text().replace(SERVER_APP, "fedavg_server:app")
            pyproject.write_text(
                text.replace("thinwire.runtimes.flower.client_app:app", "fedavg_client:app")
            )
            (app / "fedavg_server.py").write_text(FEDAVG_SERVER)
            (app / "fedavg_client.py").write_text(FEDAVG_CLIENT)
            command = ["flwr", "run", str(app), "thinwire", "--stream"]
        else:
            config = folder / "experiment.yaml"
            config.write_text(yaml.safe_dump(exp.model_dump(mode="json")))
            command = ["thinwire", "server", str(config), "--superlink", f"127.0.0.1:{port}"]
        start = time.perf_counter()
        with (folder / "logs" / "submit.log").open("wb") as log:
            subprocess.run(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=RUN_TIMEOUT_S,
                check=True,
            )
        total = time.perf_counter() - start
        if scheme == "fedavg":
            times = json.loads((run_dir / "round_times.json").read_text())
        else:
            (records_dir,) = (folder / "runs").glob("bench-*")
            lines = (records_dir / "metrics.jsonl").read_text().splitlines()
            times = [json.loads(line)["wall_s"] for line in lines]
        runs = flwr_json(env, "ls")["runs"]
        traffic = runs[0]["network-traffic"]
    if len(times) != rounds:
        raise RuntimeError(f"{folder.name}: {len(times)} of {rounds} rounds finished")
    later = times[1:] or times
    return {
        "size": size,
        "scheme": scheme,
        "network": f"{RATE} per client" if shaped else "loopback",
        "round_1_s": times[0],
        "round_s": sum(later) / len(later),
        "rounds_per_min": 60 * len(later) / sum(later),
        "wire_mb_per_round": traffic["total-bytes"] / rounds / 1e6,
        "submit_to_end_s": total,
        "times": times,
        "load": os.getloadavg()[0],
    }


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scheme's row over its passes: the median of their later-round times."""
    row = dict(runs[0])
    row["round_s"] = statistics.median(r["round_s"] for r in runs)
    row["round_1_s"] = statistics.median(r["round_1_s"] for r in runs)
    row["rounds_per_min"] = 60 / row["round_s"]
    row["passes"] = runs
    return row


def shaping_works() -> str | None:
    """None if namespaces and tbf can be set up here, else why not."""
    try:
        with shaped_namespaces(1):
            return None
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"{' '.join(getattr(exc, 'cmd', []) or [])}: {detail}".strip()


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "params",
        "network",
        "scheme",
        "round 1 s",
        "round s (2..)",
        "rounds/min",
        "wire MB/round",
        "vs fedavg",
    ]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in rows:
        base = next(
            (
                r
                for r in rows
                if (r["size"], r["network"], r["scheme"]) == (row["size"], row["network"], "fedavg")
            ),
            None,
        )
        speedup = f"{base['round_s'] / row['round_s']:.2f}x" if base else "-"
        lines.append(
            " | ".join(
                [
                    row["size"],
                    row["network"],
                    row["scheme"],
                    f"{row['round_1_s']:.2f}",
                    f"{row['round_s']:.2f}",
                    f"{row['rounds_per_min']:.1f}",
                    f"{row['wire_mb_per_round']:.2f}",
                    speedup,
                ]
            )
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument(
        "--schemes",
        nargs="+",
        default=["fedavg", "topk-up", "topk-both"],
        choices=["fedavg", "topk-up", "topk-both", "topk-up-fresh", "topk-both-fresh"],
    )
    parser.add_argument("--shaped", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="passes over the schemes, interleaved; each row is the median pass",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    networks = [False]
    if args.shaped:
        reason = shaping_works()
        if reason is None:
            networks.append(True)
        else:
            print(f"shaped links unavailable here, loopback only: {reason}")
    rows: list[dict[str, Any]] = []
    work = args.out / "flower_star"  # logs and run folders of every run, kept for inspection
    shutil.rmtree(work, ignore_errors=True)
    for shaped in networks:
        for size in args.sizes:
            passes: dict[str, list[dict[str, Any]]] = {scheme: [] for scheme in args.schemes}
            for repeat in range(args.repeats):  # the schemes interleaved: load drifts evenly
                for scheme in args.schemes:
                    network = "shaped" if shaped else "loopback"
                    print(f"running {scheme} {size} {network} (pass {repeat + 1}) ...", flush=True)
                    run = run_once(size, scheme, args.rounds, shaped, work, repeat)
                    passes[scheme].append(run)
                    times = [round(t, 2) for t in run["times"]]
                    print(f"  round times (s): {times}, load {run['load']:.1f}", flush=True)
            rows.extend(median_row(runs) for runs in passes.values())
    print()
    loads = [run["load"] for row in rows for run in row["passes"]]
    sizes = ", ".join(f"{s} = {parameters(s):,}" for s in args.sizes)
    print(
        f"3 clients, MLP on digits ({sizes} parameters), {args.rounds} rounds, 2 local steps; "
        f"round s and rounds/min over rounds 2..{args.rounds}, median of {args.repeats} "
        f"interleaved pass(es); load (1 min) {min(loads):.1f}..{max(loads):.1f}"
    )
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "flower_star.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
