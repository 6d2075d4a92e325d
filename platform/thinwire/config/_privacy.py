"""The `privacy` section: DP-SGD on the clients, with optional random sparsification."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from thinwire.config._base import PositiveFloat, Section


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
