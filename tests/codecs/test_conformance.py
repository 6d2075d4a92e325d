"""One set of checks over every registered codec kind (STYLE rule 20).

The table below must name every kind in every registry: registering a kind without adding
it here fails `test_table_covers_every_registered_kind`. An entry listed in `ARGS` encodes
with those per-call arguments (a `per_call` selector's input) in every check.
"""

import dataclasses

import pytest
import torch

from thinwire.codecs import NO_ARGS, EncodeArgs, build, with_error_feedback
from thinwire.codecs.forms import check_forms
from thinwire.config import CodecConfig
from thinwire.registry import FEEDBACKS, LOWRANK, QUANTIZERS, SELECTORS, TRANSFORMS
from thinwire.wire.payload import SeededSupport, SeedScheme

TOPK = {"kind": "topk", "density": 0.1}

# id -> ((role, kind) exercised, codec config sections)
TABLE: dict[str, tuple[tuple[str, str], dict]] = {
    "transform-identity": (("transform", "identity"), {"select": TOPK}),
    "transform-wavelet": (
        ("transform", "wavelet"),
        {"transform": {"kind": "wavelet", "wavelet": "sym2", "level": 3}, "select": TOPK},
    ),
    "select-none": (("selector", "none"), {"select": {"kind": "none"}}),
    "select-topk": (("selector", "topk"), {"select": TOPK}),
    "select-topk_sampled": (
        ("selector", "topk_sampled"),
        {"select": {"kind": "topk_sampled", "density": 0.05}},
    ),
    "select-random_k": (("selector", "random_k"), {"select": {"kind": "random_k", "density": 0.1}}),
    # Unbiased random-k is contractive under feedback only for omega = n/k - 1 < 1.
    "select-random_k-unbiased": (
        ("selector", "random_k"),
        {"select": {"kind": "random_k", "density": 0.75, "unbiased": True}},
    ),
    "select-random_block": (
        ("selector", "random_block"),
        {"select": {"kind": "random_block", "density": 0.1}},
    ),
    # Independent blocks: contractive under feedback only for omega = n/k - 1 < 1.
    "select-random_block-unbiased": (
        ("selector", "random_block"),
        {"select": {"kind": "random_block", "density": 0.75, "unbiased": True}},
    ),
    "select-rtopk": (("selector", "rtopk"), {"select": {"kind": "rtopk", "density": 0.05}}),
    "select-threshold": (("selector", "threshold"), {"select": {"kind": "threshold", "lam": 1.5}}),
    "select-adaptive": (
        ("selector", "adaptive"),
        {"select": {"kind": "adaptive", "density": 0.05, "min_density": 0.01}},
    ),
    "select-shared_mask": (("selector", "shared_mask"), {"select": {"kind": "shared_mask"}}),
    # Without a mask the shared mask keeps every coordinate.
    "select-shared_mask-no-mask": (
        ("selector", "shared_mask"),
        {"select": {"kind": "shared_mask"}},
    ),
    "select-oktopk": (
        ("selector", "oktopk"),
        {"select": {"kind": "oktopk", "density": 0.1, "period": 3}},
    ),
    "select-sidco-exponential": (
        ("selector", "sidco"),
        {"select": {"kind": "sidco", "density": 0.1}},
    ),
    "select-sidco-gpareto": (
        ("selector", "sidco"),
        {"select": {"kind": "sidco", "density": 0.1, "family": "gpareto"}},
    ),
    "select-sidco-gamma": (
        ("selector", "sidco"),
        {"select": {"kind": "sidco", "density": 0.1, "family": "gamma", "stages": 1}},
    ),
    "quantize-none": (("quantizer", "none"), {"select": TOPK, "quantize": {"kind": "none"}}),
    "quantize-fp16": (("quantizer", "fp16"), {"quantize": {"kind": "fp16"}}),
    "quantize-bf16": (("quantizer", "bf16"), {"quantize": {"kind": "bf16"}}),
    # Bucketed so that omega = min(64/16^2, 8/16) < 1 (contractive under feedback).
    "quantize-qsgd": (
        ("quantizer", "qsgd"),
        {"quantize": {"kind": "qsgd", "levels": 16, "bucket": 64}},
    ),
    "quantize-sign": (("quantizer", "sign"), {"quantize": {"kind": "sign", "bucket": 32}}),
    "sign-top-k": (("quantizer", "sign"), {"select": TOPK, "quantize": {"kind": "sign"}}),
    # omega = min(64 / (4 * 7^2), 8 / 7) < 1 for 4-bit levels in buckets of 64.
    "quantize-multiscale_qsgd": (
        ("quantizer", "multiscale_qsgd"),
        {"quantize": {"kind": "multiscale_qsgd", "bits": 4, "scales": 3, "bucket": 64}},
    ),
    "quantize-multiscale_qsgd-single-scale": (
        ("quantizer", "multiscale_qsgd"),
        {"quantize": {"kind": "multiscale_qsgd", "bits": 5, "scales": 1, "bucket": 0}},
    ),
    "topk-multiscale_qsgd": (
        ("quantizer", "multiscale_qsgd"),
        {"select": TOPK, "quantize": {"kind": "multiscale_qsgd", "bucket": 0}},
    ),
    "quantize-two_mean_sign": (
        ("quantizer", "two_mean_sign"),
        {"quantize": {"kind": "two_mean_sign", "bucket": 32}},
    ),
    "two_mean_sign-per-tensor": (
        ("quantizer", "two_mean_sign"),
        {"quantize": {"kind": "two_mean_sign"}},
    ),
    "feedback-none": (("feedback", "none"), {"select": TOPK, "error_feedback": False}),
    "feedback-residual": (("feedback", "residual"), {"select": TOPK, "error_feedback": True}),
    "feedback-dgc": (
        ("feedback", "dgc"),
        {"select": TOPK, "error_feedback": {"kind": "dgc", "momentum": 0.9}},
    ),
    "lowrank-none": (("low-rank codec", "none"), {"select": TOPK, "lowrank": {"kind": "none"}}),
    "lowrank-powersgd": (("low-rank codec", "powersgd"), {"lowrank": {"kind": "powersgd"}}),
    # Error feedback around it is the residual wrapper, which the checks add themselves.
    "lowrank-powersgd-rank-1": (
        ("low-rank codec", "powersgd"),
        {"lowrank": {"kind": "powersgd", "rank": 1, "min_compression_rate": 1.0}},
    ),
    "lowrank-powersgd-cold-qr": (
        ("low-rank codec", "powersgd"),
        {"lowrank": {"kind": "powersgd", "rank": 4, "warm_start": False, "orthogonalize": "qr"}},
    ),
}

