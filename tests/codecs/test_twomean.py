"""two_mean_sign: A2SGD's two local averages, with the sign pattern a star's server needs."""

import numpy as np
import pytest
import torch

from thinwire.codecs import chain, scaled_sign, two_mean_sign, with_error_feedback
from thinwire.codecs.forms import FormError, check_forms
from thinwire.wire import Kind, TensorSpec, Update, WireError, decode, encode
from thinwire.wire import update_pb2 as pb


def roundtrip(codec, x):
    payload, _ = codec.encode(x, codec.init(x))
    return payload, codec.decode(payload, tuple(x.shape))


@pytest.mark.parametrize("bucket", [0, 7, 64])
def test_it_is_the_orthogonal_projection_onto_the_two_sign_indicators(bucket):
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    _, x_hat = roundtrip(chain(two_mean_sign(bucket)), x)
    # Per bucket and sign class every coordinate carries the class mean ...
    size = bucket or x.numel()
    for start in range(0, x.numel(), size):
        part, approx = x[start : start + size], x_hat[start : start + size]
        for members in (part >= 0, part < 0):
            if members.any():
                assert torch.allclose(approx[members], part[members].mean(), atol=1e-6)
    # ... so the error is orthogonal to the estimate: ||x - x_hat||^2 = ||x||^2 - ||x_hat||^2.
    error = float((x - x_hat).square().sum())
    assert error == pytest.approx(float(x.square().sum() - x_hat.square().sum()), rel=1e-4)
    assert float(torch.dot(x - x_hat, x_hat)) == pytest.approx(0.0, abs=1e-3)


def test_it_errs_no_more_than_scaled_sign():
    # span{1_P, 1_N} contains scaled sign's 1_P - 1_N.
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        x = torch.randn(500, generator=g) + torch.rand(1, generator=g)
        _, two = roundtrip(chain(two_mean_sign()), x)
        _, one = roundtrip(chain(scaled_sign()), x)
        assert float((x - two).square().sum()) <= float((x - one).square().sum()) + 1e-4


def test_zeros_join_the_positive_class_and_an_all_zero_tensor_decodes_to_zero():
    payload, x_hat = roundtrip(chain(two_mean_sign()), torch.tensor([0.0, 3.0, -2.0]))
    assert x_hat.tolist() == [1.5, 1.5, -2.0]
    _, zero = roundtrip(chain(two_mean_sign()), torch.zeros(5))
    assert zero.tolist() == [0.0] * 5


def test_error_feedback_keeps_the_local_error_a_minus_a_hat():
    codec = with_error_feedback(chain(two_mean_sign()))
    g = torch.Generator().manual_seed(2)
    state = codec.init(torch.zeros(50))
    residual = torch.zeros(50)
    for _ in range(5):
        grad = torch.randn(50, generator=g)
        payload, state = codec.encode(grad, state)
        a = grad + residual
        residual = a - codec.decode(payload, (50,))
        assert torch.allclose(state.residual, residual, atol=1e-5)


def test_a_million_parameters_cost_one_bit_each_plus_two_floats():
    n = 1 << 20
    x = torch.randn(n, generator=torch.Generator().manual_seed(3))
    payload, x_hat = roundtrip(chain(two_mean_sign()), x)
    data = encode(Update("c", 1, Kind.MODEL_DELTA, {"w": payload}))
    assert n // 8 + 8 <= len(data) <= n // 8 + 64
    received = decode(data, [TensorSpec("w", (n,))]).tensors["w"]
    assert torch.equal(chain(two_mean_sign()).decode(received, (n,)), x_hat)
    # A Gaussian's sign classes have means +-sqrt(2/pi): delta = 2/pi, far above 1/n.
    kept = float(x_hat.square().sum() / x.square().sum())
    assert kept == pytest.approx(2 / np.pi, abs=0.01)


def tampered(field: str, value: bytes) -> bytes:
    x = torch.tensor([1.0, -2.0, 3.0, -4.0])
    payload, _ = roundtrip(chain(two_mean_sign()), x)
    message = pb.Update()
    message.ParseFromString(encode(Update("c", 1, Kind.MODEL_DELTA, {"w": payload})))
    setattr(message.tensors[0].sign, field, value)
    return message.SerializeToString()


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("negative_scales", b"\x00\x00\x80\x3f" * 2, "sign negative scales are 8 bytes"),
        ("negative_scales", np.float32([np.nan]).tobytes(), "sign negative scales[0] is nan"),
        ("negative_scales", np.float32([-1.0]).tobytes(), "sign negative scales[0] is -1.0"),
        ("scales", np.float32([np.inf]).tobytes(), "sign scales[0] is inf"),
    ],
)
def test_hostile_scales_are_refused_naming_the_problem(field, value, problem):
    with pytest.raises(WireError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        decode(tampered(field, value), [TensorSpec("w", (4,))])


def test_a_one_sided_sign_payload_is_refused_by_a_two_mean_receiver():
    # Dropping the negative magnitudes leaves a well-formed scaled-sign message.
    received = decode(tampered("negative_scales", b""), [TensorSpec("w", (4,))]).tensors
    codec = chain(two_mean_sign())
    with pytest.raises(FormError, match="two_sided_sign"):
        check_forms(received, {"w": codec.forms((4,))})
    with pytest.raises(WireError, match="two-sided sign values"):
        codec.decode(received["w"], (4,))
