"""Codec benchmark: time, bytes on the wire and error of every codec at 1M and 25M floats.

For each codec, size and density: encode + wire serialization + wire parsing + decode,
timed as the median of `--repeats` runs after one warm-up, next to a same-process
`torch.clone` of the same tensor; the bytes `thinwire.wire.encode` produces against the
information bound (log2 C(n, k) bits for an index set, 64 for a seed, plus the values'
bits: their dtype for floats, the empirical entropy of QSGD levels (of multi-scale (scale,
level) pairs), one bit per sign, 32 per norm or scale); the relative error
||x - x_hat|| / ||x||; and, for the sparsifiers, the density each achieves and its
relative error against the target (the threshold estimators, Ok-Topk's reused threshold and
SIDCo's fitted one, keep a count that varies around k).

Each codec is timed from the state it has after one call on an independent draw of the
same distribution, so threshold-reusing selectors (Ok-Topk) are timed on their reuse path
rather than on the exact selection of their first call.

    python benchmarks/codecs.py                      # 1M and 25M on CPU (and CUDA if present)
    python benchmarks/codecs.py --quick              # a smoke test on small sizes
    python benchmarks/codecs.py --sizes 1M --device cuda --json out.json

The input is standard normal float32 (seeded).

Low-rank rows (`--lowrank`, on by default; `--no-lowrank` skips them) compress an n = s x s
matrix (1M: 1000 x 1000, 25M: 5000 x 5000) holding a rank-8 signal plus standard normal
noise of a quarter of its energy, since a structureless matrix has no good rank-4 part. The
thinwire `powersgd` codec row is timed like every codec (encode + wire + decode from the
state after one call on an independent draw); its bound is the factors' own fp32 bits. The
DDP hook rows (thinwire's PowerSGD and ACP-SGD hooks and PyTorch's own `powerSGD_hook`, all
at rank 4, warm start on, error feedback off so each step compresses the same matrix) run
in this process on a one-rank gloo group: a DDP-wrapped module whose one parameter's
gradient is made the matrix, warmed up on the independent draw, then one backward pass per
timed run; `encode s` is that whole step (autograd, bucket copy and hook), next to the
same step under DDP's default allreduce (the `ddp allreduce` row), and the relative error
is that of the last timed step (warm start iterated `--repeats` times on the matrix, where
the codec row's is one step from the other draw's Q). Their bytes are what the hook put
into collectives a step (PyTorch's: (n + m) r fp32, by construction), and the bound is the
factors it sends.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from rich.console import Console
from rich.table import Table

from thinwire.codecs import (
    Codec,
    cast,
    chain,
    multiscale_qsgd,
    ok_top_k,
    qsgd,
    random_block,
    random_k,
    rtop_k,
    sampled_top_k,
    scaled_sign,
    sidco,
    threshold,
    top_k,
    wavelet,
)
from thinwire.codecs.bounds import information_bits
from thinwire.codecs.powersgd import powersgd
from thinwire.codecs.selection import count_for
from thinwire.wire import Kind, TensorSpec, Update
from thinwire.wire import decode as wire_decode
from thinwire.wire import encode as wire_encode

DENSITIES = (0.01, 0.001)


@dataclass
class Row:
    codec: str
    device: str
    n: int
    density: float | None
    encode_s: float
    wire_s: float  # serialize + parse
    decode_s: float
    total_s: float
    clone_s: float
    throughput_gbs: float  # input bytes / total time
    wire_bytes: int
    bound_bytes: float
    over_bound: float
    rel_error: float
    kept_density: float | None  # coordinates sent / n, for the sparsifiers
    density_error: float | None  # |kept_density / density - 1|


def _codecs(x: torch.Tensor) -> list[tuple[str, float | None, Codec]]:
    # (name, density or None, codec) for every configuration the benchmark runs.
    n = x.numel()
    out: list[tuple[str, float | None, Codec]] = []
    sparse: dict[str, Callable[[float], Codec]] = {
        "top-k (exact)": lambda d: chain(top_k(d)),
        "top-k (sampled)": lambda d: chain(sampled_top_k(d)),
        "random-k": lambda d: chain(random_k(d, seed=1)),
        "random block": lambda d: chain(random_block(d, seed=2)),
        "rtop-k (r=4k)": lambda d: chain(rtop_k(d, 4.0, seed=3)),
        "threshold": lambda d: chain(threshold(_threshold_for(x, count_for(d, n)))),
        "ok-topk (reused)": lambda d: chain(ok_top_k(d)),
        "sidco exponential": lambda d: chain(sidco(d, family="exponential")),
        "sidco gpareto": lambda d: chain(sidco(d, family="gpareto")),
        "sidco gamma": lambda d: chain(sidco(d, family="gamma")),
        "sign-top-k": lambda d: chain(sampled_top_k(d), scaled_sign()),
        "wavelet+top-k": lambda d: chain(wavelet("sym2", 4), sampled_top_k(d)),
    }
    for name, make in sparse.items():
        for density in DENSITIES:
            out.append((name, density, make(density)))
    out.append(("qsgd s=4 b=512", None, chain(qsgd(4, 512, seed=4))))
    out.append(("qsgd s=127 b=8192", None, chain(qsgd(127, 8192, seed=5))))
    # Equal bits: 5 per value and one norm per 512 (QSGD's s = 15 codes are 5 bits wide).
    out.append(("qsgd s=15 b=512 (5 bits)", None, chain(qsgd(15, 512, seed=6))))
    out.append(
        ("multiscale 4b+1 b=512 (5 bits)", None, chain(multiscale_qsgd(4, (7, 56), 512, seed=7)))
    )
    out.append(
        ("single-scale 5b b=512 (5 bits)", None, chain(multiscale_qsgd(5, (15,), 512, seed=8)))
    )
    out.append(("scaled sign", None, chain(scaled_sign())))
    out.append(("fp16", None, chain(cast("fp16"))))
    return out


def _threshold_for(x: torch.Tensor, k: int) -> float:
    # The k-th largest magnitude: a hard threshold that keeps about k coordinates.
    return float(torch.topk(x.abs(), k, sorted=False).values.min())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(
    name: str, density: float | None, codec: Codec, x: torch.Tensor, repeats: int, clone_s: float
) -> Row:
    """Times one codec on x and reports its bytes and error."""
    device, shape = x.device, tuple(x.shape)
    other = torch.randn(x.numel(), generator=torch.Generator().manual_seed(1)).to(device)
    _, state = codec.encode(other.reshape(shape), codec.init(x))
    spec = [TensorSpec("x", codec.wire_shape(shape))]
    encode_times, wire_times, decode_times = [], [], []
    for i in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        payload, _ = codec.encode(x, state)
        _sync(device)
        t1 = time.perf_counter()
        data = wire_encode(Update("bench", 0, Kind.MODEL_DELTA, {"x": payload}))
        received = wire_decode(data, spec).tensors["x"].to(device)
        _sync(device)
        t2 = time.perf_counter()
        x_hat = codec.decode(received, shape)
        _sync(device)
        t3 = time.perf_counter()
        if i:  # the first run is the warm-up
            encode_times.append(t1 - t0)
            wire_times.append(t2 - t1)
            decode_times.append(t3 - t2)
    encode_s, decode_s = statistics.median(encode_times), statistics.median(decode_times)
    wire_s = statistics.median(wire_times)
    total = encode_s + wire_s + decode_s
    bound_bytes = information_bits(payload) / 8
    error = float(torch.linalg.vector_norm(x - x_hat) / torch.linalg.vector_norm(x))
    kept = payload.count / x.numel() if density is not None else None
    return Row(
        codec=name,
        device=str(device),
        n=x.numel(),
        density=density,
        encode_s=encode_s,
        wire_s=wire_s,
        decode_s=decode_s,
        total_s=total,
        clone_s=clone_s,
        throughput_gbs=x.numel() * 4 / total / 1e9,
        wire_bytes=len(data),
        bound_bytes=bound_bytes,
        over_bound=len(data) / bound_bytes,
        rel_error=error,
        kept_density=kept,
        density_error=abs(kept / density - 1.0) if kept is not None and density else None,
    )


LOWRANK_RANK = 4


def _low_rank_matrix(n: int, seed: int, device: torch.device) -> torch.Tensor:
    # A rank-8 signal (entries of variance 1) plus standard normal noise / 2: s x s, s^2 ~ n.
    side = round(n**0.5)
    g = torch.Generator().manual_seed(seed)
    signal = torch.randn(side, 8, generator=g) @ torch.randn(8, side, generator=g) / 8**0.5
    return (signal + 0.5 * torch.randn(side, side, generator=g)).to(device)


class _Weight(torch.nn.Module):
    """One matrix parameter; forward returns it, so a loss can set its gradient exactly."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(shape))

    def forward(self) -> torch.Tensor:
        return self.weight