# Kinds whose section refuses to validate anywhere a codec is built (their reason is the
# section's error), so no codec of theirs can be checked.
REFUSED = {("low-rank codec", "acp_sgd")}

SHAPE = (20, 50)


def _mask(n: int) -> EncodeArgs:
    return EncodeArgs(mask=SeededSupport(99, SeedScheme.RANDOM_K, max(1, 9 * n // 10)))


# id -> the per-call arguments of a domain of n coordinates (entries not listed pass none)
ARGS = {"select-shared_mask": _mask}


def args_for(entry: str, n: int) -> EncodeArgs:
    make = ARGS.get(entry)
    return make(n) if make is not None else NO_ARGS


def test_table_covers_every_registered_kind():
    covered = {role_kind for role_kind, _ in TABLE.values()}
    registered = {
        (registry.family, kind)
        for registry in (TRANSFORMS, SELECTORS, QUANTIZERS, FEEDBACKS, LOWRANK)
        for kind in registry.kinds()
    } - REFUSED
    assert registered == covered, f"missing from the table: {sorted(registered - covered)}"


def codec_for(entry: str):
    _, sections = TABLE[entry]
    return build(CodecConfig.model_validate(sections), seed=123)


def tensors_of(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj):
        return [t for f in dataclasses.fields(obj) for t in tensors_of(getattr(obj, f.name))]
    return []


def inputs(device, steps=1):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(SHAPE, generator=g).to(device) for _ in range(steps)]


@pytest.mark.parametrize("entry", TABLE)
def test_decode_has_the_input_shape_float32_finite_and_device(entry, device):
    codec = codec_for(entry)
    (x,) = inputs(device)
    payload, _ = codec.encode(x, codec.init(x), args_for(entry, x.numel()))
    assert payload.shape == codec.wire_shape(SHAPE)
    assert all(t.device == x.device for t in tensors_of(payload))
    decoded = codec.decode(payload, SHAPE)
    assert decoded.shape == SHAPE and decoded.dtype == torch.float32
    assert decoded.device == x.device
    assert bool(torch.isfinite(decoded).all())


@pytest.mark.parametrize("entry", TABLE)
def test_encoding_twice_from_one_state_repeats_payload_and_state(
    entry, device, same_payload, same_state
):
    codec = codec_for(entry)
    (x,) = inputs(device)
    args = args_for(entry, x.numel())
    state = codec.init(x)
    _, state = codec.encode(x, state, args)  # a state with history, not just the initial one
    first, after_first = codec.encode(x, state, args)
    second, after_second = codec.encode(x, state, args)
    assert same_payload(first, second)
    assert same_state(after_first, after_second)


@pytest.mark.parametrize("entry", TABLE)
def test_error_feedback_residual_stays_bounded(entry, device):
    codec = codec_for(entry)
    if TABLE[entry][0][0] != "feedback":
        codec = with_error_feedback(codec)
    xs = inputs(device, steps=50)
    state = codec.init(xs[0])
    n = xs[0].numel()
    info = codec.info
    if info.lossless:
        delta = 1.0
    elif info.delta is not None and info.delta(n) > 0:
        delta = info.delta(n)
    elif info.omega is not None and info.omega(n) < 1:
        delta = 1.0 - info.omega(n)
    else:
        delta = 0.1  # absolute compressors (threshold) and casts: a generous fixed bound
    largest = max(float(x.norm()) for x in xs)
    args = args_for(entry, n)
    for x in xs:
        _, state = codec.encode(x, state, args)
        memory = state.residual if hasattr(state, "residual") else getattr(state, "velocity", None)
        if memory is not None:
            assert float(memory.norm()) <= 2.0 / delta * largest
            assert bool(torch.isfinite(memory).all())


@pytest.mark.parametrize("entry", TABLE)
def test_error_is_within_the_stated_bound(entry, device):
    # Lossless codecs round-trip exactly; lossy ones meet their delta or omega claim (in
    # the mean over draws for random codecs; exactly per call for deterministic ones).
    codec = codec_for(entry)
    x = inputs(device)[0] * torch.linspace(0.1, 3.0, SHAPE[1], device=device)
    info, energy, n = codec.info, float(x.square().sum()), x.numel()
    # A feedback wrapper compresses x + e: restart it each draw so it compresses x itself.
    restart = TABLE[entry][0][0] == "feedback"
    state = codec.init(x)
    errors = []
    args = args_for(entry, n)
    for _ in range(30):
        payload, state = codec.encode(x, codec.init(x) if restart else state, args)
        errors.append(float((codec.decode(payload, SHAPE) - x).square().sum()))
    mean = sum(errors) / len(errors)
    if info.lossless:
        assert max(errors) == 0.0
    elif info.delta is not None:
        assert mean <= (1.0 - info.delta(n)) * energy * 1.02
    elif info.omega is not None:
        assert mean <= info.omega(n) * energy * 1.02
    else:  # threshold (absolute bound) and casts (relative rounding)
        assert mean <= max(n * 1.5**2, 2.0**-16 * energy)


@pytest.mark.parametrize("shape", [(1,), (3,), (7, 9), SHAPE])
@pytest.mark.parametrize("entry", TABLE)
def test_every_codec_declares_the_payload_forms_it_sends(entry, shape):
    # Receivers refuse any other form before decoding, so an honest sender must never
    # produce one its codec does not declare (at any tensor size: a top-k of a tiny tensor
    # keeps every coordinate and goes dense).
    codec = codec_for(entry)
    forms = codec.forms(shape)
    assert forms.supports is not None and forms.values is not None
    g = torch.Generator().manual_seed(3)
    for x in (torch.randn(shape, generator=g), torch.full(shape, 2.0), torch.zeros(shape)):
        payload, _ = codec.encode(x, codec.init(x), args_for(entry, x.numel()))
        check_forms({"t": payload}, {"t": forms})
