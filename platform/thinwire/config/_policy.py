"""The `policy` section: when a star client sends (always, censoring, random access)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from thinwire.config._base import NonNegativeFloat, PositiveFloat, PositiveInt, Probability, Section
from thinwire.registry import POLICIES, Kinded

if TYPE_CHECKING:
    from thinwire.config._experiment import Experiment


@POLICIES.declare
class AlwaysSend(Section):
    """Every selected client sends every round."""

    kind: Literal["always"] = "always"


class ConstantTau(Section):
    """tau_k = tau in every round."""

    kind: Literal["constant"] = "constant"
    tau: NonNegativeFloat


class GeometricTau(Section):
    """tau_k = tau * ratio^(k - 1): the linear-rate schedule of CSGD's strongly convex analysis."""

    kind: Literal["geometric"] = "geometric"
    tau: PositiveFloat
    ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95


class InverseTau(Section):
    """tau_k = tau * a / (a + k - 1): the polynomial decay suggested for non-convex models."""

    kind: Literal["inverse"] = "inverse"
    tau: PositiveFloat
    a: PositiveFloat = 10.0


TauSchedule = Annotated[ConstantTau | GeometricTau | InverseTau, Field(discriminator="kind")]


class FixedBatch(Section):
    """Every round trains with `train.batch_size`."""

    kind: Literal["fixed"] = "fixed"


class GeometricBatch(Section):
    """B_k = ceil(B_1 / ratio^(k - 1)): CSGD's growing batch, matched to a geometric tau_k."""

    kind: Literal["geometric"] = "geometric"
    ratio: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.95
    max_batch: PositiveInt | None = None
    """Cap on the batch size (a client's batch never exceeds its own data either)."""


class LinearBatch(Section):
    """B_k = B_1 * k: the polynomial growth that pairs with an inverse tau_k."""

    kind: Literal["linear"] = "linear"
    max_batch: PositiveInt | None = None
    """Cap on the batch size (a client's batch never exceeds its own data either)."""


BatchGrowth = Annotated[FixedBatch | GeometricBatch | LinearBatch, Field(discriminator="kind")]


@POLICIES.declare
class CensorPolicy(Section):
    """CSGD: upload only if ||g - g_last||^2 >= tau_k; the server reuses g_last otherwise."""

    kind: Literal["censor"] = "censor"
    threshold: TauSchedule
    batch: BatchGrowth = FixedBatch()
    """Local batch-size schedule over rounds (`train.batch_size` is B_1)."""

    def check_experiment(self, experiment: Experiment, where: str) -> None:
        """DP-SGD's noise is calibrated for one batch size: privacy needs a fixed batch."""
        del where
        if experiment.privacy is not None and not isinstance(self.batch, FixedBatch):
            raise ValueError(
                "privacy calibrates its noise for a fixed batch size; "
                "use policy.batch kind 'fixed' with privacy"
            )


class AgeOfGradientRule(Section):
    """Transmit with p_on when the client's unsent memory is stale enough, else with p_off.

    The staleness is rho = ||memory|| / ||fresh update|| - 1 (see `thinwire.policies`).
    """

    kind: Literal["aog"] = "aog"
    threshold: NonNegativeFloat = 0.5
    p_on: Probability | None = None
    """Transmit probability of a stale client; None: min(1, slots / clients)."""
    p_off: Probability = 0.0
    """Transmit probability of a client below the threshold."""


class UniformAccessRule(Section):
    """Slotted ALOHA: every client transmits with the same probability p."""

    kind: Literal["uniform"] = "uniform"
    p: Probability | None = None
    """None: min(1, slots / clients), the throughput-optimal value when all contend."""


class AlwaysAccessRule(Section):
    """Every client transmits every round, in a uniformly random slot."""

    kind: Literal["always"] = "always"


class RoundRobinAccessRule(Section):
    """Oracle: a collision-free schedule that gives each round's slots to the next clients."""

    kind: Literal["round_robin"] = "round_robin"


AccessRule = Annotated[
    AgeOfGradientRule | UniformAccessRule | AlwaysAccessRule | RoundRobinAccessRule,
    Field(discriminator="kind"),
]


@POLICIES.declare
class RandomAccessPolicy(Section):
    """Uplink over a slotted random-access channel (`channel.slots` slots per round)."""

    kind: Literal["random_access"] = "random_access"
    rule: AccessRule = AgeOfGradientRule()

    def check_experiment(self, experiment: Experiment, where: str) -> None:
        """The clients contend for slots: the channel must have them."""
        del where
        if experiment.channel.slots is None:
            raise ValueError("policy random_access needs channel.slots (slots per round)")


Policy = Annotated[Kinded, POLICIES]
"""Any registered send policy (`thinwire.policies` registers the factories)."""
