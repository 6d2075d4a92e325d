"""Seeds table: every method thinwire implements against its paper's headline claim.

One row per claim, `method | claim | published | measured here | holds?`, each computed by
a small row function on data available offline: scikit-learn's digits and the synthetic
task (through `thinwire.runtimes.simulation.simulate`, star and gossip), random and
gradient-like vectors (codecs directly), a synthetic convex problem, and a character-level
language model on text from Python's own standard library sources (codecs directly, in a
data-parallel loop that serializes every update: bytes are `len()` of real messages).

"holds?" is decided by the criterion each row states in its claim column (the paper's
claim made checkable at this scale); claims tagged [mem] or [design] in
algorithms.md are marked so. A row is one function registered with `@row`; adding a
method's claim is one more function.

    python benchmarks/seeds.py                 # every row (about 10-15 minutes on 2 cores)
    python benchmarks/seeds.py --quick         # shorter runs: a smoke test (~2-3 minutes)
    python benchmarks/seeds.py --only dgc-lm   # one row (by name; --list names them)
    python benchmarks/seeds.py --markdown      # also print the table as Markdown
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sysconfig
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from rich.console import Console
from rich.table import Table

from thinwire.codecs import build
from thinwire.config import CodecConfig, parse_config
from thinwire.metrics import schema
from thinwire.runtimes.simulation import simulate
from thinwire.wire import Kind, Update, encode

console = Console(width=200)


class Result(NamedTuple):
    """What a row measured, and whether the claim's criterion holds."""

    measured: str
    holds: bool


class Row(NamedTuple):
    name: str
    method: str
    claim: str  # with the criterion checked here, and the provenance tag
    published: str
    run: Callable[[bool], Result]  # quick -> result


ROWS: list[Row] = []


def row(name: str, method: str, claim: str, published: str):
    """Registers a row function `fn(quick) -> Result` under `name`."""

    def register(fn: Callable[[bool], Result]) -> Callable[[bool], Result]:
        ROWS.append(Row(name, method, claim, published, fn))
        return fn

    return register


# ------------------------------------------------------------------------ shared runners


def _run(raw: dict[str, Any]) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [dict(r) for r in simulate(parse_config(raw)).records]