def _hook_row(
    name: str,
    hook: Callable[[torch.nn.Module], Callable[[], int] | None],
    x: torch.Tensor,
    other: torch.Tensor,
    repeats: int,
    clone_s: float,
    bound_bytes: float,
) -> Row:
    """Times one backward pass of a one-rank DDP model whose gradient is `x`, through `hook`.

    `hook` registers itself and returns a byte counter, or None for a hook that counts
    nothing (its bytes a step are `bound_bytes` by construction).
    """
    from torch.nn.parallel import DistributedDataParallel

    device = x.device
    layer = _Weight(tuple(x.shape)).to(device)
    model = DistributedDataParallel(layer)
    sent = hook(model)

    def step(g: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        (model() * g).sum().backward()  # d/dW sum(W * g) = g: the hook gets g itself
        return layer.weight.grad

    for _ in range(3):  # two plain steps (start_iter), one compressed on the other draw
        step(other)
    before = sent() if sent is not None else 0
    times, error, per_step = [], 0.0, 0
    for i in range(repeats):
        _sync(device)
        start = time.perf_counter()
        out = step(x)
        _sync(device)
        times.append(time.perf_counter() - start)
        if i == 0:
            per_step = sent() - before if sent is not None else int(bound_bytes)
        if i == repeats - 1:  # warm start has iterated `repeats` times on x
            error = float(torch.linalg.vector_norm(out - x) / torch.linalg.vector_norm(x))
    total = statistics.median(times)
    return Row(
        codec=name,
        device=str(device),
        n=x.numel(),
        density=None,
        encode_s=total,
        wire_s=0.0,
        decode_s=0.0,
        total_s=total,
        clone_s=clone_s,
        throughput_gbs=x.numel() * 4 / total / 1e9,
        wire_bytes=per_step,
        bound_bytes=bound_bytes,
        over_bound=per_step / bound_bytes,
        rel_error=error,
        kept_density=None,
        density_error=None,
    )


def _lowrank_rows(n: int, device: torch.device, repeats: int, console: Console) -> list[Row]:
    """The powersgd codec, thinwire's PowerSGD and ACP-SGD hooks, and PyTorch's hook."""
    import tempfile

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

    import thinwire.ddp

    x = _low_rank_matrix(n, 0, device)
    other = _low_rank_matrix(n, 1, device)
    side, r = x.shape[0], LOWRANK_RANK
    clone_s = _median_time(lambda: x.clone(), device, max(repeats, 5))
    factor_bytes = (2 * side) * r * 4
    rows = [measure(f"powersgd r={r} (codec)", None, powersgd(r, seed=9), x, repeats, clone_s)]

    def thinwire_hook(method: object) -> Callable[[torch.nn.Module], Callable[[], int] | None]:
        def attach(model: torch.nn.Module) -> Callable[[], int]:
            state = thinwire.ddp.register(model, codec=method)  # type: ignore[arg-type]
            return lambda: state.stats().payload_bytes

        return attach

    def torch_hook(model: torch.nn.Module) -> None:
        state = torch_powersgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=r,
            start_powerSGD_iter=2,
            use_error_feedback=False,
            warm_start=True,
            orthogonalization_epsilon=1e-8,
        )
        model.register_comm_hook(state, torch_powersgd.powerSGD_hook)

    def default_hook(model: torch.nn.Module) -> None:
        del model  # DDP's own allreduce of the whole bucket

    with tempfile.TemporaryDirectory() as folder:
        store = f"file://{folder}/store"
        dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        try:
            hooks = [
                ("ddp allreduce (no hook)", default_hook, float(x.numel() * 4)),
                (
                    f"powersgd r={r} (thinwire hook)",
                    thinwire_hook(
                        thinwire.ddp.PowerSGD(rank=r, error_feedback=False, start_iter=2)
                    ),
                    float(factor_bytes),
                ),
                (
                    f"acp_sgd r={r} (thinwire hook)",
                    thinwire_hook(thinwire.ddp.ACPSGD(rank=r, error_feedback=False, start_iter=2)),
                    float(factor_bytes / 2),
                ),
                (f"torch powerSGD_hook r={r}", torch_hook, float(factor_bytes)),
            ]
            for name, hook, bound in hooks:
                rows.append(_hook_row(name, hook, x, other, repeats, clone_s, bound))
                console.log(f"{name} {device} n={x.numel():,}: {rows[-1].total_s:.4f} s")
        finally:
            dist.destroy_process_group()
    return rows


