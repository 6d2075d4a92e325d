"""The powersgd codec against its definition (Vogels et al. 2019, per-sender form).

One call: P = M Q_prev, P_hat = orth(P), Q = M^T P_hat; P_hat and Q travel and the
receiver multiplies out P_hat Q^T. Error feedback is the residual wrapper around it.
"""

import time

import pytest
import torch

from thinwire.codecs import build, with_error_feedback
from thinwire.codecs.forms import FormError, check_forms
from thinwire.codecs.lowrank import initial_q, orthogonalize
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.powersgd import powersgd
from thinwire.config import ACP_SGD_REFUSAL, CodecConfig
from thinwire.wire import (
    FactorSupport,
    Kind,
    Payload,
    RawValues,
    SparseSupport,
    TensorSpec,
    Update,
    decode,
    encode,
    factors,
)


def low_rank(n: int, m: int, r: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, r, generator=g) @ torch.randn(r, m, generator=g)


def config(**lowrank) -> CodecConfig:
    return CodecConfig.model_validate({"lowrank": {"kind": "powersgd", **lowrank}})


def test_one_call_is_one_step_of_subspace_iteration_from_the_seeded_q():
    codec = powersgd(3, seed=11)
    m = torch.randn(40, 30, generator=torch.Generator().manual_seed(1))
    state = codec.init(m)
    assert torch.equal(state.q, initial_q(30, 3, seed=11, device=m.device))
    payload, after = codec.encode(m, state)
    p_hat, q = factors(payload)
    expected_p = orthogonalize(m @ state.q)
    assert torch.allclose(p_hat, expected_p) and torch.allclose(q, m.T @ expected_p)
    assert torch.allclose(p_hat.T @ p_hat, torch.eye(3), atol=1e-5)  # orthonormal columns
    assert torch.equal(after.q, q)  # warm start: the next call starts from this Q


def test_a_rank_r_matrix_is_recovered_exactly():
    m = low_rank(64, 48, 2)
    codec = powersgd(2, seed=0)
    state = codec.init(m)
    for _ in range(3):
        payload, state = codec.encode(m, state)
        error = (codec.decode(payload, m.shape) - m).norm() / m.norm()
        assert error < 1e-5


def test_warm_started_calls_converge_to_the_best_rank_r_approximation():
    # Power iteration on a fixed M: the warm-started Q converges to M's top-r right singular
    # subspace, so the error reaches the Eckart-Young optimum (the tail singular values).
    g = torch.Generator().manual_seed(2)
    u, _ = torch.linalg.qr(torch.randn(50, 6, generator=g))
    v, _ = torch.linalg.qr(torch.randn(40, 6, generator=g))
    s = torch.tensor([10.0, 6.0, 2.0, 1.0, 0.5, 0.2])
    m = u @ torch.diag(s) @ v.T
    codec = powersgd(2, seed=0)
    state = codec.init(m)
    errors = []
    for _ in range(25):
        payload, state = codec.encode(m, state)
        errors.append(float((codec.decode(payload, m.shape) - m).norm()))
    optimum = float(s[2:].norm())
    assert errors[-1] == pytest.approx(optimum, rel=1e-4)
    assert errors[0] > errors[-1]


def test_without_warm_start_every_call_draws_a_fresh_seeded_q():
    m = low_rank(30, 20, 5)
    cold = powersgd(1, warm_start=False, seed=3)
    state = cold.init(m)
    _, state = cold.encode(m, state)
    first, s1 = cold.encode(m, state)
    again, _ = cold.encode(m, state)
    second, _ = cold.encode(m, s1)
    assert torch.equal(first.values.data, again.values.data)  # seeded: repeatable
    assert not torch.equal(first.values.data, second.values.data)  # a new Q each step


def test_qr_and_gram_schmidt_give_the_same_approximation():
    m = torch.randn(30, 25, generator=torch.Generator().manual_seed(4))
    out = []
    for orth in ("gram_schmidt", "qr"):
        codec = powersgd(3, orthogonalization=orth, seed=1)
        payload, _ = codec.encode(m, codec.init(m))
        out.append(codec.decode(payload, m.shape))
    assert torch.allclose(out[0], out[1], atol=1e-5)


