"""From config to codec: explicit registries mapping each config `kind` to its factory.

`build(config, seed=...)` looks every stage of a `CodecConfig` up by its `kind` in one of
four registries (transform, selector, quantizer, feedback) and chains the results. A kind
is added with `register_<role>(kind, factory)`; replacing one needs `force=True`, and an
unknown kind raises `ValueError` naming the valid ones (STYLE rule 12: no import strings,
no `eval`).

A factory takes the stage's config section and a 64-bit seed (the stage's own, derived
from the build seed) and returns the stage, or None for the identity stage. A feedback
factory takes its section and the chained codec, and returns the wrapped codec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from thinwire import config as cfg
from thinwire.codecs.base import Codec, Quantizer, Selector, Transform, chain
from thinwire.codecs.feedback import with_dgc, with_error_feedback
from thinwire.codecs.masked import shared_mask
from thinwire.codecs.multiscale import multiscale_qsgd
from thinwire.codecs.oktopk import ok_top_k
from thinwire.codecs.quantize import cast, qsgd, scaled_sign
from thinwire.codecs.seeded import random_block, random_k
from thinwire.codecs.sidco import sidco
from thinwire.codecs.sparsify import adaptive_top_k, rtop_k, sampled_top_k, threshold, top_k
from thinwire.codecs.wavelet import wavelet
from thinwire.seeding import stage_seed

__all__ = [
    "FeedbackFactory",
    "QuantizerFactory",
    "SelectorFactory",
    "TransformFactory",
    "build",
    "kinds",
    "register_feedback",
    "register_quantizer",
    "register_selector",
    "register_transform",
]

TransformFactory = Callable[[Any, int], Transform | None]
SelectorFactory = Callable[[Any, int], Selector | None]
QuantizerFactory = Callable[[Any, int], Quantizer | None]
FeedbackFactory = Callable[[Any, Codec], Codec]

_Factory = TypeVar("_Factory")

_TRANSFORMS: dict[str, TransformFactory] = {
    "identity": lambda c, seed: None,
    "wavelet": lambda c, seed: wavelet(c.wavelet, c.level),
}
_SELECTORS: dict[str, SelectorFactory] = {
    "none": lambda c, seed: None,
    "topk": lambda c, seed: top_k(c.density),
    "topk_sampled": lambda c, seed: sampled_top_k(c.density, c.sample),
    "random_k": lambda c, seed: random_k(c.density, seed=seed, unbiased=c.unbiased),
    "random_block": lambda c, seed: random_block(c.density, seed=seed, unbiased=c.unbiased),
    "rtopk": lambda c, seed: rtop_k(c.density, c.ratio, seed=seed),
    "threshold": lambda c, seed: threshold(c.lam),
    "adaptive": lambda c, seed: adaptive_top_k(
        c.density, min_density=c.min_density, max_density=c.max_density, decay=c.decay
    ),
    "shared_mask": lambda c, seed: shared_mask(),
    "oktopk": lambda c, seed: ok_top_k(
        c.density,
        period=c.period,
        tolerance=c.tolerance,
        nudge=c.nudge,
        max_nudges=c.max_nudges,
        nudge_down=c.nudge_down,
    ),
    "sidco": lambda c, seed: sidco(
        c.density,
        family=c.family,
        stages=c.stages,
        max_stages=c.max_stages,
        tolerance=c.tolerance,
    ),
}
_QUANTIZERS: dict[str, QuantizerFactory] = {
    "none": lambda c, seed: None,
    "fp16": lambda c, seed: cast("fp16"),
    "bf16": lambda c, seed: cast("bf16"),
    "qsgd": lambda c, seed: qsgd(c.levels, c.bucket, seed=seed),
    "sign": lambda c, seed: scaled_sign(c.bucket),
    "multiscale_qsgd": lambda c, seed: multiscale_qsgd(c.bits, c.scale_list(), c.bucket, seed=seed),
}
_FEEDBACKS: dict[str, FeedbackFactory] = {
    "none": lambda c, codec: codec,
    "residual": lambda c, codec: with_error_feedback(codec),
    "dgc": lambda c, codec: with_dgc(codec, c.momentum, c.nesterov),
}

_REGISTRIES: dict[str, dict[str, Any]] = {
    "transform": _TRANSFORMS,
    "selector": _SELECTORS,
    "quantizer": _QUANTIZERS,
    "feedback": _FEEDBACKS,
}


def _register(role: str, kind: str, factory: _Factory, force: bool) -> None:
    registry = _REGISTRIES[role]
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a {role} kind must be a non-empty string, got {kind!r}")
    if kind in registry and not force:
        raise ValueError(
            f"{role} kind {kind!r} is already registered; pass force=True to replace it"
        )
    registry[kind] = factory


def register_transform(kind: str, factory: TransformFactory, force: bool = False) -> None:
    """Maps transform `kind` to `factory(section, seed) -> Transform | None`.

    Raises:
        ValueError: if `kind` is taken and `force` is False.
    """
    _register("transform", kind, factory, force)


def register_selector(kind: str, factory: SelectorFactory, force: bool = False) -> None:
    """Maps selector `kind` to `factory(section, seed) -> Selector | None`.

    Raises:
        ValueError: if `kind` is taken and `force` is False.
    """
    _register("selector", kind, factory, force)


def register_quantizer(kind: str, factory: QuantizerFactory, force: bool = False) -> None:
    """Maps quantizer `kind` to `factory(section, seed) -> Quantizer | None`.

    Raises:
        ValueError: if `kind` is taken and `force` is False.
    """
    _register("quantizer", kind, factory, force)


def register_feedback(kind: str, factory: FeedbackFactory, force: bool = False) -> None:
    """Maps feedback `kind` to `factory(section, codec) -> Codec`.

    Raises:
        ValueError: if `kind` is taken and `force` is False.
    """
    _register("feedback", kind, factory, force)


def kinds() -> Mapping[str, tuple[str, ...]]:
    """The registered kinds of each role: {"transform": (...), "selector": (...), ...}."""
    return {role: tuple(sorted(registry)) for role, registry in _REGISTRIES.items()}


def _lookup(role: str, kind: str) -> Any:
    registry = _REGISTRIES[role]
    if kind not in registry:
        valid = ", ".join(sorted(registry))
        raise ValueError(f"unknown {role} kind {kind!r}; registered kinds: {valid}")
    return registry[kind]


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
    transform = _lookup("transform", config.transform.kind)(config.transform, stage_seed(seed, 0))
    selector = _lookup("selector", config.select.kind)(config.select, stage_seed(seed, 1))
    quantizer = _lookup("quantizer", config.quantize.kind)(config.quantize, stage_seed(seed, 2))
    stages = [stage for stage in (transform, selector, quantizer) if stage is not None]
    codec = chain(*stages)
    return _lookup("feedback", config.error_feedback.kind)(config.error_feedback, codec)
