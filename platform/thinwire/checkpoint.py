"""Server checkpoints: the global model and everything the server needs to continue a run.

A checkpoint is one `torch.save` file of plain containers, tensors and numbers (loaded back
with `torch.load(weights_only=True)`, so a checkpoint file cannot run code):

    format     "thinwire-checkpoint", version 2 (version 1 files still load, see below)
    name       the experiment's name
    round      the last finished round
    model      name -> float32 tensor, the global model
    momentum   name -> tensor, the server momentum buffer ({} without momentum)
    public     name -> tensor, the downlink public copy ({} without a downlink codec)
    downlink   the downlink codec state, flattened with `thinwire.statetree`
    received   client (as str) -> the last round it was sent a train message
    stale, stale_examples   CSGD's last decoded update of each client and its weight
    delivered  client (as str) -> whether its last update counted (told with its next message)
    cum_bytes_up, cum_bytes_down   byte totals so far, so the run folder keeps counting

Client state (error-feedback residuals, model copies, policy memories) is not in the
checkpoint: it lives on the SuperNodes' disks (`thinwire.runtimes.flower.state`), keyed by
experiment and partition and kept for `runtime.checkpoint_every + 1` rounds. `received`
tells each client which round's state to continue from, so a resumed run continues exactly
where the checkpoint left it, bit for bit, error feedback included. A client whose state is
gone answers `StateLost` and is re-synchronized (full model, fresh state), as in any round.
A version 1 checkpoint has no `received`: every client then starts afresh (the full model,
residuals at zero), and the rounds after it differ from an uninterrupted run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.server.aggregator import Aggregator, AggregatorState
from thinwire.statetree import flatten, unflatten

__all__ = ["Checkpoint", "checkpoint_path", "find_checkpoint", "load_checkpoint", "save_checkpoint"]

logger = logging.getLogger(__name__)

_FORMAT = "thinwire-checkpoint"
_VERSION = 2
_VERSIONS = (1, 2)


class Checkpoint(NamedTuple):
    """A loaded checkpoint, ready to put into an `Aggregator`."""

    state: AggregatorState  # `received` empty for a version 1 file: clients start afresh
    cum_bytes_up: int
    cum_bytes_down: int
    delivered: dict[int, bool] = {}  # client -> did its last update count (for its next message)


def checkpoint_path(folder: Path, round: int) -> Path:
    """Where the checkpoint of `round` goes in a checkpoint folder."""
    return folder / f"round-{round:06d}.pt"


def save_checkpoint(
    path: Path,
    *,
    name: str,
    state: AggregatorState,
    cum_bytes_up: int,
    cum_bytes_down: int,
    delivered: Mapping[int, bool] | None = None,
) -> None:
    """Writes a checkpoint atomically (a reader never sees half a file).

    Args:
        path: the file to write.
        name: the experiment's name.
        state: the server after its last finished round.
        cum_bytes_up: uplink bytes so far.
        cum_bytes_down: downlink bytes so far.
        delivered: for each client told nothing yet, whether its last update counted.
    """
    contents: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "name": name,
        "round": state.round,
        "model": _cpu(state.model),
        "momentum": _cpu(state.momentum),
        "public": _cpu(state.public),
        "downlink": {
            k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in flatten(state.downlink).items()
        },
        "received": dict(state.received),
        "stale": {c: _cpu(update) for c, update in state.stale.items()},
        "stale_examples": dict(state.stale_examples),
        "delivered": {str(c): bool(d) for c, d in (delivered or {}).items()},
        "cum_bytes_up": cum_bytes_up,
        "cum_bytes_down": cum_bytes_down,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(contents, partial)
    os.replace(partial, path)
    logger.info("round %d: checkpoint written to %s", state.round, path)


def find_checkpoint(path: Path) -> Path:
    """The checkpoint `path` names: the file itself, or the latest one in a folder.

    A run folder works too (its `checkpoints/` folder is searched).

    Raises:
        FileNotFoundError: if there is no checkpoint there.
    """
    if path.is_file():
        return path
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = sorted(folder.glob("round-*.pt")) if folder.is_dir() else []
    if not found:
        raise FileNotFoundError(f"no checkpoint at {path} (expected a round-*.pt file)")
    return found[-1]


def load_checkpoint(path: Path, aggregator: Aggregator) -> Checkpoint:
    """Reads a checkpoint and checks it against `aggregator`'s model and codecs.

    Raises:
        FileNotFoundError: if there is no checkpoint at `path`.
        ValueError: if the file is not a thinwire checkpoint or does not fit this experiment
            (another model, another downlink codec, more rounds than the run has).
    """
    file = find_checkpoint(path)
    try:
        contents = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a foreign or damaged file
        raise ValueError(f"{file} is not a readable checkpoint: {exc}") from None
    if not isinstance(contents, dict) or contents.get("format") != _FORMAT:
        raise ValueError(f"{file} is not a thinwire checkpoint")
    version = contents.get("version")
    if version not in _VERSIONS:
        raise ValueError(f"{file}: checkpoint version {contents.get('version')} is not supported")
    experiment = aggregator.experiment
    if contents.get("name") != experiment.name:
        logger.warning(
            "%s was written by experiment %r, resuming it as %r",
            file,
            contents.get("name"),
            experiment.name,
        )
    round = contents.get("round")
    if not isinstance(round, int) or not 0 <= round < experiment.train.rounds:
        raise ValueError(
            f"{file}: round {round!r} leaves nothing to run (train.rounds is "
            f"{experiment.train.rounds})"
        )
    template = aggregator.state
    model = _tensors(file, "model", contents.get("model"), template.model)
    momentum = contents.get("momentum") or {}
    public = contents.get("public") or {}
    clients = experiment.data.clients
    stale = contents.get("stale") or {}
    state = AggregatorState(
        round=round,
        model=model,
        momentum=_tensors(file, "momentum", momentum, template.model) if momentum else {},
        public=_tensors(file, "public", public, template.public) if template.public else {},
        downlink=_downlink(file, contents.get("downlink"), template.downlink),
        received=_per_client(file, "received", contents.get("received", {}), clients, int),
        stale={
            c: _tensors(file, f"stale[{c}]", update, template.model)
            for c, update in _per_client(file, "stale", stale, clients, dict).items()
        },
        stale_examples=_per_client(
            file, "stale_examples", contents.get("stale_examples", {}), clients, float
        ),
    )
    if any(not 1 <= r <= round for r in state.received.values()):
        raise ValueError(f"{file}: received {state.received} names rounds after {round}")
    delivered = _per_client(file, "delivered", contents.get("delivered", {}), clients, bool)
    totals = [contents.get(key) for key in ("cum_bytes_up", "cum_bytes_down")]
    if not all(isinstance(t, int) and t >= 0 for t in totals):
        raise ValueError(f"{file}: byte totals {totals} are not counts")
    if version == 1:
        logger.warning(
            "%s is a version 1 checkpoint: clients start afresh (full model, zero residuals)",
            file,
        )
    logger.info("resuming from %s (round %d)", file, round)
    return Checkpoint(
        state,
        int(totals[0]),  # type: ignore[arg-type]
        int(totals[1]),  # type: ignore[arg-type]
        {int(c): d for c, d in delivered.items()},
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_KINDS: dict[type, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: _is_number,
    dict: lambda v: isinstance(v, dict),
}


def _per_client(file: Path, field: str, value: Any, clients: int, kind: type) -> dict[str, Any]:
    """A `client (as str) -> value` mapping, checked: clients in range, values of `kind`."""
    if not isinstance(value, dict):
        raise ValueError(f"{file}: {field} must be a mapping, got {type(value).__name__}")
    out = {}
    for client, item in value.items():
        number = int(client) if isinstance(client, str) and client.isdigit() else -1
        if not 0 <= number < clients:
            raise ValueError(f"{file}: {field} names client {client!r} (0..{clients - 1})")
        if not _KINDS[kind](item):
            raise ValueError(f"{file}: {field}[{client!r}] must be a {kind.__name__}: {item!r}")
        out[client] = float(item) if kind is float else item
    return out


def _cpu(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in tensors.items()}


def _tensors(
    file: Path, field: str, value: Any, template: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or set(value) != set(template):
        found = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{file}: {field} has tensors {found}, this model has {sorted(template)}")
    out = {}
    for name, like in template.items():
        tensor = value[name]
        if not isinstance(tensor, torch.Tensor) or tensor.shape != like.shape:
            raise ValueError(f"{file}: {field}[{name!r}] does not match {tuple(like.shape)}")
        out[name] = tensor.to(device=like.device, dtype=like.dtype)
    return out


def _downlink(file: Path, value: Any, template: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{file}: downlink state is missing")
    try:
        state: dict[str, Any] = unflatten(template, value)
    except ValueError as exc:
        raise ValueError(f"{file}: downlink codec state does not fit: {exc}") from None
    return state
