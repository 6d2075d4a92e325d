"""SIDCo: tail quantiles of fitted sparsity-inducing distributions, multi-stage thresholds."""

import math

import pytest
import torch
from scipy import stats

from thinwire.codecs import SIDCoState, chain, sidco
from thinwire.codecs.selection import count_for
from thinwire.codecs.sidco import tail_threshold

N = 1_000_000


def laplace(n, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.empty(n).exponential_(1.0 / scale, generator=g) * (
        torch.randint(0, 2, (n,), generator=g) * 2 - 1
    )


@pytest.mark.parametrize("delta", [0.1, 0.01, 0.001])
def test_tail_threshold_is_the_fitted_distributions_exact_quantile(delta):
    # Moments of known members of each family give back their quantile at 1 - delta.
    assert tail_threshold("exponential", 2.0, 4.0, delta) == pytest.approx(
        2.0 * math.log(1 / delta)
    )
    xi, scale = 0.2, 1.5  # generalized Pareto: mean s/(1-xi), var s^2/((1-xi)^2 (1-2xi))
    mean, var = scale / (1 - xi), scale**2 / ((1 - xi) ** 2 * (1 - 2 * xi))
    expected = stats.genpareto.isf(delta, xi, scale=scale)
    assert tail_threshold("gpareto", mean, var, delta) == pytest.approx(expected, rel=1e-9)
    a, b = 0.7, 2.0  # gamma: mean a b, var a b^2
    expected = stats.gamma.isf(delta, a, scale=b)
    assert tail_threshold("gamma", a * b, a * b * b, delta) == pytest.approx(expected, rel=1e-9)


def test_a_degenerate_fit_falls_back_to_the_exponential():
    assert tail_threshold("gamma", 1.0, 0.0, 0.01) == pytest.approx(math.log(100))


@pytest.mark.parametrize("family", ["exponential", "gpareto", "gamma"])
@pytest.mark.parametrize("density", [0.01, 0.001])
def test_on_laplace_magnitudes_one_stage_hits_the_target_density(family, density):
    # Double-exponential gradients are the model all three families contain.
    x = laplace(N, 0, scale=0.03)
    codec = chain(sidco(density, family=family, stages=1))
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.count == pytest.approx(count_for(density, N), rel=0.05)


@pytest.mark.parametrize("family", ["exponential", "gpareto", "gamma"])
def test_on_gaussian_inputs_stages_are_added_until_the_density_is_within_tolerance(family):
    # A Gaussian tail is lighter than the fits assume at 0.1%: one stage misses by more
    # than 20%, and the peaks-over-threshold refits close the gap within a few calls.
    x = torch.randn(N, generator=torch.Generator().manual_seed(1))
    k = count_for(0.001, N)
    codec = chain(sidco(0.001, family=family, stages=1, tolerance=0.2))
    state = codec.init(x)
    counts, stages = [], []
    for _ in range(6):
        payload, state = codec.encode(x, state)
        counts.append(payload.count)
        stages.append(state.selector.stages)
    assert stages == sorted(stages)  # only ever added
    assert abs(counts[-1] / k - 1) <= 0.2


def test_the_selected_set_is_every_coordinate_above_one_threshold():
    x = laplace(100_000, 2)
    codec = chain(sidco(0.01, stages=3))
    payload, _ = codec.encode(x, codec.init(x))
    kept = payload.support.indices
    smallest_kept = x[kept].abs().min()
    dropped = torch.ones(x.numel(), dtype=torch.bool)
    dropped[kept] = False
    assert bool((x[dropped].abs() < smallest_kept).all())


def test_an_all_zero_input_keeps_nothing():
    codec = chain(sidco(0.01))
    zeros = torch.zeros(1000)
    payload, state = codec.encode(zeros, codec.init(zeros))
    assert payload.count == 0
    assert torch.equal(codec.decode(payload, (1000,)), zeros)


def test_state_starts_at_the_configured_stages():
    codec = chain(sidco(0.01, stages=3, max_stages=4))
    assert codec.init(torch.zeros(10)).selector == SIDCoState(3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"family": "normal"},
        {"stages": 0},
        {"stages": 5, "max_stages": 4},
        {"tolerance": 0.0},
    ],
)
def test_invalid_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="sidco"):
        sidco(0.01, **kwargs)


def test_the_yaml_section_builds_the_selector_and_checks_its_stages():
    from pydantic import ValidationError

    from thinwire.codecs import build
    from thinwire.config import CodecConfig

    section = {"kind": "sidco", "density": 0.01, "family": "gamma", "stages": 2}
    codec = build(CodecConfig.model_validate({"select": section}), seed=0)
    assert codec.name == "sidco(0.01,gamma)+fp32"
    with pytest.raises(ValidationError, match="stages <= max_stages"):
        CodecConfig.model_validate({"select": {**section, "stages": 7, "max_stages": 6}})
