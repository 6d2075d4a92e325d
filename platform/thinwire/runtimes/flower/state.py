"""A client's `ClientState` in a node-local folder, checked before every use.

Flower starts a fresh ClientApp process for every message, so what a client keeps between
rounds (error-feedback residuals, its copy of the global model, policy memories, the DP
ledger) must live outside the process. Flower's `context.state` is the wrong place for
model-sized tensors: the ClientApp pushes it after its reply, inside an exit handler with a
5-second force-exit timer, and at 10M parameters converting and pushing 40-80 MB does not
finish in time, so the state silently vanishes. `StateStore` keeps it on the SuperNode's disk
instead, in a folder every ClientApp process of the node shares (`thinwire client
--state-dir`), keyed by what the state belongs to rather than by Flower's run id, so a
resumed run or a restarted SuperNode continues from it:

    <state-dir>/<experiment digest>/client-<partition>/round-<round>/
        tensors.pt      every tensor leaf (`torch.save`; read back memory-mapped)
        manifest.json   round, experiment digest, partition, the non-tensor leaves (JSON),
                        the size and SHA-256 of tensors.pt, and the digest of it all

A round's folder is written under a temporary name and renamed into place, so a reader
sees a whole state or none. `load` verifies the manifest, the tensors' size and checksum
and the structure against the client's initial state; anything missing, stale or damaged
raises `StateLost`, which the ClientApp answers as an error and the server counts and
repairs by re-synchronizing the client (full model, fresh state). The last `keep` rounds
stay on disk, so a server resumed from an older checkpoint finds the round it asks for.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from thinwire.checkpoint import experiment_digest
from thinwire.clients.client import ClientState
from thinwire.config import Experiment
from thinwire.runtimes.flower.messages import StateLost
from thinwire.runtimes.flower.node_files import Damaged, read_manifest, read_tensors, write_folder
from thinwire.statetree import Leaf, flatten, unflatten

__all__ = ["Fingerprint", "StateStore", "state_key"]

Fingerprint = tuple[tuple[str, int, int, int], ...]
"""A round folder's files as `stat` sees them: (name, inode, size, modification ns) each."""

_FORMAT = "thinwire-client-state"
_VERSION = 1
_ROUND = re.compile(r"round-(\d{6,})")


def state_key(experiment: Experiment) -> str:
    """Names what a client's state belongs to (16 hex digits of the experiment's digest).

    The digest is `thinwire.checkpoint.experiment_digest`, which leaves out `runtime`
    (addresses, timeouts) and `output`: they do not change what a client computes, so a run
    resumed with other timeouts, or written elsewhere, still finds its clients' state.
    """
    return experiment_digest(experiment)[:16]


class StateStore:
    """One client's states on its node's disk, one folder per round; see the module docstring.

    Args:
        root: the node's state folder (`thinwire client --state-dir`).
        experiment: `state_key` of the run's experiment.
        partition: the client index the node serves.
        keep: how many rounds' states to keep (at least 1).
    """

    def __init__(self, root: Path, *, experiment: str, partition: int, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"a state store keeps at least one round, got keep={keep}")
        self.experiment = experiment
        self.partition = partition
        self.keep = keep
        self.folder = root / experiment / f"client-{partition}"

    def rounds(self) -> list[int]:
        """The rounds whose state folder is present, ascending (not yet verified)."""
        if not self.folder.is_dir():
            return []
        found = (_ROUND.fullmatch(p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None)

    def save(self, state: ClientState, round: int) -> str:
        """Writes `state` as the client's state after `round`; returns its digest.

        States of later rounds (left by a run that was resumed from an earlier round) are
        removed, and of the earlier ones only the newest `keep - 1` stay.
        """
        tensors: dict[str, torch.Tensor] = {}
        scalars: dict[str, Leaf] = {}
        for path, leaf in flatten(state).items():
            if isinstance(leaf, torch.Tensor):
                tensors[path] = leaf.detach().to("cpu").contiguous()
            else:
                scalars[path] = leaf
        body = {**self._identity(round), "scalars": scalars}
        digest = write_folder(self._path(round), tensors, body)
        self._prune(round)
        return digest

    def fingerprint(self, round: int) -> Fingerprint | None:
        """What `stat` says of the files of `round`'s folder; None if it is missing.

        A process that keeps the state it saved compares this before reusing it: a folder
        deleted, truncated, rewritten or replaced since the save gives another fingerprint
        (and is then read with `load`, which verifies it), at the cost of a `stat` per file.
        """
        folder = self._path(round)
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
            stats = [(entry.name, entry.stat(follow_symlinks=False)) for entry in entries]
        except OSError:
            return None
        return tuple((name, st.st_ino, st.st_size, st.st_mtime_ns) for name, st in stats)

    def load(
        self, round: int, initial: ClientState, model: Mapping[str, torch.Tensor]
    ) -> tuple[ClientState, str]:
        """The state the client saved after `round`, verified, and its digest.

        Tensors are memory-mapped from the file (copy-on-write), not read into new buffers.

        Args:
            round: the round the server says the client's state is at (>= 1).
            initial: the client's `initial_state()`, the template the state must fit.
            model: the model's tensors (they shape `carry` when it is not empty).

        Raises:
            StateLost: naming what is missing, stale or damaged.
        """
        folder = self._path(round)
        where = f"client {self.partition}'s state of round {round} in {folder}"
        if not folder.is_dir():
            kept = self.rounds()
            raise StateLost(f"no {where} (the folder holds rounds {kept or 'none'})")
        try:
            body, digest = read_manifest(folder, self._identity(round))
            scalars = body.get("scalars")
            if not isinstance(scalars, dict):
                raise StateLost(f"{where}: the manifest lacks its scalars")
            tensors = read_tensors(folder, body)
        except Damaged as exc:
            raise StateLost(f"{where}: {exc}") from None
        flat: dict[str, Leaf] = {**scalars, **tensors}
        pending = tensors.get("pending")
        if pending is None or pending.dtype != torch.uint8 or pending.ndim != 1:
            raise StateLost(f"{where}: it has no 'pending' byte tensor")
        carried = any(path.startswith("carry/") and path != "carry/" for path in flat)
        template = initial._replace(
            carry={k: torch.zeros_like(v) for k, v in model.items()} if carried else {},
            pending=torch.empty_like(pending),
        )
        try:
            state: ClientState = unflatten(template, flat)
        except ValueError as exc:
            raise StateLost(f"{where} does not fit this client: {exc}") from None
        return state, digest

    def _identity(self, round: int) -> dict[str, Any]:
        """What a round's manifest must say it belongs to."""
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "experiment": self.experiment,
            "partition": self.partition,
            "round": round,
        }

    def _path(self, round: int) -> Path:
        return self.folder / f"round-{round:06d}"

    def _prune(self, round: int) -> None:
        earlier = [r for r in self.rounds() if r < round]
        doomed = [r for r in self.rounds() if r > round] + earlier[
            : max(0, len(earlier) - self.keep + 1)
        ]
        for old in doomed:
            shutil.rmtree(self._path(old), ignore_errors=True)
