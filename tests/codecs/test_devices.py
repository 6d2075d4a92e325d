"""CUDA: codecs stay on the device and agree with the CPU bit for bit where they are exact.

Skipped on machines without CUDA. The registry-wide checks in test_conformance.py also run
on CUDA when it is present (the `device` fixture).
"""

import numpy as np
import pytest
import pywt
import torch

from thinwire.codecs import (
    chain,
    qsgd,
    random_block,
    random_k,
    sampled_top_k,
    scaled_sign,
    seeded_indices,
    top_k,
    wavelet,
    with_dgc,
    with_error_feedback,
)
from thinwire.codecs.selection import exact_top_k, sampled_top_k_indices
from thinwire.codecs.wavelet import _torch_forward
from thinwire.wire.payload import SeededSupport, SeedScheme

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


def data(kind: str, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    if kind == "ties":
        return torch.randint(-3, 4, (n,), generator=g).float()
    return torch.randn(n, generator=g)


@pytest.mark.parametrize("scheme", [SeedScheme.RANDOM_K, SeedScheme.RANDOM_BLOCK])
@pytest.mark.parametrize("n", [1, 17, 1000, 1 << 20, 25_000_000])
def test_seeded_indices_are_identical_on_cpu_and_cuda(scheme, n):
    support = SeededSupport(seed=987654321, scheme=scheme, count=max(1, n // 100))
    assert torch.equal(seeded_indices(support, n, CUDA).cpu(), seeded_indices(support, n))


@pytest.mark.parametrize("kind", ["gaussian", "ties"])
@pytest.mark.parametrize(("n", "k"), [(1000, 10), (1_000_003, 10_000), (4_000_000, 4_000)])
def test_top_k_kernels_agree_across_devices(kind, n, k):
    x = data(kind, n)
    expected = exact_top_k(x, k)
    assert torch.equal(exact_top_k(x.to(CUDA), k).cpu(), expected)
    assert torch.equal(sampled_top_k_indices(x.to(CUDA), k, 0.01).cpu(), expected)


@pytest.mark.parametrize("name", ["haar", "sym2", "db4"])
@pytest.mark.parametrize("n", [7, 1000, 1 << 20])
def test_wavelet_runs_on_cuda_and_matches_pywavelets(name, n):
    x = data("gaussian", n).double()
    expected = np.concatenate(pywt.wavedec(x.numpy(), name, mode="periodization", level=4))
    t = wavelet(name, 4)
    coefficients = t.forward(x.to(CUDA))
    assert coefficients.device.type == "cuda"
    np.testing.assert_allclose(coefficients.cpu().numpy(), expected, rtol=1e-9, atol=1e-9)
    assert torch.allclose(t.inverse(coefficients, n).cpu(), x, atol=1e-9)
    x32 = x.float()
    assert torch.allclose(
        _torch_forward(x32.to(CUDA), name, 4).cpu(), _torch_forward(x32, name, 4), atol=1e-5
    )


CODECS = {
    "top_k": lambda: chain(top_k(0.01)),
    "sampled_top_k": lambda: chain(sampled_top_k(0.01)),
    "random_k": lambda: chain(random_k(0.01, seed=3)),
    "random_block": lambda: chain(random_block(0.01, seed=4)),
    "sign_top_k": lambda: chain(top_k(0.01), scaled_sign()),
    "wavelet_top_k": lambda: chain(wavelet("sym2", 4), top_k(0.05)),
}


@pytest.mark.parametrize("name", CODECS)
def test_deterministic_codecs_give_the_same_payload_on_cuda(name):
    x = data("gaussian", 100_000).reshape(100, 1000)
    codec = CODECS[name]()
    cpu_payload, _ = codec.encode(x, codec.init(x))
    cuda_x = x.to(CUDA)
    cuda_payload, _ = codec.encode(cuda_x, codec.init(cuda_x))
    cpu_decoded = codec.decode(cpu_payload, x.shape)
    # A receiver on either device decodes either sender's payload to the same tensor.
    assert torch.allclose(codec.decode(cuda_payload, x.shape).cpu(), cpu_decoded, atol=1e-5)
    assert torch.allclose(codec.decode(cpu_payload.to(CUDA), x.shape).cpu(), cpu_decoded, atol=1e-5)
    # Bit equality holds where no floating-point reduction is involved: the wavelet's
    # convolutions and sign's scale (a sum, ||top_k||_1 / k) round in device-specific orders.
    if name not in ("wavelet_top_k", "sign_top_k"):
        assert torch.equal(codec.decode(cuda_payload, x.shape).cpu(), cpu_decoded)


def test_qsgd_on_cuda_is_unbiased_and_stays_there():
    x = data("gaussian", 64).to(CUDA)
    codec = chain(qsgd(4, 16, seed=1))
    state = codec.init(x)
    total = torch.zeros_like(x)
    for _ in range(2000):
        payload, state = codec.encode(x, state)
        assert payload.values.levels.device.type == "cuda"
        total += codec.decode(payload, x.shape)
    assert float((total / 2000 - x).abs().max()) < 5 * float(x.norm()) / (2 * 4 * 2000**0.5)


def test_feedback_state_lives_on_cuda():
    x = data("gaussian", 10_000).to(CUDA)
    for codec in (with_error_feedback(chain(top_k(0.01))), with_dgc(chain(random_k(0.01, seed=0)))):
        payload, state = codec.encode(x, codec.init(x))
        memory = state.residual if hasattr(state, "residual") else state.velocity
        assert memory.device.type == "cuda"
        assert codec.decode(payload, x.shape).device.type == "cuda"


def test_large_top_k_on_cuda_is_fast_enough_to_use():
    # Not a timing assertion: a smoke test that 25M floats at 1% select on the device.
    x = torch.randn(25_000_000, device=CUDA)
    indices = sampled_top_k_indices(x, 250_000, 0.01)
    assert indices.numel() == 250_000 and indices.device.type == "cuda"
    assert torch.equal(indices, exact_top_k(x, 250_000))
