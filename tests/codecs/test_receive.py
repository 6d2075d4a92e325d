"""The receive path: form check before any codec code, then decode, then finite and bounded."""

from __future__ import annotations

import math

import pytest
import torch

from thinwire.codecs.forms import FormError
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import BoundError, check_bounded, l2_norm, norm_bound, open_payloads
from thinwire.config import CodecConfig
from thinwire.wire import Payload, TensorSpec

SPEC = [TensorSpec("w", (100,)), TensorSpec("b", (4,))]


def payloads(codec: ModelCodec, value: float) -> dict[str, Payload]:
    tensors = {s.name: torch.full(s.shape, value) for s in SPEC}
    out, _ = codec.encode(tensors, codec.init(tensors))
    return out


def test_the_form_is_checked_before_the_codec_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = ModelCodec(CodecConfig.model_validate({"quantize": {"kind": "sign"}}), SPEC, seed=0)
    calls = []
    monkeypatch.setattr(codec, "decode", lambda *args: calls.append(args))
    dense = payloads(ModelCodec.dense(SPEC), 0.1)
    with pytest.raises(FormError, match="tensor 'w': dense support with fp32 values"):
        open_payloads(codec, dense, torch.device("cpu"), max_norm=None)
    assert calls == []


def test_decoded_values_must_be_finite_and_within_the_bound() -> None:
    codec = ModelCodec.dense(SPEC)
    ok = open_payloads(codec, payloads(codec, 0.1), torch.device("cpu"), max_norm=1.1)
    assert ok["w"].shape == (100,) and ok["b"].shape == (4,)
    with pytest.raises(BoundError, match=r"l2 norm 1\.02, above this receiver's bound 1"):
        open_payloads(codec, payloads(codec, 0.1), torch.device("cpu"), max_norm=1.0)
    huge = {"w": torch.full((100,), 3e38)}
    with pytest.raises(BoundError, match="above"):
        check_bounded(huge, 1e39)  # the norm 3e39 overflows float32, not float64
    with pytest.raises(BoundError, match="tensor 'b': the decoded downlink is not finite"):
        check_bounded({"w": torch.zeros(2), "b": torch.tensor([math.inf])}, None, what="downlink")


def test_the_bound_follows_the_reference_norm_with_a_floor_of_one() -> None:
    assert norm_bound({"w": torch.zeros(10)}, 100.0) == 100.0
    assert norm_bound(torch.full((4,), 3.0), 10.0) == pytest.approx(60.0)
    assert l2_norm([torch.full((4,), 3e38)]) == pytest.approx(6e38, rel=1e-6)
