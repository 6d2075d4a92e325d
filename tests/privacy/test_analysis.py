"""Epsilon accounting: the same numbers as Opacus's own RDP accountant."""

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants import RDPAccountant

from thinwire.privacy import ORDERS, epsilon, noise_multiplier_for, rdp_curve


def opacus_epsilon(history, delta):
    accountant = RDPAccountant()
    accountant.history = list(history)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(
    "history",
    [
        [(1.1, 0.01, 1000)],
        [(1.5, 0.04, 250)],  # the parameters Opacus pins in its own tests
        [(2.0, 0.25, 40)],
        [(0.9, 0.5, 7), (2.0, 0.1, 13), (0.9, 0.5, 3)],
    ],
)
def test_epsilon_equals_opacus_rdp_accountant(history):
    assert epsilon(history, 1e-5) == opacus_epsilon(history, 1e-5)


def test_accountants_agree_after_step_by_step_recording():
    accountant = RDPAccountant()
    for _ in range(30):
        accountant.step(noise_multiplier=1.3, sample_rate=0.2)
    assert epsilon([(1.3, 0.2, 30)], 1e-3) == accountant.get_epsilon(1e-3)


def test_orders_are_opacus_defaults():
    assert list(ORDERS) == [float(a) for a in RDPAccountant.DEFAULT_ALPHAS]


def test_only_privacy_work_imports_opacus():
    code = (
        "import sys, thinwire.clients, thinwire.runtimes.simulation, thinwire.privacy; "
        "assert 'opacus' not in sys.modules; thinwire.privacy.make_private; "
        "assert 'opacus' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pinned_value():
    # Abadi et al.'s MNIST regime: sigma 1.1, q 0.01, 1000 steps, delta 1e-5.
    assert epsilon([(1.1, 0.01, 1000)], 1e-5) == pytest.approx(1.7118, abs=1e-4)


def test_no_steps_spend_nothing_and_no_noise_spends_everything():
    assert epsilon([], 1e-5) == 0.0
    assert epsilon([(1.0, 0.1, 0)], 1e-5) == 0.0
    assert epsilon([(0.0, 0.1, 5)], 1e-5) == math.inf


def test_rdp_composes_additively_over_steps():
    one = rdp_curve(1.2, 0.1, 1)
    assert len(one) == len(ORDERS)
    assert (rdp_curve(1.2, 0.1, 17) == 17 * one).all()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: epsilon([(1.0, 0.1, 1)], 1.0), "delta"),
        (lambda: epsilon([(1.0, 1.5, 1)], 1e-5), "sample rate"),
        (lambda: epsilon([(-1.0, 0.1, 1)], 1e-5), "noise multiplier"),
        (lambda: rdp_curve(1.0, 0.1, -1), "steps"),
        (
            lambda: noise_multiplier_for(target_epsilon=0.0, delta=1e-5, sample_rate=0.1, steps=1),
            "target_epsilon",
        ),
    ],
)
def test_bad_arguments_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=5, deadline=None)
@given(
    target=st.sampled_from([2.0, 4.0]),
    sample_rate=st.sampled_from([0.05, 0.2]),
    steps=st.sampled_from([100, 400]),
)
def test_calibrated_noise_never_overshoots_the_target(target, sample_rate, steps):
    sigma = noise_multiplier_for(
        target_epsilon=target, delta=1e-4, sample_rate=sample_rate, steps=steps
    )
    spent = epsilon([(sigma, sample_rate, steps)], 1e-4)
    assert target - 0.01 <= spent <= target