def _accuracy(records: list[dict[str, Any]]) -> float:
    """Mean test accuracy over the last evaluations (the last fifth, at least one)."""
    done = [float(r[schema.ACCURACY]) for r in records if not math.isnan(r[schema.ACCURACY])]
    return statistics.fmean(done[-max(1, len(done) // 5) :])


def _bytes(records: list[dict[str, Any]]) -> float:
    return float(records[-1][schema.CUM_BYTES_UP])


def _star(rounds: int, **sections: Any) -> dict[str, Any]:
    train = {"rounds": rounds, "local_steps": 10, "batch_size": 32, "lr": 0.05}
    train.update({"optimizer": {"kind": "sgd", "momentum": 0.9}, "device": "cpu"})
    train.update(sections.pop("train", {}))
    return {
        "name": "seeds",
        "seed": 0,
        "data": {
            "dataset": "digits",
            "clients": 10,
            "partition": {"kind": "dirichlet", "alpha": 0.5},
        },
        "model": {"kind": "mlp", "hidden": [64]},
        "train": train,
        **sections,
    }


@functools.cache
def _digits_star(method: str, quick: bool) -> tuple[float, float]:
    """(accuracy, uplink bytes) of a star method on digits (examples/baseline.yaml's setup)."""
    rounds = 20 if quick else 60
    codecs: dict[str, dict[str, Any]] = {
        "dense": {},
        "two_mean_sign": {"codec": {"quantize": {"kind": "two_mean_sign"}, "error_feedback": True}},
        "signsgd_mv": {
            "train": {"local_steps": 1, "optimizer": {"kind": "sgd"}, "server": {"lr": 0.002}},
            "codec": {"quantize": {"kind": "sign"}, "error_feedback": False},
            "downlink": {"quantize": {"kind": "sign"}},
            "aggregation": {"rule": {"kind": "sign_vote"}},
        },
        "sgd_one_step": {"train": {"local_steps": 1, "optimizer": {"kind": "sgd"}}},
    }
    sections = dict(codecs[method])
    if method in ("signsgd_mv", "sgd_one_step"):
        rounds *= 2
    records = _run(_star(rounds, **sections))
    return _accuracy(records), _bytes(records)


@functools.cache
def _gossip(method: str, quick: bool) -> tuple[float, float]:
    """(accuracy, bytes) of a gossip method: benchmarks/gossip.py's ring of 16 on digits."""
    rounds = 30 if quick else 100
    methods: dict[str, dict[str, Any]] = {
        "dpsgd": {"gossip": {"kind": "dpsgd"}},
        "choco": {
            "gossip": {"kind": "choco", "gamma": 0.1},
            "codec": {"select": {"kind": "topk", "density": 0.01}},
        },
        "sparq": {
            "gossip": {"kind": "sparq", "gamma": 0.1, "threshold": {"kind": "constant", "c": 100.0}}
        },
        "jwins": {"gossip": {"kind": "jwins"}},
    }
    raw = {
        "name": "seeds-gossip",
        "seed": 0,
        "data": {
            "dataset": "digits",
            "clients": 16,
            "partition": {"kind": "dirichlet", "alpha": 1.0},
        },
        "model": {"kind": "mlp", "hidden": [64]},
        "topology": {"kind": "ring"},
        "train": {
            "rounds": rounds,
            "local_steps": 5,
            "batch_size": 16,
            "lr": 0.2,
            "device": "cpu",
            "eval_every": 10,
        },
        **methods[method],
    }
    records = _run(raw)
    return _accuracy(records), _bytes(records)


def _codec(sections: dict[str, Any], seed: int = 0):
    return build(CodecConfig.model_validate(sections), seed=seed)


def _wire_bytes(payload: Any, step: int) -> int:
    return len(encode(Update("w", step + 1, Kind.MODEL_DELTA, {"g": payload})))


# ----------------------------------------------------- data-parallel loop over a flat model


class Task(NamedTuple):
    params: torch.Tensor  # the flat model's initial value
    grad: Callable[[torch.Tensor, int, int], tuple[torch.Tensor, float]]  # x, worker, step
    metric: Callable[[torch.Tensor], float]  # lower is better


def _parallel(
    task: Task,
    codec_sections: dict[str, Any] | None,
    *,
    workers: int,
    steps: int,
    lr: float,
    momentum: float = 0.0,
) -> tuple[float, int]:
    """Data-parallel SGD where each worker's gradient travels through a thinwire codec.

    The server averages the decoded gradients and steps (heavy-ball momentum on the
    average when `momentum` > 0). Returns (final metric, uplink bytes of all workers).
    """
    x = task.params.clone()
    codecs = [_codec(codec_sections or {}, seed=w) for w in range(workers)]
    states = [c.init(x) for c in codecs]
    velocity = torch.zeros_like(x)
    sent = 0
    for step in range(steps):
        total = torch.zeros_like(x)
        for w, codec in enumerate(codecs):
            g, _ = task.grad(x, w, step)
            payload, states[w] = codec.encode(g, states[w])
            sent += _wire_bytes(payload, step)
            total += codec.decode(payload, tuple(x.shape))
        update = total / workers
        velocity = momentum * velocity + update
        x -= lr * velocity
        if not bool(torch.isfinite(x).all()):
            return math.inf, sent
    return task.metric(x), sent


@functools.cache
def _convex(d: int = 500, n: int = 4000, workers: int = 4) -> tuple[Task, float]:
    """l2-regularised logistic regression on a synthetic linear-separator task, and f*."""
    g = torch.Generator().manual_seed(0)
    w_true = torch.randn(d, generator=g)
    features = torch.randn(n, d, generator=g) / math.sqrt(d)
    labels = torch.sign(features @ w_true + 0.1 * torch.randn(n, generator=g))
    lam = 1e-3
    shards = torch.arange(n).chunk(workers)

    def loss(x: torch.Tensor, rows: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        margins = labels[rows] * (features[rows] @ x)
        return torch.nn.functional.softplus(-margins).mean() + 0.5 * lam * x.square().sum()

    def grad(x: torch.Tensor, worker: int, step: int) -> tuple[torch.Tensor, float]:
        pick = torch.Generator().manual_seed(step * 1000 + worker)
        shard = shards[worker]
        rows = shard[torch.randint(len(shard), (32,), generator=pick)]
        x = x.detach().requires_grad_(True)
        value = loss(x, rows)
        (gradient,) = torch.autograd.grad(value, x)
        return gradient, float(value.detach())

    # f*: full-batch gradient descent to convergence (smooth, strongly convex).
    x = torch.zeros(d)
    for _ in range(3000):
        x = x.requires_grad_(True)
        (gradient,) = torch.autograd.grad(loss(x), x)
        x = (x - 4.0 * gradient).detach()
    optimum = float(loss(x))
    return Task(torch.zeros(d), grad, lambda x: float(loss(x)) - optimum), optimum


# ------------------------------------------------- a character-level language model


def _corpus() -> str:
    """Text that ships with Python: a few modules of the standard library's own sources."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = ("textwrap.py", "argparse.py", "calendar.py", "difflib.py", "shlex.py", "string.py")
    return "".join((stdlib / name).read_text(encoding="utf-8", errors="replace") for name in names)


class _CharMLP(torch.nn.Module):
    """Next-character model: embeddings of the last `context` characters, one hidden layer."""

    def __init__(self, vocab: int, context: int = 8, embed: int = 16, hidden: int = 256):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        self.hidden = torch.nn.Linear(context * embed, hidden)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, window: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(self.embed(window).flatten(1))))


@functools.cache
def _language_task(workers: int = 4, context: int = 8, batch: int = 64) -> Task:
    text = _corpus()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text])
    split = int(0.9 * len(ids))
    train, test = ids[:split], ids[split:]
    torch.manual_seed(0)
    model = _CharMLP(len(chars), context)
    shapes = [p.shape for p in model.parameters()]
    sizes = [p.numel() for p in model.parameters()]
    shard = len(train) // workers

    def load(x: torch.Tensor) -> None:
        for p, chunk, shape in zip(model.parameters(), x.split(sizes), shapes, strict=True):
            p.data.copy_(chunk.view(shape))

    def windows(source: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = starts[:, None] + torch.arange(context)
        return source[offsets], source[starts + context]

    def grad(x: torch.Tensor, worker: int, step: int) -> tuple[torch.Tensor, float]:
        load(x)
        pick = torch.Generator().manual_seed(step * 1000 + worker)
        starts = worker * shard + torch.randint(shard - context - 1, (batch,), generator=pick)
        inputs, targets = windows(train, starts)
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        return flat, float(loss.detach())

    eval_starts = torch.arange(0, len(test) - context - 1, 7)

    def perplexity(x: torch.Tensor) -> float:
        load(x)
        with torch.no_grad():
            inputs, targets = windows(test, eval_starts)
            return math.exp(float(torch.nn.functional.cross_entropy(model(inputs), targets)))

    initial = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return Task(initial, grad, perplexity)


LM_CODECS: dict[str, dict[str, Any] | None] = {
    "dense": None,
    "top-k 50x": {"select": {"kind": "topk", "density": 0.02}, "error_feedback": True},
    "DGC 50x": {
        "select": {"kind": "topk", "density": 0.02},
        "error_feedback": {"kind": "dgc", "momentum": 0.9},
    },
    "random-k 50x": {"select": {"kind": "random_k", "density": 0.02}, "error_feedback": True},
    "random-k 50x, no EF": {"select": {"kind": "random_k", "density": 0.02}},
    "QSGD 8-bit": {"quantize": {"kind": "qsgd", "levels": 127, "bucket": 512}},
    "top-k 5000x": {"select": {"kind": "topk", "density": 0.0002}, "error_feedback": True},
    "DGC 5000x": {
        "select": {"kind": "topk", "density": 0.0002},
        "error_feedback": {"kind": "dgc", "momentum": 0.9},
    },
}


@functools.cache
def _lm(method: str, quick: bool) -> tuple[float, int]:
    """(test perplexity, uplink bytes) of the character model trained with `method`."""
    sections = LM_CODECS[method]
    # Momentum lives in DGC's codec (momentum correction); the others take it at the server.
    dgc = sections is not None and isinstance(sections.get("error_feedback"), dict)
    return _parallel(
        _language_task(),
        sections,
        workers=4,
        steps=150 if quick else 400,
        lr=0.1,
        momentum=0.0 if dgc else 0.9,
    )


def _ppl(method: str, quick: bool) -> str:
    value, sent = _lm(method, quick)
    return f"{method} {value:.3g} ({_mb(sent)})"


def _mb(count: float) -> str:
    return f"{count / 1e6:.2f} MB" if count >= 1e5 else f"{count / 1e3:.1f} kB"


# ----------------------------------------------------------------------------- the rows


@row(
    "topk-ef-convex",
    "top-k + error feedback",
    "top-1% with memory tracks SGD per iteration on a convex task; here: its suboptimality "
    "after T steps is within 3x SGD's [mem]",
    "Stich et al. NeurIPS'18: top-1 with memory tracks full SGD",
)
def topk_ef_convex(quick: bool) -> Result:
    task, _ = _convex()
    steps = 300 if quick else 800
    sgd, _ = _parallel(task, None, workers=4, steps=steps, lr=2.0)
    topk, sent = _parallel(
        task,
        {"select": {"kind": "topk", "density": 0.01}, "error_feedback": True},
        workers=4,
        steps=steps,
        lr=2.0,
    )
    return Result(f"f - f*: SGD {sgd:.2e}, top-1% EF {topk:.2e} ({_mb(sent)})", topk <= 3 * sgd)


@row(
    "randk-no-memory-convex",
    "random-k without memory",
    "without memory random-k stalls; here: rand-1% without EF ends >= 5x further from f* "
    "than rand-1% with EF [mem]",
    "Stich et al. NeurIPS'18: memory is essential",
)
def randk_no_memory(quick: bool) -> Result:
    task, _ = _convex()
    steps = 300 if quick else 800
    cfg = {"select": {"kind": "random_k", "density": 0.01}}
    plain, _ = _parallel(task, cfg, workers=4, steps=steps, lr=2.0)
    memory, _ = _parallel(task, {**cfg, "error_feedback": True}, workers=4, steps=steps, lr=2.0)
    return Result(f"f - f*: no memory {plain:.2e}, with EF {memory:.2e}", plain >= 5 * memory)


@row(
    "choco-vs-dpsgd",
    "CHOCO-SGD",
    "far fewer bytes than D-PSGD at similar accuracy; here: >= 10x fewer bytes, accuracy "
    "within 3 pp (digits, ring of 16) [mem]",
    "ICML'19: 1-2 orders of magnitude fewer bits, same accuracy per iteration",
)
def choco(quick: bool) -> Result:
    acc_d, bytes_d = _gossip("dpsgd", quick)
    acc_c, bytes_c = _gossip("choco", quick)
    ratio = bytes_d / bytes_c
    return Result(
        f"D-PSGD {acc_d:.1%} {_mb(bytes_d)}; "
        f"CHOCO top-1% {acc_c:.1%} {_mb(bytes_c)} ({ratio:.0f}x)",
        ratio >= 10 and acc_c >= acc_d - 0.03,
    )


@row(
    "sparq-vs-choco",
    "SPARQ-SGD",
    "about 10x fewer bits than CHOCO for the same performance; here: >= 10x fewer bytes "
    "than CHOCO top-1%, accuracy within 3 pp [abs, commented out in the source]",
    "~10x fewer bits than CHOCO (MNIST, CIFAR-10)",
)
def sparq(quick: bool) -> Result:
    acc_c, bytes_c = _gossip("choco", quick)
    acc_s, bytes_s = _gossip("sparq", quick)
    ratio = bytes_c / bytes_s
    return Result(
        f"CHOCO {acc_c:.1%} {_mb(bytes_c)}; SPARQ {acc_s:.1%} {_mb(bytes_s)} ({ratio:.1f}x)",
        ratio >= 10 and acc_s >= acc_c - 0.03,
    )


@row(
    "jwins-bytes",
    "JWINS",
    "matches full-sharing accuracy with fewer bytes; here: fewer bytes than D-PSGD, accuracy "
    "within 2 pp [abs]",
    "up to 64% fewer bytes at full-sharing accuracy (96 nodes)",
)
def jwins(quick: bool) -> Result:
    acc_d, bytes_d = _gossip("dpsgd", quick)
    acc_j, bytes_j = _gossip("jwins", quick)
    saved = 1 - bytes_j / bytes_d
    return Result(
        f"D-PSGD {acc_d:.1%}; JWINS {acc_j:.1%}, {saved:.0%} fewer bytes",
        saved > 0 and acc_j >= acc_d - 0.02,
    )


@row(
    "csgd-censoring",
    "CSGD censoring",
    "same rate order as SGD with sizable savings; here: >= 20% fewer uploads than always-send, "
    "accuracy within 1 pp (synthetic convex task, examples/censor_convex.yaml) [abs]",
    "same convergence order as SGD, sizable communication savings",
)
def csgd(quick: bool) -> Result:
    rounds = 30 if quick else 60
    base = {
        "name": "seeds-censor",
        "seed": 0,
        "data": {"dataset": "synthetic", "clients": 10, "synthetic": {"alpha": 0.5, "beta": 0.5}},
        "model": {"kind": "logreg"},
        "train": {
            "rounds": rounds,
            "local_steps": 10,
            "batch_size": 16,
            "lr": 0.05,
            "device": "cpu",
        },
    }
    censor = {
        "kind": "censor",
        "threshold": {"kind": "geometric", "tau": 0.02, "ratio": 0.95},
        "batch": {"kind": "geometric", "ratio": 0.95, "max_batch": 256},
    }
    always = _run(base)
    censored = _run({**base, "policy": censor})
    uploads = sum(10 - r[schema.CENSORED] for r in censored)
    saved = 1 - uploads / (10 * rounds)
    acc_a, acc_c = _accuracy(always), _accuracy(censored)
    return Result(
        f"always {acc_a:.1%}; censored {acc_c:.1%}, {saved:.0%} uploads saved",
        saved >= 0.2 and acc_c >= acc_a - 0.01,
    )


@row(
    "dp-rs-epsilon",
    "DP-SGD + random sparsification",
    "sparsification costs no privacy: epsilon is the Opacus RDP accountant's for plain DP-SGD; "
    "here: epsilon(RS) == epsilon(DP-SGD) <= target at the same noise [code]",
    "accounting unchanged (Opacus RDP), gains at the same epsilon",
)
def dp_rs(quick: bool) -> Result:
    rounds = 10 if quick else 30
    privacy = {"target_epsilon": 4.0, "delta": 1e-3, "max_grad_norm": 1.0}
    base = _star(
        rounds,
        data={"dataset": "digits", "clients": 10, "partition": {"kind": "iid"}},
        train={"lr": 0.5, "optimizer": {"kind": "sgd"}, "eval_every": 5},
    )
    dense = _run({**base, "privacy": privacy})
    sparse = _run(
        {
            **base,
            "privacy": {**privacy, "sparsity": {"final_rate": 0.8, "schedule": "linear"}},
            "codec": {"scope": "model", "select": {"kind": "shared_mask"}},
        }
    )
    eps_d, eps_s = float(dense[-1][schema.EPSILON]), float(sparse[-1][schema.EPSILON])
    saved = 1 - _bytes(sparse) / _bytes(dense)
    return Result(
        f"epsilon DP-SGD {eps_d:.4f}, RS {eps_s:.4f} (target 4); acc {_accuracy(dense):.1%} "
        f"vs {_accuracy(sparse):.1%}; {saved:.0%} fewer bytes",
        abs(eps_d - eps_s) < 1e-9 and eps_s <= 4.0 + 1e-6,
    )


@row(
    "aog-random-access",
    "Age-of-Gradient random access",
    "AoG beats other random-access policies; here: its accuracy >= uniform ALOHA's at the "
    "same slots (examples/random_access.yaml) [abs]",
    "AoG outperforms other RACH-FL policies (no numbers in the abstract)",
)
def aog(quick: bool) -> Result:
    from thinwire.config import load_config

    example = Path(__file__).resolve().parents[1] / "examples" / "random_access.yaml"
    rounds = 15 if quick else 40
    extra = [f"train.rounds={rounds}", "train.device=cpu"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aog_records = simulate(load_config(example, extra)).records
        uniform = simulate(load_config(example, [*extra, "policy.rule={kind: uniform}"])).records
    acc_a, acc_u = _accuracy(aog_records), _accuracy(uniform)  # type: ignore[arg-type]
    return Result(f"AoG {acc_a:.1%}, uniform ALOHA {acc_u:.1%}", acc_a >= acc_u)


@row(
    "qsgd-variance",
    "QSGD",
    "unbiased with E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2; here: the measured "
    "variance is within the bound and the mean of R draws is within 3 sigma of v [paper]",
    "Alistarh et al. NeurIPS'17, Lemma 3.1",
)
def qsgd_variance(quick: bool) -> Result:
    d, s, draws = 4096, 4, 100 if quick else 200
    v = torch.randn(d, generator=torch.Generator().manual_seed(0))
    codec = _codec({"quantize": {"kind": "qsgd", "levels": s}}, seed=1)
    state = codec.init(v)
    total, errors = torch.zeros(d), []
    for _ in range(draws):
        payload, state = codec.encode(v, state)
        out = codec.decode(payload, (d,))
        total += out
        errors.append(float((out - v).square().sum()))
    energy = float(v.square().sum())
    variance = statistics.fmean(errors) / energy
    bound = min(d / s**2, math.sqrt(d) / s)
    bias = float((total / draws - v).square().sum()) / energy
    return Result(
        f"variance {variance:.3f} ||v||^2 (bound {bound:.0f}); squared bias {bias:.4f}",
        variance <= bound and bias <= 9 * variance / draws,
    )


@row(
    "signsgd-mv",
    "signSGD with majority vote",
    "1 bit per coordinate both ways, converging like SGD; here: digits accuracy within 5 pp "
    "of one-step SGD at >= 20x fewer uplink bytes [mem]",
    "Bernstein et al. ICLR'19: SGD-level accuracy at 1/32 of the bits",
)
def signsgd(quick: bool) -> Result:
    acc_s, bytes_s = _digits_star("sgd_one_step", quick)
    acc_v, bytes_v = _digits_star("signsgd_mv", quick)
    ratio = bytes_s / bytes_v
    return Result(
        f"SGD {acc_s:.1%}; vote {acc_v:.1%} at {ratio:.0f}x fewer bytes",
        acc_v >= acc_s - 0.05 and ratio >= 20,
    )


@row(
    "multiscale-qsgd",
    "multi-scale QSGD",
    "lower variance than single-scale quantization at equal bits; here: 4-bit levels at 2 "
    "scales (+1 index bit) against 5-bit single scale, on gradient-like (Student-t) "
    "vectors, wire bytes within 10% [mem]",
    "multi-scale quantization lowers variance at equal bit budget",
)
def multiscale(quick: bool) -> Result:
    d, draws = 1 << 16, 10 if quick else 40
    multi = _codec({"quantize": {"kind": "multiscale_qsgd", "bits": 4, "scales": 2, "bucket": 512}})
    single = _codec(
        {"quantize": {"kind": "multiscale_qsgd", "bits": 5, "scales": 1, "bucket": 512}}
    )
    dist = torch.distributions.StudentT(torch.tensor(3.0))
    torch.manual_seed(0)
    measured = {}
    for name, codec in (("multi", multi), ("single", single)):
        state, errors, sent = codec.init(torch.zeros(d)), [], 0
        for step in range(draws):
            v = dist.sample((d,))
            payload, state = codec.encode(v, state)
            sent += _wire_bytes(payload, step)
            errors.append(
                float((codec.decode(payload, (d,)) - v).square().sum() / v.square().sum())
            )
        measured[name] = (statistics.fmean(errors), sent / draws)
    (var_m, b_m), (var_s, b_s) = measured["multi"], measured["single"]
    return Result(
        f"2 scales {var_m:.2e} at {b_m / 1e3:.1f} kB; 1 scale {var_s:.2e} at {b_s / 1e3:.1f} kB",
        var_m < var_s and b_m <= 1.1 * b_s,
    )


def _density_error(sections: dict[str, Any], quick: bool) -> tuple[float, float]:
    """Achieved density / target over a stream of the language model's real gradients.

    Returns the mean ratio and the worst step's |ratio - 1|.
    """
    task, steps = _language_task(), 40 if quick else 128
    target = sections["select"]["density"]
    codec = _codec(sections)
    state, ratios = codec.init(task.params), []
    for step in range(steps):
        gradient, _ = task.grad(task.params, step % 4, step)
        payload, state = codec.encode(gradient, state)
        ratios.append(payload.count / gradient.numel() / target)
    return statistics.fmean(ratios), max(abs(r - 1) for r in ratios)


@row(
    "oktopk-density",
    "Ok-Topk",
    "a threshold reused for 32 steps keeps the density near the target (nudged when > 4k/3); "
    "here: every step's density within [0.5, 1.5] x target on the language model's "
    "gradients [code]",
    "Li & Hoefler PPoPP'22: top-k quality at threshold cost",
)
def oktopk(quick: bool) -> Result:
    mean, worst = _density_error({"select": {"kind": "oktopk", "density": 0.01}}, quick)
    return Result(f"mean density {mean:.2f}x target, worst step off by {worst:.0%}", worst <= 0.5)


@row(
    "sidco-density",
    "SIDCo",
    "a fitted sparsity-inducing distribution gives a threshold of top-k quality; here: mean "
    "density within 20% of the target on the language model's gradients (default fit) [mem]",
    "Abdelmoniem et al. MLSys'21: DGC-quality threshold at lower cost",
)
def sidco(quick: bool) -> Result:
    sections = {"select": {"kind": "sidco", "density": 0.01}}
    mean, worst = _density_error(sections, quick)
    return Result(
        f"mean density {mean:.2f}x target, worst step off by {worst:.0%}", abs(mean - 1) <= 0.2
    )


@row(
    "random-block-unbiased",
    "independent random blocks (scaled)",
    "scaled by d/k the random block is unbiased; here: the mean of R draws is within "
    "3 sigma (omega ||x||^2 / R) of x [design: derived]",
    "E_s[(d/k) C(x)] = x",
)
def random_block_unbiased(quick: bool) -> Result:
    d, draws = 1000, 300 if quick else 2000
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    codec = _codec({"select": {"kind": "random_block", "density": 0.1, "unbiased": True}})
    state, total = codec.init(x), torch.zeros(d)
    for _ in range(draws):
        payload, state = codec.encode(x, state)
        total += codec.decode(payload, (d,))
    omega = 1 / 0.1 - 1
    bias = float((total / draws - x).square().sum() / x.square().sum())
    return Result(
        f"squared bias {bias:.4f} (sigma^2 {omega / draws:.4f})", bias <= 9 * omega / draws
    )


@row(
    "a2sgd-star",
    "A2SGD (two_mean_sign + EF, star form)",
    "two local averages with local error converge like SGD; here: digits accuracy within "
    "1 pp of dense fp32 (the star needs the sign pattern too: 1 bit per coordinate, not O(1)) "
    "[abs]",
    "converges like SGD; O(1) traffic per worker; LSTM-PTB 3.2x faster than top-k",
)
def a2sgd(quick: bool) -> Result:
    acc_d, bytes_d = _digits_star("dense", quick)
    acc_a, bytes_a = _digits_star("two_mean_sign", quick)
    return Result(
        f"dense {acc_d:.1%}; two-mean sign {acc_a:.1%} at {bytes_d / bytes_a:.0f}x fewer bytes",
        acc_a >= acc_d - 0.01,
    )


@row(
    "lm-topk-dgc-50x",
    "top-k and DGC (language model)",
    "at 50x, top-k and DGC roughly match or beat dense perplexity; here: both within 5% of "
    "dense test perplexity (char model on stdlib sources, 4 workers) [abs]",
    "arXiv 2502.07634: up to 0.06 better perplexity than dense at 50x",
)
def lm_topk_dgc(quick: bool) -> Result:
    dense, _ = _lm("dense", quick)
    topk, _ = _lm("top-k 50x", quick)
    dgc, _ = _lm("DGC 50x", quick)
    return Result(
        "; ".join(_ppl(m, quick) for m in ("dense", "top-k 50x", "DGC 50x")),
        topk <= 1.05 * dense and dgc <= 1.05 * dense,
    )


@row(
    "lm-randk-degrades",
    "random-k (language model)",
    "random-k degrades severely; here: random-k 50x (with and without EF) >= 10% worse test "
    "perplexity than top-k 50x [abs]",
    "arXiv 2502.07634: random-k degrades severely",
)
def lm_randk(quick: bool) -> Result:
    topk, _ = _lm("top-k 50x", quick)
    ef, _ = _lm("random-k 50x", quick)
    plain, _ = _lm("random-k 50x, no EF", quick)
    return Result(
        "; ".join(_ppl(m, quick) for m in ("top-k 50x", "random-k 50x", "random-k 50x, no EF")),
        ef >= 1.1 * topk and plain >= 1.1 * topk,
    )


@row(
    "lm-5000x-hurts",
    "top-k / DGC above 5000x (language model)",
    "ratios above ~5000x hurt, DGC most; here: top-k and DGC at 5000x >= 5% worse test "
    "perplexity than at 50x [abs]",
    "arXiv 2502.07634: degradation beyond 5000x, particularly DGC",
)
def lm_5000x(quick: bool) -> Result:
    topk, _ = _lm("top-k 50x", quick)
    dgc, _ = _lm("DGC 50x", quick)
    topk_hi, _ = _lm("top-k 5000x", quick)
    dgc_hi, _ = _lm("DGC 5000x", quick)
    return Result(
        "; ".join(_ppl(m, quick) for m in ("top-k 5000x", "DGC 5000x")),
        topk_hi >= 1.05 * topk and dgc_hi >= 1.05 * dgc,
    )


@row(
    "lm-qsgd",
    "QSGD (language model)",
    "QSGD keeps dense-level perplexity at a fraction of the bytes; here: 8-bit QSGD "
    "(buckets of 512) within 2% of dense at >= 3x fewer bytes [abs: studied, no number]",
    "arXiv 2502.07634: QSGD among the studied compressors",
)
def lm_qsgd(quick: bool) -> Result:
    dense, bytes_d = _lm("dense", quick)
    qsgd, bytes_q = _lm("QSGD 8-bit", quick)
    return Result(
        f"{_ppl('QSGD 8-bit', quick)}, {bytes_d / bytes_q:.1f}x fewer bytes than dense",
        qsgd <= 1.02 * dense and bytes_d / bytes_q >= 3,
    )


@row(
    "majority-vote",
    "sparse SGD with majority voting",
    "one voted sparsity pattern, the same up and down, without accuracy loss; here: vote at "
    "1% (previous-round mask) within 2 pp of dense, and its downlink >= 10x smaller than "
    "top-1% + EF's dense one [abs]",
    "Ozfatura et al. 2020: x4000 compression on CIFAR-10 without accuracy loss",
)
def majority_vote(quick: bool) -> Result:
    rounds = 20 if quick else 60
    acc_dense, _ = _digits_star("dense", quick)
    topk = _run(
        _star(rounds, codec={"select": {"kind": "topk", "density": 0.01}, "error_feedback": True})
    )
    vote = _run(_star(rounds, vote={"density": 0.01, "mask": "previous"}))
    acc_vote = _accuracy(vote)
    down_topk = float(topk[-1][schema.CUM_BYTES_DOWN])
    down_vote = float(vote[-1][schema.CUM_BYTES_DOWN])
    return Result(
        f"dense {acc_dense:.1%}; vote {acc_vote:.1%}, up {_mb(_bytes(vote))}, down "
        f"{_mb(down_vote)}; top-k + EF down {_mb(down_topk)} ({down_topk / down_vote:.0f}x)",
        acc_vote >= acc_dense - 0.02 and down_topk >= 10 * down_vote,
    )


def _time_to(records: list[dict[str, Any]], target: float) -> float:
    """Simulated seconds until an asynchronous-star run's accuracy first reaches `target`."""
    for record in records:
        if float(record[schema.ACCURACY]) >= target:
            return float(record[schema.SIM_CLOCK_S])
    return math.inf


@row(
    "fedbuff-async",
    "buffered asynchronous aggregation",
    "with stragglers, reaches a target accuracy in less wall-clock time than synchronous FL; "
    "here: simulated time to 95% (digits, 2 of 8 clients 6x and 10x slower) >= 3x shorter "
    "than the synchronous star's (K = M = 8) [mem]",
    "Nguyen et al. AISTATS'22: FedBuff several times faster than synchronous FL",
)
def fedbuff(quick: bool) -> Result:
    from thinwire.config import load_config

    rounds = ["train.rounds=40"] if quick else []
    example = Path(__file__).resolve().parent.parent / "examples" / "async.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffered = simulate(load_config(example, ["output=/tmp", *rounds])).records
        synchronous = simulate(
            load_config(
                example,
                ["output=/tmp", "server.buffer=8", "server.staleness.kind=constant", *rounds],
            )
        ).records
    t_async = _time_to([dict(r) for r in buffered], 0.95)
    t_sync = _time_to([dict(r) for r in synchronous], 0.95)
    return Result(
        f"to 95%: buffered (K=3) {t_async:.1f} s, synchronous {t_sync:.1f} s "
        f"({t_sync / t_async:.1f}x)",
        t_sync >= 3 * t_async,
    )


@row(
    "powersgd-star",
    "PowerSGD (low rank)",
    "rank-2 factors with error feedback match full-precision SGD's accuracy at a fraction of "
    "the bytes; here: digits star within 1 pp of dense at >= 5x fewer uplink bytes (the "
    "MLP's small matrices bound the rate) [mem]",
    "Vogels et al. NeurIPS'19: rank 2 matches SGD on CIFAR-10 at ~120x compression",
)
def powersgd_star(quick: bool) -> Result:
    rounds = 20 if quick else 60
    acc_dense, bytes_dense = _digits_star("dense", quick)
    lowrank = {"kind": "powersgd", "rank": 2, "min_compression_rate": 2.0}
    records = _run(_star(rounds, codec={"lowrank": lowrank, "error_feedback": True}))
    acc, sent = _accuracy(records), _bytes(records)
    return Result(
        f"dense {acc_dense:.1%} ({_mb(bytes_dense)}); rank 2 + EF {acc:.1%} ({_mb(sent)}, "
        f"{bytes_dense / sent:.1f}x fewer)",
        acc >= acc_dense - 0.01 and bytes_dense >= 5 * sent,
    )


@row(
    "acp-sgd-hook",
    "ACP-SGD (alternating low rank)",
    "sends one factor a step, half of PowerSGD's, at PowerSGD's accuracy; here: the DDP hook "
    "on 2 gloo ranks (examples/acp_sgd.py) sends <= 0.6x PowerSGD's bytes, accuracy within "
    "1 pp [mem]",
    "Zhang et al. ICDCS'23: PowerSGD's accuracy, half its traffic, overlappable",
)
def acp_sgd(quick: bool) -> Result:
    import re
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "examples" / "acp_sgd.py"
    steps = "150" if quick else "300"
    done = subprocess.run(
        [sys.executable, str(script), "--steps", steps],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    found = {
        m["method"]: (float(m["acc"]), int(m["bytes"]))
        for m in re.finditer(
            r"(?P<method>\w+)\s+rank \d+: test accuracy (?P<acc>[\d.]+), (?P<bytes>\d+) payload",
            done.stdout,
        )
    }
    (acc_a, bytes_a), (acc_p, bytes_p) = found["acp_sgd"], found["powersgd"]
    return Result(
        f"ACP-SGD {acc_a:.1%} ({_mb(bytes_a)}); PowerSGD {acc_p:.1%} ({_mb(bytes_p)}); "
        f"ratio {bytes_a / bytes_p:.2f}",
        bytes_a <= 0.6 * bytes_p and acc_a >= acc_p - 0.01,
    )


# ------------------------------------------------------------------------------ output


def run_rows(names: list[str] | None, quick: bool) -> list[tuple[Row, Result, float]]:
    results = []
    for entry in ROWS:
        if names and entry.name not in names:
            continue
        start = time.perf_counter()
        try:
            result = entry.run(quick)
        except Exception as error:  # a row that breaks is reported, not fatal to the table
            result = Result(f"error: {type(error).__name__}: {error}", False)
        elapsed = time.perf_counter() - start
        console.print(f"[dim]{entry.name}: {elapsed:.1f} s[/dim]")
        results.append((entry, result, elapsed))
    return results


def rich_table(results: list[tuple[Row, Result, float]]) -> Table:
    table = Table(title="thinwire against its papers' claims", show_lines=True)
    for column in ("method", "claim", "published", "measured here", "holds?"):
        table.add_column(column, overflow="fold")
    for entry, result, _ in results:
        mark = "[green]yes[/green]" if result.holds else "[red]no[/red]"
        table.add_row(entry.method, entry.claim, entry.published, result.measured, mark)
    return table


def markdown(results: list[tuple[Row, Result, float]]) -> str:
    lines = ["| method | claim | published | measured here | holds? |", "|---|---|---|---|---|"]
    for entry, result, _ in results:
        cells = (entry.method, entry.claim, entry.published, result.measured)
        escaped = [c.replace("|", "\\|") for c in cells]
        lines.append(f"| {' | '.join(escaped)} | {'yes' if result.holds else 'no'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("--only", action="append", metavar="NAME", help="run this row (repeat)")
    parser.add_argument("--list", action="store_true", help="print the row names and exit")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    args = parser.parse_args()
    if args.list:
        for entry in ROWS:
            print(f"{entry.name:24} {entry.method}")
        return
    unknown = set(args.only or ()) - {entry.name for entry in ROWS}
    if unknown:
        parser.error(f"unknown row(s) {sorted(unknown)}; --list names them")
    torch.set_num_threads(1)
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    start = time.perf_counter()
    results = run_rows(args.only, args.quick)
    console.print(rich_table(results))
    if args.markdown:
        print(markdown(results))
    held = sum(result.holds for _, result, _ in results)
    print(f"\n{held}/{len(results)} claims hold; {time.perf_counter() - start:.0f} s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
