"""The `codec` section: transform -> select -> quantize, with error feedback.

Or a low-rank codec (`lowrank`, PowerSGD) in place of transform, select and quantize: a
rank-r factorization is neither a subset of coordinates nor a way of writing values, so
it is one whole tensor codec, which error feedback wraps as it wraps the chain.

Each stage is a registered family (`thinwire.registry`): the sections below are thinwire's
own kinds, declared here so that they validate anywhere; `thinwire.codecs.registry`
registers their factories, and a plugin may register more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from thinwire.config._base import Density, PositiveFloat, Probability, Section, WaveletName
from thinwire.registry import FEEDBACKS, LOWRANK, QUANTIZERS, SELECTORS, TRANSFORMS, Kinded

if TYPE_CHECKING:
    from thinwire.config._experiment import Experiment


@TRANSFORMS.declare
class IdentityTransform(Section):
    """No transform: compress the tensor's own coordinates."""

    kind: Literal["identity"] = "identity"


@TRANSFORMS.declare
class WaveletTransform(Section):
    """Multilevel discrete wavelet transform of the flattened tensor (JWINS)."""

    kind: Literal["wavelet"] = "wavelet"
    wavelet: WaveletName = "sym2"
    """PyWavelets name of the wavelet, e.g. sym2, db4, haar."""
    level: Annotated[int, Field(ge=1, le=12)] = 4
    """Decomposition levels."""


Transform = Annotated[Kinded, TRANSFORMS]
"""Any registered transform section."""


@SELECTORS.declare
class KeepAll(Section):
    """Send every coordinate."""

    kind: Literal["none"] = "none"


@SELECTORS.declare
class TopK(Section):
    """Exact top-k by magnitude; k = ceil(density * n)."""

    kind: Literal["topk"] = "topk"
    density: Density
    """Fraction of coordinates sent: k = ceil(density * n)."""


@SELECTORS.declare
class SampledTopK(Section):
    """Top-k via a sampled threshold estimate plus an exact pass over the candidates (DGC)."""

    kind: Literal["topk_sampled"] = "topk_sampled"
    density: Density
    """Fraction of coordinates sent."""
    sample: Density = 0.01
    """Fraction of coordinates sampled to estimate the threshold."""


@SELECTORS.declare
class RandomK(Section):
    """k coordinates chosen by a seed that travels instead of the indices."""

    kind: Literal["random_k"] = "random_k"
    density: Density
    """Fraction of coordinates sent."""
    unbiased: bool = False
    """Scale the kept values by n / k, so the estimate is unbiased."""


@SELECTORS.declare
class RandomBlock(Section):
    """One contiguous block of k coordinates from a seeded start (wrapping around).

    `unbiased: true` scales the kept values by n/k: with each client's own seed, the
    independent blocks of Mishchenko, Hanzely and Richtárik (2019).
    """

    kind: Literal["random_block"] = "random_block"
    density: Density
    """Block length as a fraction of the tensor."""
    unbiased: bool = False
    """Scale the kept values by n/k (unbiased; each worker its own block: independent blocks)."""


@SELECTORS.declare
class RTopK(Section):
    """rTop-k: k coordinates drawn uniformly from the top r = ratio * k."""

    kind: Literal["rtopk"] = "rtopk"
    density: Density
    """Fraction of coordinates sent."""
    ratio: Annotated[float, Field(ge=1.0)] = 4.0
    """r / k: how many top coordinates the k are drawn from."""


@SELECTORS.declare
class HardThreshold(Section):
    """Every coordinate with |x_i| >= lam."""

    kind: Literal["threshold"] = "threshold"
    lam: PositiveFloat
    """The magnitude threshold lambda."""


@SELECTORS.declare
class AdaptiveTopK(Section):
    """Top-k with k chosen per call from the input's energy against its running average."""

    kind: Literal["adaptive"] = "adaptive"
    density: Density
    """Starting density."""
    min_density: Density = 0.0001
    """Lowest density the rule may choose."""
    max_density: Density = 0.1
    """Highest density the rule may choose."""
    decay: Probability = 0.9
    """Decay of the running average of the input's energy."""

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveTopK:
        if not self.min_density <= self.density <= self.max_density:
            raise ValueError("needs min_density <= density <= max_density")
        return self