def test_the_residual_is_the_matrix_minus_its_approximation():
    m = torch.randn(32, 24, generator=torch.Generator().manual_seed(5))
    codec = with_error_feedback(powersgd(2, seed=0))
    payload, state = codec.encode(m, codec.init(m))
    assert torch.allclose(state.residual, m - codec.decode(payload, m.shape), atol=1e-6)
    # A projection: the approximation never adds energy.
    assert float(state.residual.norm()) <= float(m.norm())


def test_error_feedback_makes_the_sum_sent_track_the_sum_of_inputs():
    # sum_t decode_t = sum_t x_t - e_T exactly, and e_T stays bounded, so the average of what
    # travelled converges to the average input.
    codec = build(
        CodecConfig.model_validate(
            {"lowrank": {"kind": "powersgd", "rank": 1}, "error_feedback": True}
        ),
        seed=0,
    )
    g = torch.Generator().manual_seed(6)
    drift = torch.randn(24, 16, generator=g)
    xs = [drift + 0.3 * torch.randn(24, 16, generator=g) for _ in range(60)]
    state = codec.init(xs[0])
    sent = torch.zeros(24, 16)
    for x in xs:
        payload, state = codec.encode(x, state)
        sent += codec.decode(payload, x.shape)
    total = sum(xs)
    assert torch.allclose(sent + state.residual, total, atol=1e-3)
    assert float(state.residual.norm()) < 0.2 * float(total.norm())


@pytest.mark.parametrize("shape", [(64,), (1,), (3, 4), (200, 2), (8, 8)])
def test_vectors_and_matrices_not_worth_compressing_pass_exactly(shape):
    codec = powersgd(4, seed=0)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    payload, _ = codec.encode(x, codec.init(x))
    assert codec.wire_shape(shape) == shape
    assert not isinstance(payload.support, FactorSupport)
    assert torch.equal(codec.decode(payload, shape), x)


def test_min_compression_rate_decides_which_matrices_go_dense():
    x = torch.randn(20, 20)  # (20 + 20) * 2 = 80 floats against 400: 5x smaller
    assert isinstance(
        powersgd(2, min_compression_rate=5.0, seed=0)
        .encode(x, powersgd(2, seed=0).init(x))[0]
        .support,
        FactorSupport,
    )
    dense = powersgd(2, min_compression_rate=5.5, seed=0)
    assert not isinstance(dense.encode(x, dense.init(x))[0].support, FactorSupport)


def test_a_conv_kernel_is_compressed_as_out_by_in_times_kh_times_kw():
    kernel = low_rank(16, 8 * 3 * 3, 2).reshape(16, 8, 3, 3)
    codec = powersgd(2, seed=0)
    assert codec.wire_shape((16, 8, 3, 3)) == (16, 72)
    payload, _ = codec.encode(kernel, codec.init(kernel))
    assert payload.shape == (16, 72) and payload.support == FactorSupport(2)
    p_hat, q = factors(payload)
    assert (p_hat.shape, q.shape) == ((16, 2), (72, 2))
    decoded = codec.decode(payload, (16, 8, 3, 3))
    assert decoded.shape == (16, 8, 3, 3)
    assert torch.allclose(decoded, kernel, atol=1e-4)


def test_a_matrix_no_wider_than_the_rank_goes_dense():
    # Factors of rank min(n, m) hold (n + m) min(n, m) >= n m floats: never worth sending.
    x = torch.randn(400, 3)
    codec = powersgd(8, min_compression_rate=1.0, seed=0)
    payload, _ = codec.encode(x, codec.init(x))
    assert codec.forms((400, 3)).supports == frozenset({"dense"})
    assert torch.equal(codec.decode(payload, x.shape), x)


def test_a_receiver_refuses_another_rank_and_a_sparse_payload():
    forms = {"w": powersgd(2, seed=0).forms((40, 30))}
    good = powersgd(2, seed=0)
    x = torch.randn(40, 30)
    check_forms({"w": good.encode(x, good.init(x))[0]}, forms)
    higher = powersgd(4, seed=0)
    with pytest.raises(
        FormError, match=r"tensor 'w': factors\(rank=4\) support .* sends factors\(rank=2\)"
    ):
        check_forms({"w": higher.encode(x, higher.init(x))[0]}, forms)
    sparse = Payload((40, 30), SparseSupport(torch.tensor([0, 5])), RawValues(torch.ones(2)))
    with pytest.raises(FormError, match="tensor 'w': sparse support"):
        check_forms({"w": sparse}, forms)


