"""Two-mean sign: A2SGD's two local averages, written so that a star's server can use them.

A2SGD (Bhattacharya, Yu, Chowdhury 2020, arXiv 2006.07405, algorithms.md §7.8) reduces a
worker's error-corrected gradient a = g + e to two numbers, the mean of its positive and of
its negative entries, all-reduces those into two global averages, keeps the local error
e <- a - a_hat, and updates with each worker's own sign pattern. Only the two scalars
travel, so the update a worker applies depends on a pattern nobody else knows.

In thinwire's star the server owns the one model and must apply one update built from
what it received; it cannot rebuild a worker's contribution from two scalars. The
O(1)-per-worker scheme therefore cannot keep a single model in a star (in an all-reduce
the replicas drift apart, since each applies the global means with its own pattern). This
quantizer is the closest version that can: the worker's surrogate a_hat itself,

    a_hat_i = mu_plus  on P = {i : a_i >= 0},   mu_minus on N = {i : a_i < 0},

sent as the pattern (one bit per coordinate) plus the two means (two floats per bucket, a
bucket being the whole tensor, i.e. one layer, by default), and the server averages the
a_hat's with the plain mean rule. The local error feedback is the paper's, through
`with_error_feedback` (`error_feedback: residual`). What differs from the paper: the bits
of the pattern travel, and each worker's contribution carries its own two means where the
paper applies the two global averages to every local pattern. Zeros join P (one bit cannot
say "zero"), which keeps the map a projection.

The map a -> a_hat is the orthogonal projection onto span{1_P, 1_N}, so it is
deterministic, ||a - a_hat||^2 = ||a||^2 - ||a_hat||^2 exactly, and it is contractive with
delta = (|P| mu_plus^2 + |N| mu_minus^2) / ||a||^2 >= ||a||_1^2 / (d ||a||^2) >= 1/d: the
span contains scaled sign's 1_P - 1_N, so it errs no more than `scaled_sign`.
"""

from __future__ import annotations

import torch

from thinwire.codecs.base import CodecInfo, EmptyState, Quantizer
from thinwire.codecs.forms import two_sided_sign_form, values_form
from thinwire.wire import WireError
from thinwire.wire.payload import SignValues, Values

__all__ = ["two_mean_sign"]


def _bucket_sums(v: torch.Tensor, bucket: int) -> torch.Tensor:
    # (ceil(k / bucket),) float32 sums of each bucket of v; one entry when bucket == 0.
    k = v.numel()
    if bucket == 0 or bucket >= k:
        return v.sum(dtype=torch.float32).reshape(1)
    count = -(-k // bucket)
    padded = torch.zeros(count * bucket, dtype=v.dtype, device=v.device)
    padded[:k] = v
    return padded.reshape(count, bucket).sum(dim=1, dtype=torch.float32)


def _expand(per_bucket: torch.Tensor, bucket: int, k: int) -> torch.Tensor:
    # The per-bucket value of each of the k entries.
    if bucket == 0 or per_bucket.numel() == 1:
        return per_bucket[0].expand(k)
    return per_bucket.repeat_interleave(bucket)[:k]


def two_mean_sign(bucket: int = 0) -> Quantizer:
    """Each value becomes the mean of its bucket's entries of the same sign.

    See the module docstring for how this relates to A2SGD. Costs one bit per value plus
    two floats per bucket. State: none.

    Args:
        bucket: entries per pair of means; 0 = one pair for the whole vector (the tensor).

    Returns:
        A `Quantizer` emitting two-sided `SignValues` (`negative_scales` set).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, two_mean_sign
        >>> codec = chain(two_mean_sign())
        >>> x = torch.tensor([1.0, -3.0, 3.0, -1.0, -2.0])
        >>> codec.decode(codec.encode(x, codec.init(x))[0], x.shape)
        tensor([ 2., -2.,  2., -2., -2.])
    """
    if bucket < 0:
        raise ValueError(f"bucket must be >= 0 (0 = one bucket), got {bucket}")

    def init(device: torch.device) -> EmptyState:
        del device
        return EmptyState()

    def quantize(v: torch.Tensor, state: EmptyState) -> tuple[Values, EmptyState]:
        v = v.float()
        negative = v < 0
        k = v.numel()
        if k == 0:
            empty = torch.zeros(0 if bucket else 1, device=v.device)
            return SignValues(negative, empty, bucket, empty.clone()), state
        negative_count = _bucket_sums(negative.float(), bucket)
        sizes = _bucket_sums(torch.ones_like(v), bucket)
        negative_sum = _bucket_sums(torch.where(negative, -v, 0.0), bucket)
        positive_sum = _bucket_sums(torch.where(negative, 0.0, v), bucket)
        positive_mean = positive_sum / (sizes - negative_count).clamp_min(1.0)
        negative_mean = negative_sum / negative_count.clamp_min(1.0)
        return SignValues(negative, positive_mean, bucket, negative_mean), state

    def dequantize(values: Values) -> torch.Tensor:
        if not isinstance(values, SignValues) or values.negative_scales is None:
            raise WireError(
                f"two_mean_sign decodes two-sided sign values, got {values_form(values)}"
            )
        negative, k = values.negative, values.negative.numel()
        if k == 0:
            return torch.zeros(0, device=negative.device)
        positive = _expand(values.scales.float(), values.bucket, k)
        magnitude = _expand(values.negative_scales.float(), values.bucket, k)
        return torch.where(negative, -magnitude, positive)

    info = CodecInfo(unbiased=False, delta=lambda n: 1.0 / (min(n, bucket) if bucket else n))
    return Quantizer(
        init,
        quantize,
        dequantize,
        info,
        name="two_mean_sign",
        values=two_sided_sign_form(bucket),
    )
