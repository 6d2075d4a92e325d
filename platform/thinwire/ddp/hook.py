"""`thinwire.ddp.register`: thinwire's codecs as a DDP communication hook.

DDP hands a communication hook each gradient *bucket* (a flat buffer holding several
parameters' gradients) and expects a future of the bucket's mean over the ranks. The hook
registered here compresses every bucket with the method it was given and exchanges it with
the collective that suits the method:

- a thinwire codec (a `CodecConfig` section, or a built `Codec`): allreduce or all-gather
  (`thinwire.ddp.exchange`);
- `PowerSGD(rank=...)`: allreduce of the P, then of the Q factors (`thinwire.ddp.powersgd`);
- `ACPSGD(rank=...)`: one allreduce a step, of P and of Q in turn (`thinwire.ddp.acpsgd`);
- `OkTopk(density=...)`: Ok-Topk's sparse allreduce (`thinwire.ddp.oktopk`).

Futures: a route that is one allreduce (dense casts, seeded supports) returns the
collective's own future, so DDP overlaps it with the rest of the backward pass; the
multi-stage routes (all-gather, PowerSGD, ACP-SGD, Ok-Topk) run their collectives inside the hook
and return a completed future.

State (codec states and residuals, PowerSGD's Q and residuals, ACP-SGD's factors and
residuals, Ok-Topk's thresholds) lives
in the `HookState` that `register` returns, never on the model. DDP rebuilds its buckets
once after the first iteration (in the order gradients became ready): a bucket of a new
layout takes over the coordinate-aligned state (residuals, DGC momenta) of its parameters
from the buckets that held them before, and logs it; nothing is reset silently.

Bytes: `HookState.traffic` counts what this rank put into collectives (see
`thinwire.ddp.collectives.Traffic`); `HookState.stats()` reports them with the step count.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations at runtime
# against `dist.GradBucket` and `torch.futures.Future[torch.Tensor]`.
import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from thinwire.codecs.base import Codec
from thinwire.codecs.lowrank import LowRankState
from thinwire.codecs.registry import build
from thinwire.config import CodecConfig
from thinwire.ddp.acpsgd import ACPSGD, ACPState, acpsgd_allreduce
from thinwire.ddp.collectives import Group, Traffic
from thinwire.ddp.exchange import codec_allreduce
from thinwire.ddp.oktopk import OkTopk, init_oktopk, oktopk_allreduce
from thinwire.ddp.powersgd import PowerSGD, powersgd_allreduce
from thinwire.seeding import bucket_seed
from thinwire.statetree import flatten, unflatten

__all__ = ["HookState", "HookStats", "Method", "register"]

logger = logging.getLogger(__name__)

Method = CodecConfig | Codec | PowerSGD | ACPSGD | OkTopk
Layout = tuple[int, ...]  # the positions (in model.parameters()) of a bucket's parameters


class HookStats(NamedTuple):
    """What the hook has done on this rank so far."""

    steps: int  # backward passes whose buckets all went through the hook
    payload_bytes: int  # bytes of data this rank put into collectives
    overhead_bytes: int  # bytes of sizes, padding and other bookkeeping
    elements: int  # gradient coordinates that went through the hook


class _Bucket(NamedTuple):
    """One bucket's method state, for the layout it was built for."""

    codec: Codec | None  # the bucket's codec (codec methods only)
    state: Any  # the codec's or Ok-Topk's state; None for PowerSGD and ACP-SGD
    sizes: tuple[int, ...]  # numel of each parameter, in bucket order
    checked: bool  # whether the shared-seed check has run