def test_a_top_k_receiver_refuses_factors():
    topk = ModelCodec(
        CodecConfig.model_validate({"select": {"kind": "topk", "density": 0.1}}),
        [TensorSpec("w", (40, 30))],
        seed=0,
    )
    payload = powersgd(2, seed=0).encode(
        torch.randn(40, 30), powersgd(2, seed=0).init(torch.randn(40, 30))
    )[0]
    with pytest.raises(FormError, match=r"tensor 'w': factors\(rank=2\) support"):
        check_forms({"w": payload}, topk.forms)


def test_the_model_codec_sends_factors_for_matrices_and_dense_biases():
    spec = [
        TensorSpec("conv.weight", (8, 4, 3, 3)),
        TensorSpec("conv.bias", (8,)),
        TensorSpec("fc.weight", (10, 288)),
    ]
    codec = ModelCodec(config(rank=2), spec, seed=0)
    assert [s.shape for s in codec.wire_spec] == [(8, 36), (8,), (10, 288)]
    g = torch.Generator().manual_seed(8)
    tensors = {s.name: torch.randn(s.shape, generator=g) for s in spec}
    payloads, _ = codec.encode(tensors, codec.init(tensors))
    data = encode(Update("client-0", 1, Kind.MODEL_DELTA, payloads))
    received = decode(data, codec.wire_spec).tensors
    check_forms(received, codec.forms)
    decoded = codec.decode(received, torch.device("cpu"))
    assert torch.equal(decoded["conv.bias"], tensors["conv.bias"])
    assert decoded["conv.weight"].shape == (8, 4, 3, 3)
    floats = (8 + 36) * 2 + 8 + (10 + 288) * 2
    assert floats * 4 < len(data) < floats * 4 + 120


def test_a_million_parameter_matrix():
    n = m = 1024
    x = torch.randn(n, m, generator=torch.Generator().manual_seed(9))
    x += low_rank(n, m, 4, seed=10) * 0.5  # a dominant rank-4 part, as gradients have
    codec = ModelCodec(
        CodecConfig.model_validate(
            {"lowrank": {"kind": "powersgd", "rank": 4}, "error_feedback": True}
        ),
        [TensorSpec("w", (n, m))],
        seed=0,
    )
    state = codec.init({"w": x})
    start = time.perf_counter()
    for _ in range(3):
        payloads, state = codec.encode({"w": x}, state)
    seconds = (time.perf_counter() - start) / 3
    data = encode(Update("client-0", 1, Kind.MODEL_DELTA, payloads))
    assert (n + m) * 4 * 4 < len(data) < (n + m) * 4 * 4 + 64  # 128x below fp32's 4 MiB
    decoded = codec.decode(decode(data, codec.wire_spec).tensors, torch.device("cpu"))["w"]
    best = torch.linalg.svdvals(x)
    optimum = float(best[4:].norm() / best.norm())
    assert float((decoded - x).norm() / x.norm()) < optimum * 1.05
    assert seconds < 2.0


@pytest.mark.parametrize(
    ("sections", "problem"),
    [
        (
            {"select": {"kind": "topk", "density": 0.1}},
            "replaces transform, select and quantize; remove select",
        ),
        ({"quantize": {"kind": "fp16"}}, "remove quantize"),
        ({"transform": {"kind": "wavelet"}}, "remove transform"),
        ({"scope": "model"}, "which is no matrix; use scope: tensor"),
        ({"error_feedback": {"kind": "dgc"}}, "error_feedback 'dgc'"),
    ],
)
def test_the_config_refuses_what_does_not_compose_with_powersgd(sections, problem):
    with pytest.raises(ValueError, match=problem):
        CodecConfig.model_validate({"lowrank": {"kind": "powersgd"}, **sections})


def test_acp_sgd_is_refused_with_its_reason():
    with pytest.raises(ValueError) as caught:
        CodecConfig.model_validate({"lowrank": {"kind": "acp_sgd"}})
    assert ACP_SGD_REFUSAL in str(caught.value)
    assert "thinwire.ddp.ACPSGD" in ACP_SGD_REFUSAL


def test_build_names_the_codec():
    assert build(config(rank=3), seed=0).name == "powersgd(rank=3)"