@SELECTORS.declare
class OkTopK(Section):
    """Ok-Topk: exact top-k every `period` calls, the threshold reused (and nudged) between."""

    kind: Literal["oktopk"] = "oktopk"
    density: Density
    """Target fraction of coordinates kept."""
    period: Annotated[int, Field(ge=1)] = 32
    """Calls between exact top-k selections (the paper's tau)."""
    tolerance: Annotated[float, Field(gt=1.0)] = 4.0 / 3.0
    """A reused threshold is nudged while more than tolerance * k coordinates pass it."""
    nudge: Annotated[float, Field(gt=1.0)] = 1.03
    """Factor a threshold is raised (or lowered) by per nudge."""
    max_nudges: Annotated[int, Field(ge=0)] = 5
    """Most nudges per call."""
    nudge_down: bool = True
    """Also lower the threshold while fewer than k / tolerance pass (false: the paper's rule)."""


@SELECTORS.declare
class SIDCo(Section):
    """SIDCo: a threshold fitted from a sparsity-inducing distribution, multi-stage."""

    kind: Literal["sidco"] = "sidco"
    density: Density
    """Target fraction of coordinates kept."""
    family: Literal["exponential", "gpareto", "gamma"] = "exponential"
    """Distribution fitted to the magnitudes."""
    stages: Annotated[int, Field(ge=1)] = 2
    """Fitting stages at the start (each refits the exceedances of the last threshold)."""
    max_stages: Annotated[int, Field(ge=1)] = 6
    """Most stages the selector may add while it misses the density."""
    tolerance: PositiveFloat = 0.2
    """Relative density error above which a stage is added."""

    @model_validator(mode="after")
    def _ordered(self) -> SIDCo:
        if self.stages > self.max_stages:
            raise ValueError("needs stages <= max_stages")
        return self


@SELECTORS.declare
class SharedMask(Section):
    """The coordinates of a mask the sender installs each round (DP random sparsification).

    Payloads carry the mask's seed, not its indices; before a mask is installed every
    coordinate is sent.
    """

    kind: Literal["shared_mask"] = "shared_mask"

    def check_experiment(self, experiment: Experiment, where: str) -> None:
        """The mask comes from DP random sparsification and covers the flattened model."""
        if where != "codec.select":
            return  # a downlink installs no mask: it sends every coordinate, as documented
        privacy = experiment.privacy
        if privacy is None or privacy.sparsity is None:
            raise ValueError(
                "codec.select 'shared_mask' sends the DP sparsification mask's coordinates: "
                "set privacy.sparsity"
            )
        if experiment.codec.scope != "model":
            raise ValueError(
                "codec.select 'shared_mask' needs codec.scope: model "
                "(the mask covers the flattened model)"
            )


Select = Annotated[Kinded, SELECTORS]
"""Any registered selector section."""


@QUANTIZERS.declare
class NoQuantizer(Section):
    """Values travel as fp32."""

    kind: Literal["none"] = "none"


@QUANTIZERS.declare
class Cast(Section):
    """Values travel as fp16 or bf16."""

    kind: Literal["fp16", "bf16"]


@QUANTIZERS.declare
class QSGD(Section):
    """QSGD: s levels with stochastic rounding (unbiased), one norm per bucket."""

    kind: Literal["qsgd"] = "qsgd"
    levels: Annotated[int, Field(ge=1, le=2**20)] = 16
    """Quantization levels s per sign."""
    bucket: Annotated[int, Field(ge=0)] = 0
    """Coordinates per norm (bucket); 0: one norm per tensor."""