class HookState:
    """Everything the hook keeps between calls; returned by `register`."""

    __slots__ = (
        "_buckets",
        "_acp",
        "_lowrank",
        "_used",
        "elements",
        "group",
        "method",
        "positions",
        "seed",
        "steps",
        "traffic",
    )

    def __init__(
        self, method: Method, positions: Mapping[int, int], group: Group, seed: int
    ) -> None:
        # Settings.
        self.method = method
        self.group = group
        self.seed = seed
        self.positions = dict(positions)  # id(parameter) -> its position in the model
        # Per-bucket and per-parameter state.
        self._buckets: dict[Layout, _Bucket] = {}
        self._lowrank: dict[int, LowRankState] = {}
        self._acp: dict[int, ACPState] = {}
        self._used: set[Layout] = set()
        # Statistics.
        self.traffic = Traffic()
        self.steps = 0
        self.elements = 0

    def stats(self) -> HookStats:
        """Steps, payload and overhead bytes, and coordinates handled on this rank."""
        return HookStats(self.steps, self.traffic.payload, self.traffic.overhead, self.elements)

    def layout(self, bucket: dist.GradBucket) -> Layout:
        """The model positions of the bucket's parameters, in bucket order."""
        try:
            return tuple(self.positions[id(p)] for p in bucket.parameters())
        except KeyError:
            raise ValueError(
                "a gradient bucket holds a parameter that was not in the model passed to "
                "thinwire.ddp.register; register the hook on the DDP model that trains"
            ) from None

    def bucket(self, layout: Layout, grads: Sequence[torch.Tensor], flat: torch.Tensor) -> _Bucket:
        """The state of the bucket with `layout`, built (and taken over) on first sight."""
        self._used.add(layout)
        if layout in self._buckets:
            return self._buckets[layout]
        sizes = tuple(g.numel() for g in grads)
        codec, state = None, None
        if isinstance(self.method, OkTopk):
            state = init_oktopk(flat.numel(), flat.device)
        elif not isinstance(self.method, PowerSGD | ACPSGD):
            codec = (
                build(self.method, seed=bucket_seed(self.seed, layout))
                if isinstance(self.method, CodecConfig)
                else self.method
            )
            state = codec.init(flat)
        if state is not None and self._buckets:
            state = self._take_over(layout, sizes, state)
        entry = _Bucket(codec, state, sizes, checked=False)
        self._buckets[layout] = entry
        return entry

    def _take_over(self, layout: Layout, sizes: tuple[int, ...], fresh: Any) -> Any:
        """Moves coordinate-aligned tensors of earlier layouts' states into `fresh`."""
        pieces: dict[str, dict[int, torch.Tensor]] = {}
        for old_layout, old in self._buckets.items():
            offset = 0
            for position, size in zip(old_layout, old.sizes, strict=True):
                if position in layout:
                    for path, leaf in flatten(old.state).items():
                        if isinstance(leaf, torch.Tensor) and leaf.shape == (sum(old.sizes),):
                            pieces.setdefault(path, {})[position] = leaf[offset : offset + size]
                offset += size
        flat = flatten(fresh)
        taken = []
        for path, by_position in pieces.items():
            leaf = flat.get(path)
            if isinstance(leaf, torch.Tensor) and len(by_position) == len(layout):
                flat[path] = torch.cat([by_position[p] for p in layout]).to(leaf.dtype)
                taken.append(path)
        if taken:
            logger.info("DDP rebuilt a bucket; %s carried over to its new layout", ", ".join(taken))
        return unflatten(fresh, flat)

    def update(self, layout: Layout, entry: _Bucket) -> None:
        """Stores a bucket's advanced state."""
        self._buckets[layout] = entry

    def end_step(self) -> None:
        """Closes a backward pass: drops the states of layouts DDP no longer uses."""
        self.steps += 1
        for stale in set(self._buckets) - self._used:
            del self._buckets[stale]
        self._used = set()


