"""The `policy` section (when a star client sends) and the `privacy` section (DP-SGD)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from thinwire.config._base import NonNegativeFloat, PositiveFloat, PositiveInt, Probability, Section


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


class CensorPolicy(Section):
    """CSGD: upload only if ||g - g_last||^2 >= tau_k; the server reuses g_last otherwise."""

    kind: Literal["censor"] = "censor"
    threshold: TauSchedule
    batch: BatchGrowth = FixedBatch()
    """Local batch-size schedule over rounds (`train.batch_size` is B_1)."""


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


class RandomAccessPolicy(Section):
    """Uplink over a slotted random-access channel (`channel.slots` slots per round)."""

    kind: Literal["random_access"] = "random_access"
    rule: AccessRule = AgeOfGradientRule()


Policy = Annotated[AlwaysSend | CensorPolicy | RandomAccessPolicy, Field(discriminator="kind")]


class RandomSparsification(Section):
    """Zhu & Blaschko's random sparsification: drop a shared random fraction r of coordinates.

    `final_rate` is r at the last round; `linear` grows r from 0 in round 1 (the method's
    gradual cooling), `constant` uses it from the start.
    """

    final_rate: Annotated[float, Field(ge=0.0, lt=1.0)]
    schedule: Literal["linear", "constant"] = "linear"


def _open_unit_interval(x: float) -> float:
    if not 0.0 < x < 1.0:
        raise ValueError("must be in (0, 1)")
    return x


class PrivacyConfig(Section):
    """DP-SGD on every client (Opacus): per-sample clipping, Gaussian noise, RDP accounting.

    Set exactly one of `target_epsilon` (the noise multiplier is then calibrated so that a
    client taking part in every round spends exactly that) and `noise_multiplier`. `delta`
    must also be below 1 / (a client's number of training examples); that is checked when
    the data is known.
    """

    target_epsilon: PositiveFloat | None = None
    noise_multiplier: PositiveFloat | None = None
    delta: Annotated[float, AfterValidator(_open_unit_interval)] = 1e-5
    max_grad_norm: PositiveFloat = 1.0
    sparsity: RandomSparsification | None = None

    @model_validator(mode="after")
    def _one_noise_setting(self) -> PrivacyConfig:
        if (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ValueError(
                "set exactly one of privacy.target_epsilon and privacy.noise_multiplier"
            )
        return self