@QUANTIZERS.declare
class ScaledSign(Section):
    """Scaled sign: ||x_b||_1 / |b| * sign(x) per bucket b."""

    kind: Literal["sign"] = "sign"
    bucket: Annotated[int, Field(ge=0)] = 0
    """Coordinates per scale (bucket); 0: one scale per tensor."""


@QUANTIZERS.declare
class MultiScaleQSGD(Section):
    """Multi-scale unbiased quantization: b-bit levels, each at the finest scale it fits.

    Scales s_j = (2**(bits - 1) - 1) * ratio**j for j < scales; one scale is the paper's
    single-scale unbiased quantizer (max-norm QSGD with levels in `bits` bits).
    """

    kind: Literal["multiscale_qsgd"] = "multiscale_qsgd"
    bits: Annotated[int, Field(ge=2, le=16)] = 4
    """Bits per level code (a scale index of ceil(log2(scales)) bits travels with it)."""
    scales: Annotated[int, Field(ge=1, le=16)] = 2
    """Number of scales."""
    ratio: Annotated[int, Field(ge=2, le=1024)] = 8
    """Each scale is this many times finer than the one before."""
    bucket: Annotated[int, Field(ge=0)] = 512
    """Coordinates per norm (bucket); 0: one norm per tensor."""

    @model_validator(mode="after")
    def _finest_fits(self) -> MultiScaleQSGD:
        finest = ((1 << (self.bits - 1)) - 1) * self.ratio ** (self.scales - 1)
        if finest > 2**20:
            raise ValueError(f"the finest scale {finest} is above 2**20; use fewer scales")
        return self

    def scale_list(self) -> tuple[int, ...]:
        """The scales s_0 < ... < s_{m-1}, levels per unit norm."""
        top = (1 << (self.bits - 1)) - 1
        return tuple(top * self.ratio**j for j in range(self.scales))


@QUANTIZERS.declare
class TwoMeanSign(Section):
    """Two-mean sign: each value becomes the mean of its bucket's entries of the same sign.

    A2SGD's two local averages as a star can use them: the sign pattern travels too, one
    bit per coordinate (the paper's two floats alone cannot keep one model in a star).
    """

    kind: Literal["two_mean_sign"] = "two_mean_sign"
    bucket: Annotated[int, Field(ge=0)] = 0
    """Coordinates per pair of means (bucket); 0: one pair per tensor (the paper's layer)."""


Quantize = Annotated[Kinded, QUANTIZERS]
"""Any registered quantizer section."""


@FEEDBACKS.declare
class NoFeedback(Section):
    """Whatever the codec drops is lost."""

    kind: Literal["none"] = "none"


@FEEDBACKS.declare
class ResidualFeedback(Section):
    """Error feedback (Stich et al.): what was not sent is added to the next input."""

    kind: Literal["residual"] = "residual"


@FEEDBACKS.declare
class DGCFeedback(Section):
    """DGC: momentum correction and momentum-factor masking around the residual."""

    kind: Literal["dgc"] = "dgc"
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    nesterov: bool = False


Feedback = Annotated[Kinded, FEEDBACKS]
"""Any registered error-feedback section."""


@LOWRANK.declare
class NoLowRank(Section):
    """No low-rank codec: tensors travel through transform -> select -> quantize."""

    kind: Literal["none"] = "none"


@LOWRANK.declare
class PowerSGDCodec(Section):
    """PowerSGD (Vogels et al. 2019): each tensor as a matrix, sent as rank-r factors.

    Per sender and call: P = M Q_prev, P_hat = orth(P), Q = M^T P_hat; P_hat and Q travel
    and the receiver multiplies out P_hat Q^T, so a star server averages the clients'
    approximations. Vectors and matrices whose factors would not be `min_compression_rate`
    times smaller go dense (fp32); a conv kernel (out, in, kh, kw) is an out x (in kh kw)
    matrix. Error feedback is `codec.error_feedback: true`. Each tensor is its own matrix:
    needs `codec.scope: tensor`.
    """

    kind: Literal["powersgd"] = "powersgd"
    rank: Annotated[int, Field(ge=1, le=1024)] = 2
    """r: factor columns (a matrix of n x m sends min(r, n, m) of them)."""
    min_compression_rate: Annotated[float, Field(ge=1.0)] = 2.0
    """Compress a matrix only when n m >= rate (n + m) r; others go dense."""
    warm_start: bool = True
    """Start each call's power iteration from the previous call's Q (else a fresh seeded Q)."""
    orthogonalize: Literal["gram_schmidt", "qr"] = "gram_schmidt"
    """How P is orthogonalized: modified Gram-Schmidt (PyTorch's hook) or Householder QR."""


