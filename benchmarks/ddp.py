"""DDP benchmark: seconds and bytes per step of gradient exchanges on real gloo ranks.

Four ranks train one MLP under `DistributedDataParallel` with each exchange in turn, on
loopback and on links shaped with network namespaces and `tc tbf` (every rank in its own
namespace behind a veth pair on one bridge, its link shaped each way: 1 Gbit/s, then
100 Mbit/s). All exchanges run in one launch per link, so ratios against DDP's plain
allreduce compare like with like:

- DDP's own: plain allreduce, `fp16_compress_hook`, `powerSGD_hook` (rank 2);
- thinwire's (`thinwire.ddp.register`): top-k 1% with error feedback (all-gather; exact and
  sampled-exact selection), random-k 1% (allreduce, shared seed), PowerSGD (rank 2), QSGD
  (4 levels, all-gather) and Ok-Topk 1%.

Bytes are what rank 0 put into collectives per step (`HookStats`: payload + overhead; for
DDP's hooks, the tensors they allreduce, from torch's own compression rule), not what a
ring or tree relays. A second table times the top-k selection alone on a vector of the
model's size (exact against sampled-exact), which is what decides whether top-k's smaller
messages pay off. A third compares top-k, DGC, QSGD and random-k on 1, 2 and 4 ranks
(loopback), as arXiv 2502.07634 does.

    python benchmarks/ddp.py                  # loopback, 1 Gbit/s, 100 Mbit/s; then 1/2/4 ranks
    python benchmarks/ddp.py --quick          # a small model and few steps, loopback only
    python benchmarks/ddp.py --links loopback 100mbit --steps 10

Shaping needs root (`ip netns`, `tc`); without it only loopback runs. Run it on an idle
machine: every figure is wall time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from thinwire.codecs.selection import exact_top_k, sampled_top_k_indices
from thinwire.ddp import OkTopk, PowerSGD, leave_process_group, register

DENSITY = 0.01
TOPK = {"select": {"kind": "topk", "density": DENSITY}, "error_feedback": True}
METHODS: dict[str, Any] = {
    "DDP allreduce": None,
    "DDP fp16 hook": "torch-fp16",
    "DDP PowerSGD hook (r=2)": "torch-powersgd",
    "top-k 1% (all-gather)": TOPK,
    "top-k 1%, sampled (all-gather)": {
        "select": {"kind": "topk_sampled", "density": DENSITY},
        "error_feedback": True,
    },
    "random-k 1% (allreduce)": {
        "select": {"kind": "random_k", "density": DENSITY},
        "error_feedback": True,
    },
    "PowerSGD (r=2)": PowerSGD(rank=2),
    "QSGD s=4 (all-gather)": {"quantize": {"kind": "qsgd", "levels": 4}},
    "Ok-Topk 1%": OkTopk(density=DENSITY),
}
SCALING: dict[str, Any] = {
    "top-k 1%": TOPK,
    "DGC 1%": {
        "select": {"kind": "topk_sampled", "density": DENSITY},
        "error_feedback": {"kind": "dgc", "momentum": 0.9},
    },
    "QSGD s=4": {"quantize": {"kind": "qsgd", "levels": 4}},
    "random-k 1%": METHODS["random-k 1% (allreduce)"],
}
# Each rate with a token bucket of ~4 ms of traffic: a smaller bucket than rate / HZ caps a
# tbf below its rate (at 1 Gbit/s a 32 kB bucket held links near 100 Mbit/s).
RATES = {"1gbit": ("1gbit", "500kb"), "100mbit": ("100mbit", "50kb")}
BUCKET_MB = 100.0  # larger than the model: one gradient bucket
SUBNET = "10.214.0"


def build_model(hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(784, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def torch_powersgd_bytes(model: nn.Module, rank: int) -> int:
    """Bytes torch's PowerSGD hook allreduces per step, by its own compression rule."""
    total = 0
    for p in model.parameters():
        if p.ndim < 2:
            total += p.numel()
            continue
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        worth, plain, compressed = powerSGD_hook._should_compress(rows, cols, rank, 2)
        total += compressed if worth else plain
    return 4 * total


