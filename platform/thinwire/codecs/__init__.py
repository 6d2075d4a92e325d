"""What an update becomes on the wire: transforms, selectors, quantizers, error feedback.

A codec is `chain(transform?, selector?, quantizer?)` with explicit state, optionally
wrapped by error feedback; `build(config, seed=...)` makes one from a `CodecConfig`.

Example:
    >>> import torch
    >>> from thinwire.codecs import chain, scaled_sign, top_k, with_error_feedback
    >>> sign_top_k = with_error_feedback(chain(top_k(0.01), scaled_sign()))  # SPARQ's C
    >>> x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    >>> payload, state = sign_top_k.encode(x, sign_top_k.init(x))
    >>> payload.count
    10
"""

from thinwire.codecs.base import (
    NO_ARGS,
    Codec,
    CodecInfo,
    EmptyState,
    Encode,
    EncodeArgs,
    Quantizer,
    Selector,
    Transform,
    chain,
)
from thinwire.codecs.bounds import information_bits
from thinwire.codecs.feedback import DGCState, ErrorFeedbackState, with_dgc, with_error_feedback
from thinwire.codecs.masked import shared_mask
from thinwire.codecs.multiscale import MultiScaleState, multiscale_qsgd
from thinwire.codecs.oktopk import OkTopKState, ok_top_k
from thinwire.codecs.quantize import QSGDState, cast, qsgd, scaled_sign
from thinwire.codecs.registry import build
from thinwire.codecs.seeded import RandomBlockState, RandomKState, random_block, random_k
from thinwire.codecs.sidco import SIDCoState, sidco
from thinwire.codecs.sparsify import (
    AdaptiveTopKState,
    RTopKState,
    adaptive_top_k,
    rtop_k,
    sampled_top_k,
    threshold,
    top_k,
)
from thinwire.codecs.support import scatter, seeded_indices
from thinwire.codecs.twomean import two_mean_sign
from thinwire.codecs.wavelet import wavelet, wavelet_lengths

__all__ = [
    "AdaptiveTopKState",
    "Codec",
    "CodecInfo",
    "DGCState",
    "NO_ARGS",
    "EmptyState",
    "Encode",
    "EncodeArgs",
    "ErrorFeedbackState",
    "MultiScaleState",
    "OkTopKState",
    "QSGDState",
    "Quantizer",
    "RTopKState",
    "RandomBlockState",
    "RandomKState",
    "SIDCoState",
    "Selector",
    "Transform",
    "adaptive_top_k",
    "build",
    "cast",
    "chain",
    "information_bits",
    "multiscale_qsgd",
    "ok_top_k",
    "qsgd",
    "random_block",
    "random_k",
    "rtop_k",
    "sampled_top_k",
    "scaled_sign",
    "scatter",
    "seeded_indices",
    "shared_mask",
    "sidco",
    "threshold",
    "top_k",
    "two_mean_sign",
    "wavelet",
    "wavelet_lengths",
    "with_dgc",
    "with_error_feedback",
]
