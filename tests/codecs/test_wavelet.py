"""The wavelet transform: PyWavelets' coefficients, exact inversion, Parseval."""

import warnings

import numpy as np
import pytest
import pywt
import torch

from thinwire.codecs import chain, top_k, wavelet, wavelet_lengths
from thinwire.codecs.wavelet import _torch_forward, _torch_inverse

NAMES = ["haar", "sym2", "db4", "coif1", "bior2.2"]
LENGTHS = [1, 2, 3, 7, 16, 17, 100, 1001]


def pywt_coefficients(x: np.ndarray, name: str, level: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return np.concatenate(pywt.wavedec(x, name, mode="periodization", level=level))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("level", [1, 4])
def test_torch_path_matches_pywavelets_coefficients(name, n, level):
    x = np.random.default_rng(n).standard_normal(n)
    expected = pywt_coefficients(x, name, level)
    got = _torch_forward(torch.from_numpy(x), name, level)
    assert got.shape == (wavelet(name, level).size(n),) == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("level", [1, 4])
def test_torch_inverse_matches_pywavelets_reconstruction(name, n, level):
    x = np.random.default_rng(n + 1).standard_normal(n)
    coefficients = pywt_coefficients(x, name, level)
    parts = np.split(coefficients, np.cumsum(wavelet_lengths(n, level))[:-1])
    expected = pywt.waverec(parts, name, mode="periodization")[:n]
    got = _torch_inverse(torch.from_numpy(coefficients), n, name, level)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["haar", "sym2", "db4", "coif1"])
@pytest.mark.parametrize("n", LENGTHS)
def test_round_trip_is_exact_up_to_float_rounding(name, n):
    t = wavelet(name, 4)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    assert torch.allclose(t.inverse(t.forward(x), n), x, rtol=1e-5, atol=1e-5)
    x64 = x.double()  # PyWavelets stores sym2's taps to ~6e-13, which bounds float64 exactness
    assert torch.allclose(t.inverse(t.forward(x64), n), x64, rtol=1e-10, atol=1e-10)
    assert torch.allclose(_torch_inverse(_torch_forward(x, name, 4), n, name, 4), x, atol=1e-5)


@pytest.mark.parametrize("name", ["haar", "sym2", "db4"])
def test_orthogonal_wavelets_preserve_norms_when_the_length_divides(name):
    x = torch.randn(1024, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    coefficients = wavelet(name, 4).forward(x)
    assert coefficients.numel() == 1024
    assert float(coefficients.norm()) == pytest.approx(float(x.norm()), rel=1e-10)


def test_public_cpu_path_agrees_with_the_torch_path():
    x = torch.randn(999, generator=torch.Generator().manual_seed(1))
    t = wavelet("sym2", 4)
    assert torch.allclose(t.forward(x), _torch_forward(x, "sym2", 4), atol=1e-6)
    assert t.forward(x).dtype == torch.float32


def test_non_float32_inputs_take_the_torch_path():
    x = torch.randn(64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    coefficients = wavelet("haar", 2).forward(x)
    assert coefficients.dtype == torch.bfloat16
    expected = pywt_coefficients(x.float().numpy(), "haar", 2)
    np.testing.assert_allclose(coefficients.float().numpy(), expected, atol=0.05)


def test_lengths_and_layout():
    assert wavelet_lengths(17, 2) == [5, 5, 9]
    assert wavelet("sym2", 2).size(17) == 19
    x = torch.arange(8.0)
    coefficients = wavelet("haar", 3).forward(x)
    assert coefficients[0] == pytest.approx(float(x.sum()) / 8**0.5)  # a_3 first


def test_sparsifying_in_the_wavelet_domain_loses_less_on_smooth_signals():
    x = torch.sin(torch.linspace(0, 6.28, 1024)) + 0.01 * torch.linspace(0, 1, 1024) ** 2
    plain, domain = chain(top_k(0.05)), chain(wavelet("sym2", 4), top_k(0.05))
    plain_error = (x - plain.decode(plain.encode(x, plain.init(x))[0], x.shape)).norm()
    wavelet_error = (x - domain.decode(domain.encode(x, domain.init(x))[0], x.shape)).norm()
    assert float(wavelet_error) < 0.2 * float(plain_error)


def test_rejects_unknown_wavelets_bad_levels_and_mismatched_inverses():
    with pytest.raises(ValueError, match="unknown discrete wavelet 'morl'"):
        wavelet("morl")
    with pytest.raises(ValueError, match="level must be >= 1"):
        wavelet("haar", 0)
    t = wavelet("haar", 2)
    with pytest.raises(ValueError, match="has 11 coefficients, got 9"):
        t.inverse(torch.zeros(9), 10)
    with pytest.raises(ValueError, match="empty"):
        t.forward(torch.zeros(0))