def attach(model: DistributedDataParallel, method: Any) -> Any:
    """Registers `method` on `model`; returns what reports bytes (a HookState) or None."""
    if method is None:
        return None
    if method == "torch-fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if method == "torch-powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2
        )
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    return register(model, codec=method)


def measure(method: Any, hidden: int, steps: int, warmup: int) -> dict[str, float]:
    """Seconds and bytes per step of `method` on this rank (a process group is up)."""
    net = build_model(hidden)
    numel = sum(p.numel() for p in net.parameters())
    # One bucket for every exchange: DDP's PowerSGD hook launches its allreduces from future
    # callbacks, and with several buckets on gloo they can reach the ranks in different
    # orders (seen here as a gloo size mismatch); thinwire's hooks run them in bucket order.
    model = DistributedDataParallel(net, bucket_cap_mb=BUCKET_MB)
    hook = attach(model, method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(32, 784, generator=g), torch.randint(0, 10, (32,), generator=g)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    before = hook.stats() if hook is not None else None
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    seconds = (time.perf_counter() - start) / steps
    if hook is not None:
        after = hook.stats()
        payload = (after.payload_bytes - before.payload_bytes) / steps
        overhead = (after.overhead_bytes - before.overhead_bytes) / steps
    elif method == "torch-fp16":
        payload, overhead = 2 * numel, 0
    elif method == "torch-powersgd":
        payload, overhead = torch_powersgd_bytes(net, 2), 0
    else:
        payload, overhead = 4 * numel, 0
    return {"seconds": seconds, "payload": payload, "overhead": overhead, "params": numel}


def selection_times(hidden: int, repeats: int = 5) -> dict[str, float]:
    """Seconds of exact and sampled-exact top-1% on a vector of the model's size."""
    n = sum(p.numel() for p in build_model(hidden).parameters())
    v = torch.randn(n, generator=torch.Generator().manual_seed(1))
    k = max(1, int(DENSITY * n))
    out = {}
    for name, select in (
        ("exact", lambda: exact_top_k(v, k)),
        ("sampled", lambda: sampled_top_k_indices(v, k, 0.01)),
    ):
        select()
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            select()
            runs.append(time.perf_counter() - start)
        out[name] = sorted(runs)[len(runs) // 2]
    return out


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master}",
        rank=args.rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=600),
    )
    table = METHODS if args.suite == "methods" else SCALING
    results = {
        name: measure(table[name], args.hidden, args.steps, args.warmup) for name in args.methods
    }
    if args.rank == 0:
        if args.suite == "methods":
            results["_selection"] = selection_times(args.hidden)
        Path(args.out).write_text(json.dumps(results))
    leave_process_group()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def shaped(world: int, rate: tuple[str, str]) -> Iterator[list[tuple[str, str]]]:
    """`world` namespaces on one bridge, each link shaped to (rate, burst) both ways."""
    tag = f"twddp{os.getpid() % 10000}"
    bridge = f"{tag}br"
    names = [f"{tag}n{i}" for i in range(world)]
    tbf = ["root", "tbf", "rate", rate[0], "burst", rate[1], "latency", "100ms"]
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        for i, ns in enumerate(names):
            host, inside = f"{tag}h{i}", f"{tag}v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", host, "master", bridge)
            _ip("link", "set", host, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", inside)
            _ip("netns", "exec", ns, "ip", "link", "set", inside, "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            subprocess.run(["tc", "qdisc", "add", "dev", host, *tbf], check=True)
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", inside, *tbf], check=True
            )
        yield [(ns, f"{tag}v{i}") for i, ns in enumerate(names)]
    finally:
        for i, ns in enumerate(names):
            subprocess.run(["ip", "link", "del", f"{tag}h{i}"], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def launch(
    suite: str, methods: list[str], world: int, link: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Runs `methods` on `world` ranks over `link`; returns rank 0's measurements."""
    port = random.randint(20000, 60000)
    out = Path(tempfile.mkdtemp()) / "result.json"
    common = [
        sys.executable, __file__, "--worker", "--suite", suite, "--world", str(world),
        "--hidden", str(args.hidden), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--out", str(out), "--methods", *methods,
    ]  # fmt: skip
    with shaped(world, RATES[link]) if link != "loopback" else _loopback() as spaces:
        master = f"{SUBNET}.1:{port}" if spaces else f"127.0.0.1:{port}"
        procs = []
        for r in range(world):
            command = [*common, "--rank", str(r), "--master", master]
            env = dict(os.environ)
            if spaces:
                namespace, env["GLOO_SOCKET_IFNAME"] = spaces[r]
                command = ["ip", "netns", "exec", namespace, *command]
            else:
                env["GLOO_SOCKET_IFNAME"] = "lo"
            procs.append(subprocess.Popen(command, env=env))
        codes = [p.wait(timeout=args.timeout) for p in procs]
    if any(codes):
        raise RuntimeError(f"{suite} on {link} with {world} ranks: exit codes {codes}")
    return json.loads(out.read_text())


@contextmanager
def _loopback() -> Iterator[list[tuple[str, str]]]:
    yield []


def shaping_works() -> str | None:
    """None if namespaces and tbf can be set up here, else why not."""
    try:
        with shaped(1, RATES["1gbit"]):
            return None
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        return str(getattr(exc, "stderr", "") or exc).strip()


def fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def print_methods(results: dict[str, dict[str, Any]]) -> None:
    links = list(results)
    head = "| exchange | bytes/step (payload + overhead) | " + " | ".join(
        f"{link}: s/step (x allreduce)" for link in links
    )
    print(head + " |")
    print("|" + "---|" * (2 + len(links)))
    base = {link: results[link]["DDP allreduce"]["seconds"] for link in links}
    first = results[links[0]]
    for name in METHODS:
        if name not in first:
            continue
        row = first[name]
        sent = f"{fmt_bytes(row['payload'])} + {fmt_bytes(row['overhead'])}"
        seconds = [results[link][name]["seconds"] for link in links]
        cells = [f"{t:.3f} ({t / base[link]:.2f}x)" for t, link in zip(seconds, links, strict=True)]
        print(f"| {name} | {sent} | " + " | ".join(cells) + " |")
    params = int(first["DDP allreduce"]["params"])
    select = first["_selection"]
    print(f"\nmodel: {params:,} parameters; top-1% selection alone on {params:,} floats: "
          f"exact {select['exact'] * 1e3:.1f} ms, sampled-exact {select['sampled'] * 1e3:.1f} ms "
          f"({select['exact'] / select['sampled']:.1f}x faster)")  # fmt: skip


def print_scaling(results: dict[int, dict[str, dict[str, Any]]]) -> None:
    worlds = sorted(results)
    print("| compressor | " + " | ".join(f"{w} rank(s): s/step, bytes/step" for w in worlds) + " |")
    print("|" + "---|" * (1 + len(worlds)))
    for name in SCALING:
        cells = [
            f"{results[w][name]['seconds']:.3f}, {fmt_bytes(results[w][name]['payload'])}"
            for w in worlds
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", nargs="+", default=["loopback", "1gbit", "100mbit"])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--suite", default="methods", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--master", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--methods", nargs="+", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.links, args.hidden, args.steps, args.warmup = ["loopback"], 128, 2, 2
    links = list(args.links)
    if any(link != "loopback" for link in links) and (reason := shaping_works()):
        print(f"link shaping unavailable ({reason}); loopback only")
        links = ["loopback"]
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)\n")
    per_link = {link: launch("methods", list(METHODS), 4, link, args) for link in links}
    print_methods(per_link)
    print()
    scaling = {w: launch("scaling", list(SCALING), w, "loopback", args) for w in (1, 2, 4)}
    print_scaling(scaling)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
