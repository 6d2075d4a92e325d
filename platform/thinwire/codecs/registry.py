"""From config to codec: the factories of thinwire's codec kinds, and `build`.

`build(config, seed=...)` looks every stage of a `CodecConfig` up by its `kind` in one of
four registries of `thinwire.registry` (`TRANSFORMS`, `SELECTORS`, `QUANTIZERS`,
`FEEDBACKS`) and chains the results; a low-rank codec (`LOWRANK`, whose factory returns a
whole `Codec`) takes the chain's place, and the feedback wraps it the same way. Importing
this module registers the factories of the sections `thinwire.config` declares; a new
kind is `SELECTORS.register(kind, section=..., factory=...)`, from anywhere (a plugin, a
notebook).

A factory takes the stage's config section and a 64-bit seed (the stage's own, derived
from the build seed) and returns the stage, or None for the identity stage. A feedback
factory takes its section and the chained codec, and returns the wrapped codec.
"""

from __future__ import annotations

from thinwire import config as cfg
from thinwire.codecs.base import Codec, chain
from thinwire.codecs.feedback import with_dgc, with_error_feedback
from thinwire.codecs.masked import shared_mask
from thinwire.codecs.multiscale import multiscale_qsgd
from thinwire.codecs.oktopk import ok_top_k
from thinwire.codecs.powersgd import powersgd
from thinwire.codecs.quantize import cast, qsgd, scaled_sign
from thinwire.codecs.seeded import random_block, random_k
from thinwire.codecs.sidco import sidco
from thinwire.codecs.sparsify import adaptive_top_k, rtop_k, sampled_top_k, threshold, top_k
from thinwire.codecs.twomean import two_mean_sign
from thinwire.codecs.wavelet import wavelet
from thinwire.registry import FEEDBACKS, LOWRANK, QUANTIZERS, SELECTORS, TRANSFORMS
from thinwire.seeding import stage_seed

__all__ = ["build"]


TRANSFORMS.register("identity", section=cfg.IdentityTransform, factory=lambda c, seed: None)
TRANSFORMS.register(
    "wavelet", section=cfg.WaveletTransform, factory=lambda c, seed: wavelet(c.wavelet, c.level)
)
SELECTORS.register("none", section=cfg.KeepAll, factory=lambda c, seed: None)
SELECTORS.register("topk", section=cfg.TopK, factory=lambda c, seed: top_k(c.density))
SELECTORS.register(
    "topk_sampled",
    section=cfg.SampledTopK,
    factory=lambda c, seed: sampled_top_k(c.density, c.sample),
)
SELECTORS.register(
    "random_k",
    section=cfg.RandomK,
    factory=lambda c, seed: random_k(c.density, seed=seed, unbiased=c.unbiased),
)
SELECTORS.register(
    "random_block",
    section=cfg.RandomBlock,
    factory=lambda c, seed: random_block(c.density, seed=seed, unbiased=c.unbiased),
)
SELECTORS.register(
    "rtopk", section=cfg.RTopK, factory=lambda c, seed: rtop_k(c.density, c.ratio, seed=seed)
)
SELECTORS.register("threshold", section=cfg.HardThreshold, factory=lambda c, seed: threshold(c.lam))
SELECTORS.register(
    "adaptive",
    section=cfg.AdaptiveTopK,
    factory=lambda c, seed: adaptive_top_k(
        c.density, min_density=c.min_density, max_density=c.max_density, decay=c.decay
    ),
)
SELECTORS.register("shared_mask", section=cfg.SharedMask, factory=lambda c, seed: shared_mask())
SELECTORS.register(
    "oktopk",
    section=cfg.OkTopK,
    factory=lambda c, seed: ok_top_k(
        c.density,
        period=c.period,
        tolerance=c.tolerance,
        nudge=c.nudge,
        max_nudges=c.max_nudges,
        nudge_down=c.nudge_down,
    ),
)
SELECTORS.register(
    "sidco",
    section=cfg.SIDCo,
    factory=lambda c, seed: sidco(
        c.density,
        family=c.family,
        stages=c.stages,
        max_stages=c.max_stages,
        tolerance=c.tolerance,
    ),
)
QUANTIZERS.register("none", section=cfg.NoQuantizer, factory=lambda c, seed: None)
QUANTIZERS.register("fp16", section=cfg.Cast, factory=lambda c, seed: cast("fp16"))
QUANTIZERS.register("bf16", section=cfg.Cast, factory=lambda c, seed: cast("bf16"))
QUANTIZERS.register(
    "qsgd", section=cfg.QSGD, factory=lambda c, seed: qsgd(c.levels, c.bucket, seed=seed)
)
QUANTIZERS.register("sign", section=cfg.ScaledSign, factory=lambda c, seed: scaled_sign(c.bucket))
QUANTIZERS.register(
    "multiscale_qsgd",
    section=cfg.MultiScaleQSGD,
    factory=lambda c, seed: multiscale_qsgd(c.bits, c.scale_list(), c.bucket, seed=seed),
)
QUANTIZERS.register(
    "two_mean_sign", section=cfg.TwoMeanSign, factory=lambda c, seed: two_mean_sign(c.bucket)
)
FEEDBACKS.register("none", section=cfg.NoFeedback, factory=lambda c, codec: codec)
FEEDBACKS.register(
    "residual", section=cfg.ResidualFeedback, factory=lambda c, codec: with_error_feedback(codec)
)
FEEDBACKS.register(
    "dgc", section=cfg.DGCFeedback, factory=lambda c, codec: with_dgc(codec, c.momentum, c.nesterov)
)

