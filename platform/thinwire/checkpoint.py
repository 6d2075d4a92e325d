"""Checkpoints: one file format for the Flower server, the simulated star and gossip peers.

A checkpoint is one `torch.save` file of plain containers, tensors and numbers, read back
with `torch.load(weights_only=True)` (a checkpoint file cannot run code):

    format    "thinwire-checkpoint"
    version   3 (older files are refused, naming their version: start such a run afresh)
    kind      whose state it is: "star" (a Flower server), "simulation" (a simulated star)
              or "node" (a gossip peer's node)
    name      the experiment's name
    digest    `experiment_digest` of the experiment that wrote it
    round     the last finished round
    state     the state itself, as its runtime lays it out (`thinwire.runtimes.star`,
              `thinwire.runtimes.simulation`, `NodeCheckpoint` below)

`save_checkpoint` writes atomically: to a temporary name, synced, then renamed over the
target, so a crash at any moment leaves the previous checkpoint intact and a reader never
sees half a file. `load_checkpoint` checks format, version, kind and, when asked, the digest;
each runtime then checks the state against the run it resumes (another model or codec is an
error naming the file and the field).

Example:
    >>> import tempfile, torch
    >>> path = node_checkpoint_path(tempfile.mkdtemp(), 0)
    >>> save_node_checkpoint(path, NodeCheckpoint(0, 3, {"x": torch.ones(2)}), digest="d")
    >>> load_node_checkpoint(path, digest="d").round
    3
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.config import Experiment
from thinwire.statetree import Leaf

__all__ = [
    "VERSION",
    "NodeCheckpoint",
    "Saved",
    "experiment_digest",
    "find_checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "load_node_checkpoint",
    "node_checkpoint_path",
    "round_checkpoint_path",
    "save_checkpoint",
    "save_node_checkpoint",
]

_FORMAT = "thinwire-checkpoint"
VERSION = 3
"""Version of the layout above."""
_ROUND_FILE = re.compile(r"round-(\d{6,})\.pt")


class Saved(NamedTuple):
    """A checkpoint as read from its file: the header and the runtime's state."""

    path: Path  # the file it came from (for error messages)
    kind: str
    name: str  # the name of the experiment that wrote it
    digest: str  # that experiment's `experiment_digest`
    round: int  # the last finished round
    state: dict[str, Any]


def experiment_digest(experiment: Experiment) -> str:
    """A hash of everything that shapes a run's state: the experiment minus where it runs.

    Checkpoints carry it, and a Flower client's state folder is named by its first 16 hex
    digits (`thinwire.runtimes.flower.state.state_key`).

    The runtime section (addresses, certificates: they differ per node) and the output
    folder are left out.
    """
    data = experiment.model_dump(mode="json", exclude={"runtime", "output"})
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def round_checkpoint_path(folder: str | Path, round: int) -> Path:
    """Where a star's checkpoint after `round` goes in a checkpoint folder."""
    return Path(folder) / f"round-{round:06d}.pt"


def node_checkpoint_path(folder: str | Path, node: int) -> Path:
    """Where gossip node `node` keeps its checkpoint in `folder`: `node-<i>.pt`."""
    if node < 0:
        raise ValueError(f"node ids are >= 0, got {node}")
    return Path(folder) / f"node-{node}.pt"


