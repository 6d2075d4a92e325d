"""Server checkpoints: the global model and everything the server needs to continue a run.

A checkpoint is one `torch.save` file of plain containers, tensors and numbers (loaded back
with `torch.load(weights_only=True)`, so a checkpoint file cannot run code):

    format     "thinwire-checkpoint", version 1
    name       the experiment's name
    round      the last finished round
    model      name -> float32 tensor, the global model
    momentum   name -> tensor, the server momentum buffer ({} without momentum)
    public     name -> tensor, the downlink public copy ({} without a downlink codec)
    downlink   the downlink codec state, flattened with `thinwire.statetree`
    cum_bytes_up, cum_bytes_down   byte totals so far, so the run folder keeps counting

Client state (error-feedback residuals, policy state) lives on the SuperNodes and belongs to
the Flower run, so a resumed run starts its clients afresh: every client first gets the full
model (the server forgets which clients hold its public copy), and residuals restart at zero.
CSGD's stale copies of silent clients' last updates are left out for the same reason: the
clients' censoring state restarts too, so nothing stale is reused after a resume.
The model continues exactly from the checkpoint; the rounds after it are not bit-identical
to an uninterrupted run unless the codec keeps no client state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.server.aggregator import Aggregator, AggregatorState
from thinwire.statetree import flatten, unflatten

__all__ = ["Checkpoint", "checkpoint_path", "find_checkpoint", "load_checkpoint", "save_checkpoint"]

logger = logging.getLogger(__name__)

_FORMAT = "thinwire-checkpoint"
_VERSION = 1


class Checkpoint(NamedTuple):
    """A loaded checkpoint, ready to put into an `Aggregator`."""

    state: AggregatorState  # with `received` empty: clients restart without the public copy
    cum_bytes_up: int
    cum_bytes_down: int


def checkpoint_path(folder: Path, round: int) -> Path:
    """Where the checkpoint of `round` goes in a checkpoint folder."""
    return folder / f"round-{round:06d}.pt"


def save_checkpoint(
    path: Path, *, name: str, state: AggregatorState, cum_bytes_up: int, cum_bytes_down: int
) -> None:
    """Writes a checkpoint atomically (a reader never sees half a file)."""
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
    if contents.get("version") != _VERSION:
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
    state = AggregatorState(
        round=round,
        model=model,
        momentum=_tensors(file, "momentum", momentum, template.model) if momentum else {},
        public=_tensors(file, "public", public, template.public) if template.public else {},
        downlink=_downlink(file, contents.get("downlink"), template.downlink),
        received={},
    )
    totals = [contents.get(key) for key in ("cum_bytes_up", "cum_bytes_down")]
    if not all(isinstance(t, int) and t >= 0 for t in totals):
        raise ValueError(f"{file}: byte totals {totals} are not counts")
    logger.info("resuming from %s (round %d)", file, round)
    return Checkpoint(state, int(totals[0]), int(totals[1]))  # type: ignore[arg-type]


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
