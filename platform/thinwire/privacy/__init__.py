"""Differential privacy for the star's clients: DP-SGD with random sparsification, on Opacus.

- the mechanism (`engine`): `make_private` wraps a model and optimizer so that one step
  masks, clips, sums, noises (on kept coordinates only) and scales, in that fixed order;
- the public mask (`mask`): per round, a shared seeded subset of the flattened model's
  coordinates and its drop-rate schedule (gradual cooling);
- the ledger (`ledger`): what a client ran, as (sigma, q, steps) entries;
- the analysis (`analysis`): epsilon of a ledger's history and the noise multiplier for a
  target epsilon (Opacus's RDP analysis).

The DP trainer that uses them is `thinwire.learning.train_private`, and the trainer wrapper
`thinwire.learning.private` records its steps in the ledger it keeps as its state; the
client reports epsilon every round.

Example:
    >>> ledger = record(open_ledger(1.1, 0.01), noise_multiplier=1.1, sample_rate=0.01,
    ...                 steps=1000)
    >>> round(epsilon(ledger.history, delta=1e-5), 2)
    1.71
"""

from typing import TYPE_CHECKING, Any

from thinwire.privacy.analysis import (
    ORDERS,
    check_delta,
    epsilon,
    noise_multiplier_for,
    rdp_curve,
)
from thinwire.privacy.ledger import PrivacyLedger, open_ledger, record
from thinwire.privacy.mask import drop_rate, mask_tensors, round_mask

if TYPE_CHECKING:
    from thinwire.privacy.engine import PrivateTraining, SparseDPOptimizer, make_private, release

_ENGINE = ("PrivateTraining", "SparseDPOptimizer", "make_private", "release")

EPSILON_METRIC = "epsilon"
"""Update metric and record key of the privacy spent so far (in a record: the largest
over clients)."""

__all__ = [
    "EPSILON_METRIC",
    "ORDERS",
    "PrivacyLedger",
    "PrivateTraining",
    "SparseDPOptimizer",
    "check_delta",
    "drop_rate",
    "epsilon",
    "make_private",
    "mask_tensors",
    "noise_multiplier_for",
    "open_ledger",
    "rdp_curve",
    "record",
    "release",
    "round_mask",
]


def __getattr__(name: str) -> Any:
    # The mechanism subclasses Opacus's optimizer, so importing it imports Opacus (seconds);
    # it is loaded on first use, and processes that never train privately never pay for it.
    if name in _ENGINE:
        from thinwire.privacy import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