ACP_SGD_REFUSAL = (
    "lowrank kind 'acp_sgd' sends one factor a step and multiplies it with the other "
    "factor of the step before, so its receiver must hold each sender's last factor in step "
    "with the sender; a star server or gossip peer decodes every update on its own, and "
    "client sampling, dropped and rejected updates would leave the two sides with different "
    "factors. ACP-SGD runs as a DDP communication hook: "
    "thinwire.ddp.register(model, codec=thinwire.ddp.ACPSGD(rank=...)). Here use kind: powersgd"
)
"""Why `acp_sgd` is refused in an experiment's codec (the star, gossip, the ddp runtime)."""


@LOWRANK.declare
class ACPSGDCodec(Section):
    """ACP-SGD (Zhang et al. 2023): refused here; it runs as a DDP hook (`thinwire.ddp.ACPSGD`).

    It alternates which factor is computed and sent (P = M Q on one step, Q = M^T P on the
    next), so a receiver must keep each sender's last factor; thinwire's star and gossip
    receivers decode each update on its own (see `ACP_SGD_REFUSAL`).
    """

    kind: Literal["acp_sgd"] = "acp_sgd"

    @model_validator(mode="after")
    def _refused(self) -> ACPSGDCodec:
        raise ValueError(ACP_SGD_REFUSAL)


LowRank = Annotated[Kinded, LOWRANK]
"""Any registered low-rank codec section."""


def _feedback_shorthand(value: Any) -> Any:
    # `error_feedback: true` is the design card's spelling of the residual memory.
    if value is True:
        return {"kind": "residual"}
    if value is False or value is None:
        return {"kind": "none"}
    return value


class CodecConfig(Section):
    """What an update becomes on the wire: transform -> select -> quantize, with feedback."""

    transform: Transform = IdentityTransform()
    select: Select = KeepAll()
    quantize: Quantize = NoQuantizer()
    error_feedback: Feedback = NoFeedback()
    scope: Literal["tensor", "model"] = "tensor"
    """'tensor': one payload per parameter tensor; 'model': one for the flattened model."""
    lowrank: LowRank = NoLowRank()
    """A low-rank codec (powersgd) in place of transform, select and quantize; 'none': the chain."""

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "error_feedback" in data:
            data = {**data, "error_feedback": _feedback_shorthand(data["error_feedback"])}
        return data

    @model_validator(mode="after")
    def _lowrank_alone(self) -> CodecConfig:
        kind = self.lowrank.kind
        if kind == "none":
            return self
        defaults = {"transform": "identity", "select": "none", "quantize": "none"}
        beside = [
            f"{name} ({getattr(self, name).kind})"
            for name, default in defaults.items()
            if getattr(self, name).kind != default
        ]
        if beside:
            raise ValueError(
                f"lowrank {kind!r} replaces transform, select and quantize; remove "
                + ", ".join(beside)
            )
        if self.error_feedback.kind not in ("none", "residual"):
            raise ValueError(
                f"lowrank {kind!r} sends factors, not coordinates, so error_feedback "
                f"{self.error_feedback.kind!r} (which masks the coordinates a payload carries) "
                "does not apply; use error_feedback: true"
            )
        if self.scope != "tensor":
            raise ValueError(
                f"lowrank {kind!r} compresses each tensor as a matrix, and scope 'model' "
                "flattens the model into one vector, which is no matrix; use scope: tensor"
            )
        return self
