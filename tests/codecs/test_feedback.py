"""Error feedback and DGC: nothing is lost, only delayed."""

import pytest
import torch

from thinwire.codecs import (
    cast,
    chain,
    qsgd,
    random_block,
    random_k,
    rtop_k,
    sampled_top_k,
    scaled_sign,
    seeded_indices,
    threshold,
    top_k,
    wavelet,
    with_dgc,
    with_error_feedback,
)

SPARSIFIERS = {
    "top_k": lambda: chain(top_k(0.05)),
    "sampled_top_k": lambda: chain(sampled_top_k(0.05)),
    "random_k": lambda: chain(random_k(0.05, seed=1)),
    "random_block": lambda: chain(random_block(0.05, seed=2)),
    "rtop_k": lambda: chain(rtop_k(0.05, seed=3)),
    "threshold": lambda: chain(threshold(1.5)),
}
QUANTIZED = {
    "qsgd": lambda: chain(qsgd(4, 16, seed=4)),
    "sign_top_k": lambda: chain(top_k(0.05), scaled_sign()),
    "fp16": lambda: chain(cast("fp16")),
    "wavelet_top_k": lambda: chain(wavelet("sym2", 2), top_k(0.1)),
}


def stream(steps: int, shape=(20, 25)):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g) for _ in range(steps)]


@pytest.mark.parametrize("name", SPARSIFIERS)
def test_sparsifier_feedback_loses_nothing_bit_for_bit(name):
    codec = with_error_feedback(SPARSIFIERS[name]())
    xs = stream(10)
    state = codec.init(xs[0])
    for x in xs:
        old = state.residual
        payload, state = codec.encode(x, state)
        decoded = codec.decode(payload, x.shape)
        assert torch.equal(decoded + state.residual, x + old)
        assert state.residual.dtype == torch.float32 and state.residual.shape == x.shape


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_feedback_loses_at_most_a_rounding(name):
    # decode + (a - decode) == a up to one rounding of the subtraction: 1 ulp of the
    # larger operand.
    codec = with_error_feedback(QUANTIZED[name]())
    xs = stream(10)
    state = codec.init(xs[0])
    for x in xs:
        accumulated = x + state.residual
        payload, state = codec.encode(x, state)
        decoded = codec.decode(payload, x.shape)
        ulp = torch.finfo(torch.float32).eps * torch.maximum(accumulated.abs(), decoded.abs())
        assert bool(((decoded + state.residual - accumulated).abs() <= ulp).all())


def test_feedback_delivers_the_whole_sum_over_time():
    codec = with_error_feedback(chain(top_k(0.01)))
    xs = stream(200, shape=(100,))
    state = codec.init(xs[0])
    delivered = torch.zeros(100)
    for x in xs:
        payload, state = codec.encode(x, state)
        delivered += codec.decode(payload, x.shape)
    assert torch.allclose(delivered + state.residual, torch.stack(xs).sum(0), atol=1e-4)


def test_feedback_keeps_the_inner_codec_decoder_and_info():
    inner = chain(top_k(0.1))
    codec = with_error_feedback(inner)
    assert codec.decode is inner.decode and codec.info is inner.info
    assert codec.name == "ef(top_k(0.1)+fp32)"


def test_feedback_state_is_not_mutated():
    codec = with_error_feedback(chain(top_k(0.1)))
    x = stream(1)[0]
    state = codec.init(x)
    _, state = codec.encode(x, state)
    snapshot = state.residual.clone()
    codec.encode(x, state)
    assert torch.equal(state.residual, snapshot)


def test_feedback_reuses_its_sum_for_the_residual_unless_the_payload_holds_it():
    # a = x + e is the call's own buffer: a sparse payload copies what it sends, so the
    # new residual takes a's memory (no second model-sized tensor); a dense fp32 payload
    # may be a view of a, which must then stay intact.
    x = stream(1)[0]
    sparse = with_error_feedback(chain(top_k(0.1)))
    payload, state = sparse.encode(x, sparse.init(x))
    assert torch.equal(sparse.decode(payload, x.shape) + state.residual, x)
    dense = with_error_feedback(chain())
    payload, state = dense.encode(x, dense.init(x))
    assert torch.equal(dense.decode(payload, x.shape), x)
    assert torch.equal(state.residual, torch.zeros_like(x))


def dgc_by_hand(gs, momentum, nesterov, k):
    u = torch.zeros_like(gs[0])
    v = torch.zeros_like(gs[0])
    sent = []
    for g in gs:
        if nesterov:
            u = momentum * (u + g)
            v = v + u + g
        else:
            u = momentum * u + g
            v = v + u
        order = sorted(range(v.numel()), key=lambda i: (-abs(float(v[i])), i))[:k]
        out = torch.zeros_like(v)
        out[order] = v[order]
        sent.append(out)
        u[order] = 0.0
        v[order] = 0.0
    return sent, u, v


@pytest.mark.parametrize("nesterov", [False, True])
def test_dgc_matches_momentum_correction_and_masking_by_hand(nesterov):
    gs = stream(8, shape=(40,))
    codec = with_dgc(chain(top_k(0.1)), momentum=0.9, nesterov=nesterov)
    state = codec.init(gs[0])
    expected, u, v = dgc_by_hand(gs, 0.9, nesterov, 4)
    for g, want in zip(gs, expected, strict=True):
        payload, state = codec.encode(g, state)
        assert torch.allclose(codec.decode(payload, g.shape), want, atol=1e-6)
    assert torch.allclose(state.momentum, u, atol=1e-6)
    assert torch.allclose(state.velocity, v, atol=1e-6)


def test_dgc_masks_regenerated_seeded_coordinates():
    g = stream(1, shape=(200,))[0]
    codec = with_dgc(chain(random_k(0.1, seed=5)), momentum=0.5)
    payload, state = codec.encode(g, codec.init(g))
    sent = seeded_indices(payload.support, 200)
    assert bool((state.momentum[sent] == 0).all()) and bool((state.velocity[sent] == 0).all())
    unsent = torch.ones(200, dtype=torch.bool)
    unsent[sent] = False
    assert torch.equal(state.velocity[unsent], g[unsent])


def test_dgc_with_a_dense_codec_clears_everything():
    g = stream(1, shape=(10,))[0]
    codec = with_dgc(chain(cast("bf16")))
    _, state = codec.encode(g, codec.init(g))
    assert torch.equal(state.momentum, torch.zeros(10))
    assert torch.equal(state.velocity, torch.zeros(10))


def test_dgc_keeps_2d_shapes():
    g = stream(1)[0]
    codec = with_dgc(chain(top_k(0.1)))
    payload, state = codec.encode(g, codec.init(g))
    assert state.momentum.shape == g.shape and codec.decode(payload, g.shape).shape == g.shape


def test_dgc_rejects_transformed_codecs_and_bad_momentum():
    with pytest.raises(ValueError, match="transform stage"):
        with_dgc(chain(wavelet("haar", 1), top_k(0.1)))
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        with_dgc(chain(top_k(0.1)), momentum=1.0)
