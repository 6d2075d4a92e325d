"""HookState without processes: per-bucket state, and state following DDP's bucket rebuild."""

import torch

from thinwire.codecs import ErrorFeedbackState
from thinwire.ddp import HookState, OkTopk


def _state(method) -> HookState:
    return HookState(method, positions={}, group=None, seed=0)


TOPK_EF = {"select": {"kind": "topk", "density": 0.5}, "error_feedback": True}


def test_a_rebuilt_bucket_takes_over_the_residuals_of_its_parameters():
    from thinwire.config import CodecConfig

    hook = _state(CodecConfig.model_validate(TOPK_EF))
    a, b, c = torch.zeros(3), torch.zeros(2), torch.zeros(4)
    first = hook.bucket((0, 1), [a, b], torch.zeros(5))
    second = hook.bucket((2,), [c], torch.zeros(4))
    residual_01 = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    residual_2 = torch.tensor([6.0, 7.0, 8.0, 9.0])
    hook.update((0, 1), first._replace(state=first.state._replace(residual=residual_01)))
    hook.update((2,), second._replace(state=second.state._replace(residual=residual_2)))
    hook.end_step()

    # DDP regroups: parameter 1 and 2 share a bucket now, parameter 0 is alone.
    regrouped = hook.bucket((2, 1), [c, b], torch.zeros(6))
    alone = hook.bucket((0,), [a], torch.zeros(3))
    assert isinstance(regrouped.state, ErrorFeedbackState)
    assert regrouped.state.residual.tolist() == [6.0, 7.0, 8.0, 9.0, 4.0, 5.0]
    assert alone.state.residual.tolist() == [1.0, 2.0, 3.0]
    hook.end_step()
    assert set(hook._buckets) == {(2, 1), (0,)}  # the old layouts are gone


def test_oktopk_residual_follows_too_and_its_thresholds_are_recomputed():
    hook = _state(OkTopk(density=0.1))
    a, b = torch.zeros(2), torch.zeros(2)
    first = hook.bucket((0, 1), [a, b], torch.zeros(4))
    residual = torch.tensor([1.0, 2.0, 3.0, 4.0])
    hook.update((0, 1), first._replace(state=first.state._replace(residual=residual, step=7)))
    hook.end_step()
    swapped = hook.bucket((1, 0), [b, a], torch.zeros(4))
    assert swapped.state.residual.tolist() == [3.0, 4.0, 1.0, 2.0]
    assert swapped.state.step == 0 and swapped.state.edges == ()


def test_stats_start_at_zero():
    assert tuple(_state(OkTopk(density=0.1)).stats()) == (0, 0, 0, 0)
