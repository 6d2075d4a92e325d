"""The shared-mask selector: send the call's mask coordinates, and only its seed."""

import torch

from thinwire.codecs import (
    EncodeArgs,
    chain,
    seeded_indices,
    shared_mask,
    top_k,
    with_dgc,
    with_error_feedback,
)
from thinwire.codecs.model import ModelCodec
from thinwire.config import CodecConfig
from thinwire.wire import Kind, Update, decode, encode
from thinwire.wire.payload import DenseSupport, SeededSupport, SeedScheme, TensorSpec

MASK = SeededSupport(seed=99, scheme=SeedScheme.RANDOM_K, count=30)
WITH_MASK = EncodeArgs(mask=MASK)


def test_it_sends_the_values_at_the_mask_and_the_receiver_regenerates_the_coordinates():
    codec = chain(shared_mask())
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    payload, _ = codec.encode(x, codec.init(x), WITH_MASK)
    assert payload.support == MASK and payload.count == 30
    kept = seeded_indices(MASK, 100)
    expected = torch.zeros(100)
    expected[kept] = x[kept]
    assert torch.equal(codec.decode(payload, (100,)), expected)


def test_a_mask_serves_one_encode_and_leaves_the_state_as_init_made_it():
    codec = chain(shared_mask())
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    _, state = codec.encode(x, codec.init(x), WITH_MASK)
    assert state == codec.init(x)  # same structure to save and restore, no stale mask
    payload, _ = codec.encode(x, state)
    assert isinstance(payload.support, DenseSupport)


def test_without_a_mask_everything_is_sent_densely():
    codec = chain(shared_mask())
    x = torch.arange(6.0)
    for args in (EncodeArgs(), EncodeArgs(mask=None)):
        payload, _ = codec.encode(x, codec.init(x), args)
        assert isinstance(payload.support, DenseSupport)
        assert torch.equal(codec.decode(payload, (6,)), x)


def test_wrappers_and_per_tensor_codecs_forward_the_mask_to_the_selector():
    spec = (TensorSpec("model.w", (10, 10)),)
    config = CodecConfig.model_validate(
        {"scope": "model", "select": {"kind": "shared_mask"}, "error_feedback": True}
    )
    codec = ModelCodec(config, spec, seed=0)
    tensors = {"model.w": torch.randn(10, 10)}
    payloads, state = codec.encode(tensors, codec.init(tensors), WITH_MASK)
    assert payloads["model"].support == MASK
    # an exactly masked input leaves no residual for the error feedback to carry
    masked = codec.decode(payloads, torch.device("cpu"))
    _, after = codec.encode(masked, codec.init(tensors), WITH_MASK)
    assert after["model"].residual.abs().max() == 0
    x = torch.randn(100)
    dgc = with_dgc(chain(shared_mask()))
    payload, _ = dgc.encode(x, dgc.init(x), WITH_MASK)
    assert payload.support == MASK


def test_a_selector_that_reads_no_per_call_argument_ignores_them():
    codec = with_error_feedback(chain(top_k(0.1)))
    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    plain, plain_state = codec.encode(x, codec.init(x))
    masked, masked_state = codec.encode(x, codec.init(x), WITH_MASK)
    assert torch.equal(plain.support.indices, masked.support.indices)
    assert torch.equal(plain_state.residual, masked_state.residual)


def test_the_mask_travels_as_8_seed_bytes_instead_of_an_index_list():
    spec = (TensorSpec("w", (1000,)),)
    masked = ModelCodec(
        CodecConfig.model_validate({"select": {"kind": "shared_mask"}}), spec, seed=0
    )
    dense = ModelCodec.dense(spec)
    x = {"w": torch.randn(1000)}
    support = SeededSupport(5, SeedScheme.RANDOM_K, 100)
    payloads, _ = masked.encode(x, masked.init(x), EncodeArgs(mask=support))
    sent = encode(Update("client-0", 1, Kind.MODEL_DELTA, payloads))
    full, _ = dense.encode(x, dense.init(x))
    assert len(sent) < len(encode(Update("client-0", 1, Kind.MODEL_DELTA, full))) / 9
    received = decode(sent, masked.wire_spec)
    assert torch.equal(
        masked.decode(received.tensors, torch.device("cpu"))["w"],
        masked.decode(payloads, torch.device("cpu"))["w"],
    )
