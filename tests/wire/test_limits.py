"""Limits: validated caps whose defaults accept everything a thinwire run produces."""

import dataclasses

import pytest
import torch
from wire_samples import single

from thinwire.codecs.support import MAX_SEEDED_DOMAIN
from thinwire.config import QSGD
from thinwire.wire import (
    SEEDED_DOMAIN_LIMIT,
    DenseSupport,
    Limits,
    Payload,
    QuantizedValues,
    decode,
    encode,
)


def test_the_seeded_domain_limit_is_the_codecs_one():
    assert SEEDED_DOMAIN_LIMIT == MAX_SEEDED_DOMAIN == 2**40


def test_default_limits_accept_the_largest_qsgd_the_config_allows():
    s = next(m.le for m in QSGD.model_fields["levels"].metadata if hasattr(m, "le"))
    assert QSGD(levels=s).levels == s
    levels = torch.tensor([-s, 0, s], dtype=torch.int32)
    update, spec = single(
        "w", Payload((3,), DenseSupport(), QuantizedValues(levels, torch.ones(1), s, 0))
    )
    got = decode(encode(update), spec).tensors["w"].values
    assert isinstance(got, QuantizedValues) and got.levels.tolist() == [-s, 0, s]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_bytes", -1),
        ("max_tensors", 1.5),
        ("max_round", True),
        ("max_levels", 0),
        ("max_levels", 2**31),
    ],
)
def test_bad_limits_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"Limits.{field}"):
        Limits(**{field: value})


def test_limits_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().max_bytes = 1  # type: ignore[misc]
