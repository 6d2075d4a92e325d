"""Payload forms: each stage says what it sends, and `check_forms` names both sides."""

from __future__ import annotations

import pytest
import torch

from thinwire.codecs import chain, qsgd, random_block, random_k, scaled_sign, top_k
from thinwire.codecs.forms import (
    DENSE,
    SPARSE,
    FormError,
    Forms,
    check_forms,
    kept_supports,
    support_form,
    values_form,
)
from thinwire.wire import (
    DenseSupport,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    WireError,
)


def test_forms_name_support_and_values_as_the_error_messages_show_them() -> None:
    assert support_form(DenseSupport()) == "dense"
    assert support_form(SparseSupport(torch.tensor([1]))) == "sparse"
    assert support_form(SeededSupport(1, SeedScheme.RANDOM_BLOCK, 2)) == "seeded random_block"
    assert values_form(RawValues(torch.zeros(1, dtype=torch.bfloat16))) == "bf16"
    levels = QuantizedValues(torch.zeros(1, dtype=torch.int8), torch.ones(1), 4, 0)
    assert values_form(levels) == "qsgd(s=4, bucket=0)"
    signs = SignValues(torch.zeros(1, dtype=torch.bool), torch.ones(1), 8)
    assert values_form(signs) == "sign(bucket=8)"


@pytest.mark.parametrize(
    ("low", "high", "n", "expected"),
    [(1, 1, 10, {SPARSE}), (10, 10, 10, {DENSE}), (0, 10, 10, {SPARSE, DENSE}), (1, 1, 1, {DENSE})],
)
def test_a_sparsifier_goes_dense_only_where_it_keeps_every_coordinate(low, high, n, expected):
    assert kept_supports(low, high, n) == expected


def test_chained_codecs_declare_what_their_stages_send() -> None:
    assert chain(top_k(0.1), qsgd(4, seed=0)).forms((1000,)) == Forms(
        frozenset({SPARSE}), frozenset({"qsgd(s=4, bucket=0)"})
    )
    assert chain(top_k(0.9)).forms((5,)) == Forms(frozenset({DENSE}), frozenset({"fp32"}))
    assert chain(random_k(0.1, seed=1)).forms((100,)).supports == {"seeded random_k"}
    assert chain(random_block(0.1, seed=1)).forms((100,)).supports == {"seeded random_block"}
    assert chain(scaled_sign(16)).forms((100,)) == Forms(
        frozenset({DENSE}), frozenset({"sign(bucket=16)"})
    )


def test_check_forms_names_the_tensor_and_both_forms() -> None:
    expected = {"fc.weight": chain(top_k(0.01)).forms((1000,))}
    dense = Payload((1000,), DenseSupport(), RawValues(torch.zeros(1000)))
    with pytest.raises(FormError) as caught:
        check_forms({"fc.weight": dense}, expected)
    assert str(caught.value) == (
        "tensor 'fc.weight': dense support with fp32 values, but this receiver's codec sends "
        "sparse support with fp32 values"
    )
    assert isinstance(caught.value, WireError)  # receivers count it like any bad message


def test_an_unknown_tensor_is_refused_and_undeclared_forms_pass() -> None:
    payload = Payload((2,), DenseSupport(), RawValues(torch.zeros(2)))
    with pytest.raises(FormError, match="tensor 'b': this receiver's codec has no such tensor"):
        check_forms({"b": payload}, {"a": Forms(None, None)})
    check_forms({"a": payload}, {"a": Forms(None, None)})  # a plugin stage declaring nothing
