"""Flattening nested state (NamedTuples of tensors and numbers) for saving and restoring.

Codec, policy and client states are trees of NamedTuples, tuples, lists and dicts whose
leaves are tensors or plain scalars. Runtimes that must persist them between processes
(Flower's `context.state`, a gossip peer's checkpoint) flatten them to `path -> leaf`
mappings and rebuild them against a template of the same structure, which also validates
what comes back: a missing or extra key, or a tensor of another shape or dtype, is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["Leaf", "flatten", "unflatten"]

Leaf = torch.Tensor | int | float | bool | str | None
_SCALARS = (int, float, bool, str, type(None))


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def flatten(tree: Any, prefix: str = "") -> dict[str, Leaf]:
    """Maps every leaf of `tree` to its '/'-joined path (field names, keys, indices)."""
    if isinstance(tree, (torch.Tensor, *_SCALARS)):
        return {prefix or "/": tree}
    items: list[tuple[str, Any]]
    if _is_namedtuple(tree):
        items = [(name, getattr(tree, name)) for name in tree._fields]
    elif isinstance(tree, tuple | list):
        items = [(str(i), v) for i, v in enumerate(tree)]
    elif isinstance(tree, Mapping):
        for key in tree:
            if not isinstance(key, str) or "/" in key:
                raise TypeError(f"state dict keys must be strings without '/', got {key!r}")
        items = list(tree.items())
    else:
        raise TypeError(f"cannot flatten state leaf of type {type(tree).__name__}")
    flat: dict[str, Leaf] = {}
    for name, value in items:
        flat.update(flatten(value, f"{prefix}/{name}" if prefix else name))
    if not items:
        flat[f"{prefix}/" if prefix else "/"] = None  # keep empty containers visible
    return flat


def unflatten(template: Any, flat: Mapping[str, Leaf]) -> Any:
    """Rebuilds a tree shaped like `template` from `flatten` output.

    Tensors come back on the template leaf's device and must match its shape and dtype.

    Raises:
        ValueError: when keys, shapes, dtypes or scalar types do not match the template.
    """
    expected = flatten(template)
    if set(expected) != set(flat):
        missing = sorted(set(expected) - set(flat))
        extra = sorted(set(flat) - set(expected))
        raise ValueError(f"state does not match its template: missing {missing}, extra {extra}")
    return _rebuild(template, flat, "")


def _rebuild(template: Any, flat: Mapping[str, Leaf], prefix: str) -> Any:
    if isinstance(template, torch.Tensor):
        value = flat[prefix or "/"]
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"state {prefix!r}: expected a tensor, got {type(value).__name__}")
        if value.shape != template.shape or value.dtype != template.dtype:
            raise ValueError(
                f"state {prefix!r}: expected {template.dtype} {tuple(template.shape)}, "
                f"got {value.dtype} {tuple(value.shape)}"
            )
        return value.to(template.device)
    if isinstance(template, _SCALARS):
        value = flat[prefix or "/"]
        if type(value) is not type(template) and not (
            isinstance(template, float) and isinstance(value, int) and not isinstance(value, bool)
        ):
            raise ValueError(
                f"state {prefix!r}: expected {type(template).__name__}, got {type(value).__name__}"
            )
        return float(value) if isinstance(template, float) else value  # type: ignore[arg-type]

    def child(name: str) -> str:
        return f"{prefix}/{name}" if prefix else name

    if _is_namedtuple(template):
        return type(template)(
            *(_rebuild(getattr(template, n), flat, child(n)) for n in template._fields)
        )
    if isinstance(template, tuple | list):
        values = [_rebuild(v, flat, child(str(i))) for i, v in enumerate(template)]
        return type(template)(values)
    return {k: _rebuild(v, flat, child(k)) for k, v in template.items()}
