"""Checkpoints of a simulated star: every piece of state a later round reads.

A run continued from one of these ends bit for bit where the uninterrupted run would, on
the CPU. That holds because nothing outside the checkpoint carries over between rounds:
every random draw (client sampling, batches, DP noise, random-k supports, QSGD rounding) is
seeded from (experiment seed, round, client) or counted in a codec state, each round builds
its local optimizer afresh, and the channel model keeps no state.

The file is one `torch.save` of plain containers, tensors and numbers, read back with
`torch.load(weights_only=True)` (a checkpoint cannot run code):

    format, version   "thinwire-simulation", 1
    name, round       the experiment's name and the last finished round
    aggregator        the server's `AggregatorState`, flattened with `thinwire.statetree`:
                      model, momentum, downlink copy and codec state, CSGD's stale updates
    clients           one flattened `ClientState` per client: codec residuals, policy state,
                      model view, carried mass, the pending update's bytes, privacy ledger
    delivered         client -> whether its last update got through (read next round)
    spent             client -> privacy spent so far (epsilon)
    cum_bytes_up, cum_bytes_down

Loading rebuilds each state against the freshly built run's own (its template), which also
checks it: another model, codec or client count is an error naming the file and the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.clients import ClientState
from thinwire.server import AggregatorState
from thinwire.statetree import Leaf, flatten, unflatten

__all__ = [
    "SimulationCheckpoint",
    "checkpoint_file",
    "latest_checkpoint",
    "load_simulation_checkpoint",
    "save_simulation_checkpoint",
]

_FORMAT = "thinwire-simulation"
_VERSION = 1
_NAME = re.compile(r"round-(\d{6,})\.pt")


class SimulationCheckpoint(NamedTuple):
    """The state of a simulated star after `round`."""

    round: int
    aggregator: AggregatorState
    clients: list[ClientState]
    delivered: dict[int, bool]
    spent: dict[int, float]
    cum_bytes_up: int
    cum_bytes_down: int


def checkpoint_file(folder: Path, round: int) -> Path:
    """Where the checkpoint after `round` goes."""
    return folder / f"round-{round:06d}.pt"


def latest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The newest checkpoint in `folder` and its round, or None if it holds none."""
    found = [
        (int(m.group(1)), path)
        for path in (folder.iterdir() if folder.is_dir() else ())
        if (m := _NAME.fullmatch(path.name))
    ]
    if not found:
        return None
    round, path = max(found)
    return path, round


def save_simulation_checkpoint(path: Path, name: str, checkpoint: SimulationCheckpoint) -> None:
    """Writes `checkpoint` atomically, then removes the older ones in its folder.

    A crash mid-write leaves the previous checkpoint intact.
    """
    contents: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "name": name,
        "round": checkpoint.round,
        "aggregator": _cpu(flatten(checkpoint.aggregator)),
        "clients": [_cpu(flatten(state)) for state in checkpoint.clients],
        "delivered": {str(c): bool(v) for c, v in checkpoint.delivered.items()},
        "spent": {str(c): float(v) for c, v in checkpoint.spent.items()},
        "cum_bytes_up": checkpoint.cum_bytes_up,
        "cum_bytes_down": checkpoint.cum_bytes_down,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(contents, partial)
    os.replace(partial, path)
    for older in path.parent.glob("round-*.pt"):  # a resume needs the newest one only
        if older != path:
            older.unlink()


def load_simulation_checkpoint(
    path: Path, *, aggregator: AggregatorState, clients: Sequence[ClientState]
) -> SimulationCheckpoint:
    """Reads a checkpoint and rebuilds it against a fresh run's initial states.

    Args:
        path: the checkpoint file.
        aggregator: the freshly built server's state (the template).
        clients: every freshly built client's initial state, in index order.

    Raises:
        ValueError: the file is unreadable, not a simulation checkpoint, or does not fit
            this run (the message names the file and the part that differs).
    """
    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a foreign or damaged file
        raise ValueError(f"{path} is not a readable checkpoint: {exc}") from None
    if not isinstance(contents, dict) or contents.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a thinwire simulation checkpoint")
    if contents.get("version") != _VERSION:
        raise ValueError(f"{path}: checkpoint version {contents.get('version')} is not supported")
    round = contents.get("round")
    if not isinstance(round, int) or round < 1:
        raise ValueError(f"{path}: round {round!r} is not a finished round")
    saved = contents.get("clients")
    if not isinstance(saved, list) or len(saved) != len(clients):
        count = len(saved) if isinstance(saved, list) else "no"
        raise ValueError(f"{path}: holds {count} client states, this run has {len(clients)}")
    model = aggregator.model
    try:
        server = _rebuild_aggregator(_mapping(contents, "aggregator"), aggregator)
        states = [
            _rebuild_client(flat, initial, model)
            for flat, initial in zip(saved, clients, strict=True)
        ]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: does not fit this experiment: {exc}") from None
    totals = [contents.get(key) for key in ("cum_bytes_up", "cum_bytes_down")]
    if not all(isinstance(t, int) and t >= 0 for t in totals):
        raise ValueError(f"{path}: byte totals {totals} are not counts")
    return SimulationCheckpoint(
        round=round,
        aggregator=server,
        clients=states,
        delivered={int(c): bool(v) for c, v in _mapping(contents, "delivered").items()},
        spent={int(c): float(v) for c, v in _mapping(contents, "spent").items()},
        cum_bytes_up=int(totals[0]),  # type: ignore[arg-type]
        cum_bytes_down=int(totals[1]),  # type: ignore[arg-type]
    )


def _cpu(flat: Mapping[str, Leaf]) -> dict[str, Leaf]:
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in flat.items()}


def _mapping(contents: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = contents.get(key)
    if not isinstance(value, dict):
        raise ValueError(f"{key} is missing")
    return value


def _keys(flat: Mapping[str, Leaf], field: str) -> list[str]:
    """The keys of the dict at `field` (a state field whose entries vary between rounds)."""
    prefix = f"{field}/"
    return sorted({k[len(prefix) :].split("/")[0] for k in flat if k.startswith(prefix)} - {""})


def _zeros_like(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.zeros_like(v) for k, v in tensors.items()}


def _rebuild_aggregator(flat: dict[str, Leaf], initial: AggregatorState) -> AggregatorState:
    # Which clients hold the downlink copy, whose stale updates are kept, and whether the
    # server momentum has started vary over a run: the template takes them from the file.
    model = initial.model
    template = initial._replace(
        momentum=_zeros_like(model) if _keys(flat, "momentum") else {},
        received={c: 0 for c in _keys(flat, "received")},
        stale={c: _zeros_like(model) for c in _keys(flat, "stale")},
        stale_examples={c: 0.0 for c in _keys(flat, "stale_examples")},
    )
    state: AggregatorState = unflatten(template, flat)
    return state


def _rebuild_client(
    flat: Any, initial: ClientState, model: Mapping[str, torch.Tensor]
) -> ClientState:
    if not isinstance(flat, dict):
        raise ValueError("a client state is not a mapping")
    pending = flat.get("pending")
    if not isinstance(pending, torch.Tensor) or pending.dtype != torch.uint8 or pending.ndim != 1:
        raise ValueError("a client state has no 'pending' byte tensor")
    template = initial._replace(
        carry=_zeros_like(model) if _keys(flat, "carry") else {},
        pending=torch.empty_like(pending),
    )
    state: ClientState = unflatten(template, flat)
    return state
