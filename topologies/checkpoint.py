"""A gossip peer's checkpoint: its node's state after a finished round, written atomically.

A peer saves one file per node after every round: the node's state (`state_dict`, a flat
mapping of tensors and scalars from `thinwire.statetree`), the round, and a digest of the
experiment, so a peer never resumes from another experiment's state. The file is written to
a temporary name, synced, and renamed over the old one, so a crash at any moment leaves the
previous round's checkpoint intact. Loading uses `torch.load(weights_only=True)`: no pickled
code runs.

Example:
    >>> import tempfile, torch
    >>> path = Path(tempfile.mkdtemp()) / "node-0.pt"
    >>> save_checkpoint(path, Checkpoint(0, 3, {"x": torch.ones(2)}), digest="d")
    >>> load_checkpoint(path, digest="d").round
    3
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.config import Experiment
from thinwire.statetree import Leaf
from thinwire.topologies.naming import node_common_name

__all__ = [
    "Checkpoint",
    "checkpoint_path",
    "experiment_digest",
    "load_checkpoint",
    "save_checkpoint",
]

FORMAT = 1
"""Version of the checkpoint layout below."""


class Checkpoint(NamedTuple):
    """A node's state after a round."""

    node: int  # the node's id
    round: int  # the last round it finished
    state: Mapping[str, Leaf]  # the node's `state_dict()`


def experiment_digest(experiment: Experiment) -> str:
    """A hash of everything that shapes a node's state: the experiment minus where it runs.

    The runtime section (addresses, certificates: they differ per node) and the output
    folder are left out.
    """
    data = experiment.model_dump(mode="json", exclude={"runtime", "output"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def checkpoint_path(directory: str | Path, node: int) -> Path:
    """Where node `node` keeps its checkpoint in `directory`: `node-<i>.pt`."""
    return Path(directory) / f"{node_common_name(node)}.pt"


def save_checkpoint(path: str | Path, checkpoint: Checkpoint, *, digest: str) -> None:
    """Writes `checkpoint` to `path` atomically (temporary file, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    content = {
        "format": FORMAT,
        "digest": digest,
        "node": checkpoint.node,
        "round": checkpoint.round,
        "state": dict(checkpoint.state),
    }
    with temporary.open("wb") as file:
        torch.save(content, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)


def load_checkpoint(
    path: str | Path,
    *,
    digest: str | None = None,
    map_location: torch.device | str | None = None,
) -> Checkpoint:
    """Reads a checkpoint that `save_checkpoint` wrote.

    Args:
        path: the file.
        digest: the current experiment's `experiment_digest`; a checkpoint of another
            experiment is refused. None skips the check.
        map_location: where to put the tensors.

    Raises:
        ValueError: for a file that is not a thinwire checkpoint, of another format
            version, or of another experiment.
    """
    try:
        content: Any = torch.load(Path(path), map_location=map_location, weights_only=True)
    except Exception as exc:  # OSError, RuntimeError, the weights-only unpickler's errors...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}: not a readable checkpoint ({first})") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ValueError(f"{path}: not a thinwire gossip checkpoint of format {FORMAT}")
    if digest is not None and content.get("digest") != digest:
        raise ValueError(
            f"{path}: written by another experiment (the config changed since); "
            "remove it or point --checkpoint-dir elsewhere"
        )
    return Checkpoint(int(content["node"]), int(content["round"]), content["state"])
