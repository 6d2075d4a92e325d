"""The codec interface: chain() is its stages applied in turn; docstring examples run."""

import doctest
import importlib
import math

import pytest
import torch

import thinwire.codecs
from thinwire.codecs import (
    Codec,
    CodecInfo,
    cast,
    chain,
    qsgd,
    random_k,
    scaled_sign,
    scatter,
    top_k,
    wavelet,
)
from thinwire.wire.payload import Payload

MODULES = [
    "thinwire.codecs",
    "thinwire.codecs.base",
    "thinwire.codecs.bounds",
    "thinwire.codecs.feedback",
    "thinwire.codecs.quantize",
    "thinwire.codecs.registry",
    "thinwire.codecs.seeded",
    "thinwire.codecs.selection",
    "thinwire.codecs.sparsify",
    "thinwire.codecs.support",
    "thinwire.codecs.wavelet",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_base_module_example_is_a_doctest():
    base = importlib.import_module("thinwire.codecs.base")
    assert 'chain(top_k(density=0.25), cast("fp16"))' in base.__doc__
    assert doctest.testmod(base).attempted >= 6


def test_chain_is_its_stages_applied_one_at_a_time(same_payload):
    x = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    transform, selector, quantizer = wavelet("sym2", 2), top_k(0.2), qsgd(8, 16, seed=3)
    codec = chain(transform, selector, quantizer)
    payload, state = codec.encode(x, codec.init(x))

    n = transform.size(x.numel())
    y = transform.forward(x.reshape(-1))
    support, kept, selector_state = selector.select(y, selector.init(n, x.device))
    values, quantizer_state = quantizer.quantize(kept, quantizer.init(x.device))
    assert same_payload(payload, Payload((n,), support, values))
    assert state.selector == selector_state and state.quantizer == quantizer_state

    by_hand = transform.inverse(
        scatter(support, quantizer.dequantize(values), n), x.numel()
    ).reshape(x.shape)
    assert torch.equal(codec.decode(payload, x.shape), by_hand)
    assert codec.wire_shape(tuple(x.shape)) == (n,)
    assert codec.transform is transform


def test_chain_without_a_transform_indexes_the_tensor_itself():
    x = torch.randn(3, 4)
    codec = chain(top_k(0.5))
    assert codec.wire_shape((3, 4)) == (3, 4) and codec.transform is None
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.shape == (3, 4)


def test_empty_chain_is_lossless():
    x = torch.randn(3, 4)
    codec = chain()
    assert codec.info.lossless
    assert torch.equal(codec.decode(codec.encode(x, codec.init(x))[0], x.shape), x)


@pytest.mark.parametrize(
    "stages",
    [(top_k(0.1), wavelet()), (cast("fp16"), top_k(0.1)), (top_k(0.1), top_k(0.2))],
    ids=["selector-before-transform", "quantizer-before-selector", "two-selectors"],
)
def test_chain_rejects_stages_out_of_order_or_repeated(stages):
    with pytest.raises(ValueError, match="in that order"):
        chain(*stages)


def test_chain_composes_contraction_and_variance_claims():
    sign_top_k = chain(top_k(0.1), scaled_sign())
    assert sign_top_k.info.delta(100) == pytest.approx(0.1 * 0.01)
    unbiased = chain(random_k(0.5, seed=0, unbiased=True), qsgd(4, seed=0))
    omega_q = min(100 / 16, 10 / 4)
    assert unbiased.info.unbiased
    assert unbiased.info.omega(100) == pytest.approx(2 * (1 + omega_q) - 1)
    mixed = chain(top_k(0.1), qsgd(4, seed=0))
    assert not mixed.info.unbiased and mixed.info.delta is None


def test_public_surface_is_listed():
    for name in thinwire.codecs.__all__:
        assert hasattr(thinwire.codecs, name), name
    assert {"chain", "Codec", "CodecInfo", "build", "with_error_feedback", "with_dgc"} <= set(
        thinwire.codecs.__all__
    )
    assert isinstance(chain(), Codec) and isinstance(chain().info, CodecInfo)
    assert math.isclose(chain().info.delta(10), 1.0)
