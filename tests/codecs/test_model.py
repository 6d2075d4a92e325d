"""ModelCodec: one codec configuration applied to every named tensor, or to the flat model."""

import pytest
import torch

from thinwire.codecs.model import FLAT_NAME, ModelCodec
from thinwire.config import CodecConfig
from thinwire.learning import unflatten
from thinwire.wire import Kind, TensorSpec, Update, decode, encode

SPEC = [TensorSpec("layer.weight", (8, 16)), TensorSpec("layer.bias", (8,))]


def tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {s.name: torch.randn(s.shape, generator=g) for s in SPEC}


def config(scope: str, **sections) -> CodecConfig:
    return CodecConfig.model_validate({"scope": scope, **sections})


def test_dense_codec_is_lossless_and_keeps_names_and_shapes():
    codec = ModelCodec.dense(SPEC)
    x = tensors()
    payloads, _ = codec.encode(x, codec.init(x))
    decoded = codec.decode(payloads, torch.device("cpu"))
    assert codec.lossless and list(decoded) == [s.name for s in SPEC]
    assert all(torch.equal(decoded[name], x[name]) for name in x)


def test_tensor_scope_selects_per_tensor():
    codec = ModelCodec(config("tensor", select={"kind": "topk", "density": 0.25}), SPEC, seed=1)
    x = tensors()
    payloads, _ = codec.encode(x, codec.init(x))
    assert list(payloads) == ["layer.weight", "layer.bias"]
    assert [p.count for p in payloads.values()] == [32, 2]
    assert codec.wire_spec == tuple(SPEC)


def test_model_scope_selects_across_the_flat_model():
    codec = ModelCodec(config("model", select={"kind": "topk", "density": 0.25}), SPEC, seed=1)
    x = tensors()
    payloads, _ = codec.encode(x, codec.init(x))
    assert list(payloads) == [FLAT_NAME] and payloads[FLAT_NAME].count == 34
    assert codec.wire_spec == (TensorSpec(FLAT_NAME, (136,)),)
    decoded = codec.decode(payloads, torch.device("cpu"))
    flat = torch.cat([x[s.name].reshape(-1) for s in SPEC])
    kept = torch.cat([decoded[s.name].reshape(-1) for s in SPEC]) != 0
    assert float(flat[kept].abs().min()) >= float(flat[~kept].abs().max())


@pytest.mark.parametrize("scope", ["tensor", "model"])
def test_payloads_survive_the_wire(scope):
    codec = ModelCodec(
        config(scope, select={"kind": "random_k", "density": 0.5}, quantize={"kind": "qsgd"}),
        SPEC,
        seed=2,
    )
    x = tensors()
    payloads, _ = codec.encode(x, codec.init(x))
    data = encode(Update("client-0", 0, Kind.MODEL_DELTA, payloads))
    received = decode(data, codec.wire_spec).tensors
    direct = codec.decode(payloads, torch.device("cpu"))
    via_wire = codec.decode(received, torch.device("cpu"))
    assert all(torch.equal(direct[name], via_wire[name]) for name in direct)


def test_model_scope_reads_back_to_back_tensors_without_a_copy():
    # A client's update lies back to back in one buffer (`model_delta`): its flat vector is
    # a view, and the dense payload holds that buffer itself.
    codec = ModelCodec(config("model"), SPEC, seed=0)
    buffer = torch.randn(sum(s.numel for s in SPEC))
    x = unflatten(buffer, tensors())
    payloads, _ = codec.encode(x, codec.init(x))
    assert payloads[FLAT_NAME].values.data.data_ptr() == buffer.data_ptr()


@pytest.mark.parametrize(
    "layout",
    ["separate", "reversed in one buffer", "with a gap", "non-contiguous"],
)
def test_model_scope_copies_tensors_that_are_not_its_flat_vector(layout):
    codec = ModelCodec(config("model", select={"kind": "topk", "density": 0.25}), SPEC, seed=0)
    x = tensors()
    n_w, n_b = (s.numel for s in SPEC)
    if layout == "reversed in one buffer":
        buffer = torch.cat([x["layer.bias"], x["layer.weight"].reshape(-1)])
        x = {"layer.weight": buffer[n_b:].view(8, 16), "layer.bias": buffer[:n_b]}
    elif layout == "with a gap":
        buffer = torch.cat([x["layer.weight"].reshape(-1), torch.zeros(1), x["layer.bias"]])
        x = {"layer.weight": buffer[:n_w].view(8, 16), "layer.bias": buffer[n_w + 1 :]}
    elif layout == "non-contiguous":
        x = {"layer.weight": x["layer.weight"].t().contiguous().t(), "layer.bias": x["layer.bias"]}
    copies = {k: v.clone() for k, v in x.items()}
    payloads, _ = codec.encode(x, codec.init(x))
    expected, _ = codec.encode(copies, codec.init(copies))
    assert encode(Update("c", 1, Kind.MODEL_DELTA, payloads)) == encode(
        Update("c", 1, Kind.MODEL_DELTA, expected)
    )


def test_tensors_of_a_model_draw_independent_seeds():
    codec = ModelCodec(config("tensor", select={"kind": "random_k", "density": 0.5}), SPEC, seed=3)
    x = tensors()
    payloads, _ = codec.encode(x, codec.init(x))
    seeds = {p.support.seed for p in payloads.values()}
    assert len(seeds) == 2


def test_error_feedback_state_is_kept_per_payload():
    codec = ModelCodec(
        config("tensor", select={"kind": "topk", "density": 0.1}, error_feedback=True), SPEC, seed=4
    )
    x = tensors()
    state = codec.init(x)
    _, state = codec.encode(x, state)
    assert set(state) == {"layer.weight", "layer.bias"}
    assert state["layer.weight"].residual.shape == (8, 16)
