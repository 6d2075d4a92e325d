"""Shared helpers for the codec tests: payload comparison and device parametrization."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from thinwire.wire.payload import Payload

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _same_payload(a: Payload, b: Payload) -> bool:
    return _same(a, b)


@pytest.fixture
def same_payload():
    """Compares two payloads: same shape, support and values, bit for bit."""
    return _same_payload


@pytest.fixture
def same_state():
    """Compares two codec states (nested NamedTuples of scalars and tensors)."""
    return _same


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)
