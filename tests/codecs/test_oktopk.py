"""Ok-Topk's threshold reuse: exact every `period` calls, the stored threshold in between."""

import pytest
import torch

from thinwire.codecs import OkTopKState, chain, ok_top_k, top_k, with_error_feedback
from thinwire.codecs.selection import count_for


def draw(n, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def indices(payload):
    return payload.support.indices


def test_every_period_th_call_is_exactly_top_k_and_stores_its_threshold():
    x, density = draw(100_000, 0), 0.01
    codec, exact = chain(ok_top_k(density, period=3)), chain(top_k(density))
    state = codec.init(x)
    for call in range(7):
        y = draw(100_000, call)
        payload, state = codec.encode(y, state)
        if call % 3 == 0:
            reference, _ = exact.encode(y, exact.init(y))
            assert torch.equal(indices(payload), indices(reference))
            assert state.selector.threshold == float(y[indices(reference)].abs().min())
        assert state.selector.step == call + 1


def test_between_exact_calls_the_stored_threshold_selects():
    x = draw(50_000, 1)
    codec = chain(ok_top_k(0.02, period=100))
    _, state = codec.encode(x, codec.init(x))
    tau = state.selector.threshold
    y = draw(50_000, 2)  # same distribution: the count stays within the tolerance
    payload, after = codec.encode(y, state)
    assert torch.equal(indices(payload), (y.abs() >= tau).nonzero().squeeze(1))
    assert after.selector.threshold == tau


def test_over_selection_raises_the_threshold_by_the_nudge_at_most_max_nudges_times():
    x = draw(50_000, 3)
    codec = chain(ok_top_k(0.01, period=100, nudge=1.03, max_nudges=5))
    _, state = codec.encode(x, codec.init(x))
    tau = state.selector.threshold
    payload, after = codec.encode(3.0 * x, state)  # ~all of the top 3% now pass tau
    assert after.selector.threshold == pytest.approx(tau * 1.03**5)
    assert payload.count == int((3.0 * x).abs().ge(after.selector.threshold).sum())
    assert payload.count > 4 / 3 * count_for(0.01, x.numel())  # still over: 5 nudges only


def test_a_small_over_selection_stops_nudging_once_within_the_tolerance():
    x = draw(50_000, 4)
    k = count_for(0.01, x.numel())
    codec = chain(ok_top_k(0.01, period=100, tolerance=1.1, max_nudges=50))
    _, state = codec.encode(x, codec.init(x))
    payload, after = codec.encode(1.2 * x, state)
    assert k / 1.1 <= payload.count <= 1.1 * k
    assert after.selector.threshold > state.selector.threshold


@pytest.mark.parametrize("nudge_down", [True, False])
def test_under_selection_lowers_the_threshold_only_with_nudge_down(nudge_down):
    x = draw(50_000, 5)
    k = count_for(0.01, x.numel())
    codec = chain(ok_top_k(0.01, period=100, max_nudges=50, nudge_down=nudge_down))
    _, state = codec.encode(x, codec.init(x))
    payload, after = codec.encode(0.8 * x, state)
    if nudge_down:
        assert after.selector.threshold < state.selector.threshold
        assert payload.count >= 3 / 4 * k
    else:  # the reference rule: under-selection is left alone
        assert after.selector.threshold == state.selector.threshold
        assert payload.count < 3 / 4 * k


def test_an_all_zero_exact_call_does_not_leave_a_threshold_that_keeps_everything():
    codec = chain(ok_top_k(0.01, period=10))
    zeros = torch.zeros(10_000)
    _, state = codec.encode(zeros, codec.init(zeros))
    assert state.selector == OkTopKState(0.0, 1)
    x = draw(10_000, 6)
    payload, _ = codec.encode(x, state)  # a zero threshold triggers an exact selection
    assert payload.count == count_for(0.01, x.numel())


def test_under_error_feedback_the_achieved_density_settles_within_the_tolerance():
    # The method's setting: the selector sees the accumulator g + e. While the residual
    # builds up (the first few calls) the accumulator outgrows the stored threshold faster
    # than 5 nudges of 3% follow; once it is steady, every call keeps k / (4/3) to 4k / 3.
    n, density = 200_000, 0.01
    codec = with_error_feedback(chain(ok_top_k(density, period=32)))
    state = codec.init(torch.zeros(n))
    counts = []
    for step in range(64):
        payload, state = codec.encode(draw(n, 100 + step), state)
        counts.append(payload.count)
    k = count_for(density, n)
    assert counts[0] == counts[32] == k  # the exact calls
    assert max(counts[1:4]) > 2 * k  # the transient
    assert all(3 / 4 * k <= c <= 4 / 3 * k for c in counts[4:])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"period": 0},
        {"tolerance": 1.0},
        {"nudge": 1.0},
        {"nudge": float("inf")},
        {"max_nudges": -1},
    ],
)
def test_invalid_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="ok_top_k"):
        ok_top_k(0.01, **kwargs)