def _hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    flat = bucket.buffer()
    grads = bucket.gradients()
    layout = state.layout(bucket)
    state.elements += flat.numel()
    method = state.method
    if isinstance(method, PowerSGD):
        means, state._lowrank = powersgd_allreduce(
            grads, layout, state._lowrank, method, state.steps, state.group, state.traffic
        )
        future = _done(torch.cat([m.reshape(-1) for m in means]).to(flat.dtype))
    elif isinstance(method, ACPSGD):
        means, state._acp = acpsgd_allreduce(
            grads, layout, state._acp, method, state.steps, state.group, state.traffic
        )
        future = _done(torch.cat([m.reshape(-1) for m in means]).to(flat.dtype))
    else:
        entry = state.bucket(layout, grads, flat)
        if isinstance(method, OkTopk):
            mean, new = oktopk_allreduce(flat, entry.state, method, state.group, state.traffic)
            future = _done(mean.to(flat.dtype))
        else:
            if entry.codec is None:  # a bucket state outside the low-rank/Ok-Topk routes
                raise RuntimeError("a gradient bucket has no codec to compress with")
            future, new = codec_allreduce(
                entry.codec,
                flat,
                entry.state,
                step=state.steps,
                check_seed=not entry.checked,
                group=state.group,
                traffic=state.traffic,
            )
        state.update(layout, entry._replace(state=new, checked=True))
    if bucket.is_last():
        state.end_step()
    return future


def _done(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(tensor)
    return future


def _method(codec: Method | Mapping[str, Any]) -> Method:
    if isinstance(codec, Mapping):
        codec = CodecConfig.model_validate(dict(codec))
    if isinstance(codec, CodecConfig) and codec.lowrank.kind != "none":
        # A bucket is one flat vector, which no low-rank codec compresses.
        raise ValueError(
            f"thinwire.ddp.register compresses each bucket as one flat vector, so codec "
            f"lowrank {codec.lowrank.kind!r} does not apply; pass PowerSGD(rank=...) or "
            f"ACPSGD(rank=...), which compress each parameter as a matrix"
        )
    if isinstance(codec, CodecConfig | Codec | PowerSGD | ACPSGD | OkTopk):
        return codec
    raise TypeError(
        f"thinwire.ddp.register(codec=...) takes a codec section (a CodecConfig or its "
        f"mapping), a built thinwire Codec, PowerSGD(...), ACPSGD(...) or OkTopk(...); got "
        f"{type(codec).__name__}"
    )


def register(
    model: nn.Module,
    *,
    codec: Method | Mapping[str, Any],
    process_group: dist.ProcessGroup | None = None,
    seed: int = 0,
) -> HookState:
    """Compresses a DDP model's gradient exchange with a thinwire method: one line.

    Each gradient bucket is compressed as one flat vector (DDP's unit of communication, so a
    codec section's `scope` does not apply), with its own error-feedback residual when the
    method has one, and exchanged with the collective that suits it (module docstring).
    Codecs built from a section get a seed derived from `seed` and the bucket's parameters,
    the same on every rank, so seeded selections (random-k) reduce by allreduce; a built
    `Codec` must have been built with the same seed on every rank (checked on first use).
    Everything stays on the gradients' device; the hook works with gloo and NCCL.

    Args:
        model: the `DistributedDataParallel` model whose gradients are exchanged.
        codec: a codec section (`CodecConfig` or a mapping such as
            `{"select": {"kind": "topk", "density": 0.01}, "error_feedback": True}`), a
            built `Codec`, `PowerSGD(rank=...)`, `ACPSGD(rank=...)` or `OkTopk(density=...)`.
        process_group: the group to exchange over; None for the default group.
        seed: base seed of the codecs' random stages (PowerSGD and ACP-SGD seed their
            initial Q with their own `seed`).

    Returns:
        The `HookState`: per-bucket state and the byte counts (`stats()`).

    Raises:
        TypeError: `model` is not a DistributedDataParallel module, or `codec` is not a method.
        pydantic.ValidationError: a codec mapping that is not a valid codec section.

    Example::

        model = DistributedDataParallel(net)
        hook = thinwire.ddp.register(model, codec={"select": {"kind": "topk", "density": 0.01},
                                                   "error_feedback": True})
        ...  # train as usual
        print(hook.stats().payload_bytes)
    """
    if not isinstance(model, DistributedDataParallel):
        raise TypeError(
            f"thinwire.ddp.register needs a DistributedDataParallel model, got "
            f"{type(model).__name__}; wrap it first: DistributedDataParallel(module)"
        )
    method = _method(codec)
    positions = {id(p): i for i, p in enumerate(model.parameters())}
    state = HookState(method, positions, process_group, seed)
    model.register_comm_hook(state, _hook)
    return state