def latest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The newest round checkpoint in `folder` and its round, or None if it holds none."""
    found = [
        (int(m.group(1)), path)
        for path in (folder.iterdir() if folder.is_dir() else ())
        if (m := _ROUND_FILE.fullmatch(path.name))
    ]
    if not found:
        return None
    round, path = max(found)
    return path, round


def find_checkpoint(path: Path) -> Path:
    """The checkpoint `path` names: the file itself, or the latest one in a folder.

    A run folder works too (its `checkpoints/` folder is searched).

    Raises:
        FileNotFoundError: if there is no checkpoint there.
    """
    if path.is_file():
        return path
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = latest_checkpoint(folder)
    if found is None:
        raise FileNotFoundError(f"no checkpoint at {path} (expected a round-*.pt file)")
    return found[0]


def save_checkpoint(
    path: str | Path,
    *,
    kind: str,
    name: str,
    digest: str,
    round: int,
    state: Mapping[str, Any],
) -> None:
    """Writes a checkpoint atomically (temporary file, fsync, rename).

    Args:
        path: the file to write (its folder is created).
        kind: whose state it is ("star", "simulation", "node").
        name: the experiment's name.
        digest: the experiment's `experiment_digest`.
        round: the last finished round.
        state: the runtime's state: containers of tensors, numbers and strings.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    contents = {
        "format": _FORMAT,
        "version": VERSION,
        "kind": kind,
        "name": name,
        "digest": digest,
        "round": round,
        "state": dict(state),
    }
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as file:
        torch.save(contents, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, target)


def load_checkpoint(
    path: str | Path,
    *,
    kind: str,
    digest: str | None = None,
    map_location: torch.device | str | None = "cpu",
) -> Saved:
    """Reads a checkpoint that `save_checkpoint` wrote and checks its header.

    Args:
        path: the file.
        kind: the kind of state expected.
        digest: the current experiment's `experiment_digest`: a checkpoint of another
            experiment is refused. None leaves the comparison to the caller (`Saved.digest`).
        map_location: where to put the tensors.

    Raises:
        ValueError: for a file that is not a readable thinwire checkpoint, of another
            version or kind, or (with `digest`) of another experiment.
    """
    file = Path(path)
    try:
        contents: Any = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # OSError, RuntimeError, the weights-only unpickler's errors...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{file} is not a readable checkpoint ({first})") from None
    if not isinstance(contents, dict) or contents.get("format") != _FORMAT:
        raise ValueError(f"{file} is not a thinwire checkpoint")
    version = contents.get("version")
    if version != VERSION:
        raise ValueError(
            f"{file}: checkpoint version {version} is not supported (this thinwire reads "
            f"version {VERSION}); start the run afresh"
        )
    if contents.get("kind") != kind:
        raise ValueError(f"{file} holds a {contents.get('kind')!r} state, not a {kind!r} one")
    if digest is not None and contents.get("digest") != digest:
        raise ValueError(
            f"{file}: written by another experiment (the config changed since); "
            "remove it or point the run elsewhere"
        )
    round, state = contents.get("round"), contents.get("state")
    if not isinstance(round, int) or isinstance(round, bool) or round < 0:
        raise ValueError(f"{file}: round {round!r} is not a finished round")
    if not isinstance(state, dict):
        raise ValueError(f"{file}: the state is missing")
    return Saved(file, kind, str(contents.get("name")), str(contents.get("digest")), round, state)


class NodeCheckpoint(NamedTuple):
    """A gossip node's state after a round."""

    node: int  # the node's id
    round: int  # the last round it finished
    state: Mapping[str, Leaf]  # the node's `state_dict()`


def save_node_checkpoint(path: str | Path, checkpoint: NodeCheckpoint, *, digest: str) -> None:
    """Writes a gossip node's checkpoint (kind "node") atomically."""
    save_checkpoint(
        path,
        kind="node",
        name="",
        digest=digest,
        round=checkpoint.round,
        state={"node": checkpoint.node, "state": dict(checkpoint.state)},
    )


def load_node_checkpoint(
    path: str | Path,
    *,
    digest: str | None = None,
    map_location: torch.device | str | None = None,
) -> NodeCheckpoint:
    """Reads a gossip node's checkpoint; `digest` refuses one of another experiment.

    Raises:
        ValueError: see `load_checkpoint`.
    """
    saved = load_checkpoint(path, kind="node", digest=digest, map_location=map_location)
    node, state = saved.state.get("node"), saved.state.get("state")
    if not isinstance(node, int) or not isinstance(state, dict):
        raise ValueError(f"{saved.path}: not a gossip node's state")
    return NodeCheckpoint(node, saved.round, state)