LOWRANK.register("none", section=cfg.NoLowRank, factory=lambda c, seed: None)
LOWRANK.register(
    "powersgd",
    section=cfg.PowerSGDCodec,
    factory=lambda c, seed: powersgd(
        c.rank,
        min_compression_rate=c.min_compression_rate,
        warm_start=c.warm_start,
        orthogonalization=c.orthogonalize,
        seed=seed,
    ),
)


def _acp_sgd(section: cfg.ACPSGDCodec, seed: int) -> Codec:
    # The section refuses to validate; this is reached only by a section built unvalidated.
    raise ValueError(cfg.ACP_SGD_REFUSAL)


LOWRANK.register("acp_sgd", section=cfg.ACPSGDCodec, factory=_acp_sgd)


def build(config: cfg.CodecConfig, *, seed: int) -> Codec:
    """The codec a `CodecConfig` describes: chain(transform, selector, quantizer) + feedback.

    Each random stage gets its own seed, stage_seed(seed, role), so the selector's and
    the quantizer's draws are independent. Callers choose `seed` per stream: the same seed
    on every client makes seeded supports (random-k, random block) coincide across
    clients (all-reduce friendly); mixing in a client or tensor index makes them differ.

    Args:
        config: the codec section of an experiment.
        seed: base seed of the codec's random stages.

    Returns:
        The `Codec`.

    Raises:
        ValueError: for a kind no registry knows, or an invalid combination (DGC on a
            transformed codec).

    Example:
        >>> from thinwire.config import CodecConfig
        >>> from thinwire.codecs import build
        >>> config = CodecConfig.model_validate(
        ...     {"select": {"kind": "topk", "density": 0.01}, "error_feedback": True}
        ... )
        >>> build(config, seed=0).name
        'ef(top_k(0.01)+fp32)'
    """
    lowrank = LOWRANK.factory(config.lowrank.kind)(config.lowrank, stage_seed(seed, 3))
    if lowrank is not None:
        codec = lowrank  # the config refuses a transform, selector or quantizer beside it
    else:
        transform = TRANSFORMS.factory(config.transform.kind)(config.transform, stage_seed(seed, 0))
        selector = SELECTORS.factory(config.select.kind)(config.select, stage_seed(seed, 1))
        quantizer = QUANTIZERS.factory(config.quantize.kind)(config.quantize, stage_seed(seed, 2))
        stages = [stage for stage in (transform, selector, quantizer) if stage is not None]
        codec = chain(*stages)
    feedback: Codec = FEEDBACKS.factory(config.error_feedback.kind)(config.error_feedback, codec)
    return feedback
