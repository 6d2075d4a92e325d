"""The privacy ledger records (sigma, q, steps) and nothing else."""

import pytest

from thinwire import statetree
from thinwire.privacy import PrivacyLedger, epsilon, open_ledger, record


def test_steps_at_the_same_mechanism_extend_one_entry():
    ledger = open_ledger(1.2, 0.25)
    for steps in (10, 10, 5):
        ledger = record(ledger, noise_multiplier=1.2, sample_rate=0.25, steps=steps)
    assert ledger.history == ((1.2, 0.25, 25),)


def test_a_different_mechanism_opens_a_new_entry_in_order():
    ledger = record(open_ledger(1.0, 0.1), noise_multiplier=1.0, sample_rate=0.1, steps=3)
    ledger = record(ledger, noise_multiplier=2.0, sample_rate=0.1, steps=4)
    ledger = record(ledger, noise_multiplier=1.0, sample_rate=0.1)
    assert ledger.history == ((1.0, 0.1, 3), (2.0, 0.1, 4), (1.0, 0.1, 1))


def test_a_ledger_round_trips_through_its_saved_form():
    ledger = record(open_ledger(1.5, 0.04), noise_multiplier=1.5, sample_rate=0.04, steps=250)
    template = open_ledger(1.5, 0.04)
    restored = statetree.unflatten(template, statetree.flatten(ledger))
    assert restored == ledger and isinstance(restored, PrivacyLedger)
    assert epsilon(restored.history, 1e-5) == epsilon(ledger.history, 1e-5)


def test_records_are_validated():
    ledger = open_ledger(1.0, 0.1)
    with pytest.raises(ValueError, match="sample rate"):
        record(ledger, noise_multiplier=1.0, sample_rate=0.0)
    with pytest.raises(ValueError, match="steps"):
        record(ledger, noise_multiplier=1.0, sample_rate=0.1, steps=-1)
    with pytest.raises(ValueError, match="noise multiplier"):
        open_ledger(-0.5, 0.1)
