"""Turning the config's `device` string into a `torch.device`.

`auto` is the design's "GPU when present, CPU always": it picks the first CUDA device when
one is usable and the CPU otherwise. Asking for CUDA explicitly on a machine without it is an
error rather than a silent fall-back, so a GPU run never quietly becomes a CPU run.
"""

from __future__ import annotations

import re

import torch

__all__ = ["resolve_device"]

_SPEC = re.compile(r"auto|cpu|cuda(?::(\d+))?")


def resolve_device(spec: str) -> torch.device:
    """Returns the device that `spec` names on this machine.

    Args:
        spec: `"auto"`, `"cpu"`, `"cuda"` or `"cuda:<index>"` (as in `train.device`).

    Returns:
        `cuda:0` for `"auto"` when CUDA is available, else `cpu`; otherwise the named device.

    Raises:
        ValueError: `spec` is not one of the forms above.
        RuntimeError: CUDA is requested but unavailable, or the index is out of range.

    Examples:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {spec!r}")
    if spec == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if spec == "auto":
        return torch.device("cuda", 0) if available else torch.device("cpu")
    if not available:
        raise RuntimeError(
            f"device {spec!r} was requested but CUDA is not available on this machine "
            "(torch.cuda.is_available() is False); use device 'auto' or 'cpu'"
        )
    index = int(match.group(1) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise RuntimeError(
            f"device {spec!r} was requested but this machine has {count} CUDA device(s) "
            f"(indices 0..{count - 1})"
        )
    return torch.device("cuda", index)