def _size(text: str) -> int:
    scale = {"k": 10**3, "m": 10**6}.get(text[-1].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _devices(choice: str) -> list[torch.device]:
    if choice == "auto":
        return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    return [torch.device(choice)]


def _table(rows: list[Row]) -> Table:
    table = Table(title="thinwire codecs: encode + wire + decode")
    for column in (
        "codec",
        "device",
        "n",
        "density",
        "encode s",
        "wire s",
        "decode s",
        "total s",
        "x clone",
        "GB/s",
        "wire bytes",
        "x bound",
        "rel err",
        "kept",
        "density err",
    ):
        table.add_column(column, justify="left" if column in ("codec", "device") else "right")
    for r in rows:
        table.add_row(
            r.codec,
            r.device,
            f"{r.n:,}",
            f"{r.density:g}" if r.density is not None else "-",
            f"{r.encode_s:.4f}",
            f"{r.wire_s:.4f}",
            f"{r.decode_s:.4f}",
            f"{r.total_s:.4f}",
            f"{r.total_s / r.clone_s:.1f}",
            f"{r.throughput_gbs:.2f}",
            f"{r.wire_bytes:,}",
            f"{r.over_bound:.3f}",
            f"{r.rel_error:.3f}",
            f"{r.kept_density:.5f}" if r.kept_density is not None else "-",
            f"{r.density_error:.3f}" if r.density_error is not None else "-",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,25M", help="comma-separated, e.g. 1M,25M")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:<i>")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs after a warm-up")
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repeats")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--only", help="run only codecs whose name contains this text")
    parser.add_argument(
        "--lowrank",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the low-rank rows (powersgd codec, PowerSGD/ACP-SGD/PyTorch hooks)",
    )
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [_size(s) for s in args.sizes.split(",")]
    repeats = 2 if args.quick else args.repeats
    console = Console(width=180)
    rows: list[Row] = []
    for device in _devices(args.device):
        for n in sizes:
            x = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(device)
            clone_s = _median_time(lambda x=x: x.clone(), device, max(repeats, 5))
            for name, density, codec in _codecs(x):
                if args.only and args.only not in name:
                    continue
                row = measure(name, density, codec, x, repeats, clone_s)
                rows.append(row)
                console.log(f"{name} {device} n={n:,} density={density}: {row.total_s:.4f} s")
            if args.lowrank and (not args.only or args.only in "powersgd acp_sgd lowrank"):
                rows.extend(_lowrank_rows(n, device, repeats, console))
    console.print(_table(rows))
    if args.json:
        meta = {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.processor() or platform.machine(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
