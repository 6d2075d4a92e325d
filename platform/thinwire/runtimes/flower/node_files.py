"""Checked folders on a SuperNode's disk: written whole or not at all, verified on read.

A node keeps two kinds of files between ClientApp processes: client states
(`thinwire.runtimes.flower.state`) and cached data partitions
(`thinwire.runtimes.flower.partition`). Both are a folder holding `tensors.pt` (every tensor,
`torch.save`, read back memory-mapped) and `manifest.json` (what the folder belongs to, the
size and SHA-256 of `tensors.pt`, and a digest of the manifest itself). `write_folder` builds
the folder under a temporary name and renames it into place, so a reader sees a whole folder
or none; `read_manifest` and `read_tensors` check it and raise `Damaged` naming the file and
what is wrong with it, so each caller decides what damage means (a lost state, a cache to
rebuild).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "MANIFEST",
    "TENSORS",
    "Damaged",
    "digest",
    "read_manifest",
    "read_tensors",
    "write_folder",
]

MANIFEST = "manifest.json"
TENSORS = "tensors.pt"
_CHUNK = 1 << 20


class Damaged(ValueError):
    """A node file is missing, unreadable or not what its manifest says."""


def digest(body: Mapping[str, Any]) -> str:
    """SHA-256 of `body` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_folder(target: Path, tensors: Mapping[str, torch.Tensor], body: Mapping[str, Any]) -> str:
    """Writes `tensors` and a manifest of `body` as the folder `target`; returns its digest.

    The manifest records `body`, the size and SHA-256 of the tensors' file under
    `"tensors"`, and the digest of all that under `"digest"`. An older `target` is replaced
    only once the new folder is complete and synced.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
    partial.mkdir()
    try:
        with (partial / TENSORS).open("wb") as file:
            torch.save(dict(tensors), file)
            file.flush()
            os.fsync(file.fileno())
        manifest = {
            **body,
            "tensors": {
                "bytes": (partial / TENSORS).stat().st_size,
                "sha256": _sha256(partial / TENSORS),
            },
        }
        sealed = digest(manifest)
        with (partial / MANIFEST).open("w") as file:
            json.dump({**manifest, "digest": sealed}, file)
            file.flush()
            os.fsync(file.fileno())
        _replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return sealed


def read_manifest(folder: Path, expect: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The manifest of `folder` without its digest, and the digest, once both are right.

    Args:
        folder: the folder `write_folder` wrote.
        expect: fields the manifest must hold with these values (what it belongs to).

    Raises:
        Damaged: the manifest is missing or unreadable, says it belongs to something else
            than `expect`, or does not match its digest.
    """
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise Damaged(f"{path.name} is missing") from None
    except (OSError, ValueError) as exc:
        raise Damaged(f"{path.name} is unreadable ({exc})") from None
    if not isinstance(manifest, dict):
        raise Damaged(f"{path.name} is not a JSON object")
    body = {k: v for k, v in manifest.items() if k != "digest"}
    wrong = {k: body.get(k) for k, v in expect.items() if body.get(k) != v}
    if wrong:
        raise Damaged(f"its manifest says {wrong}")
    sealed = manifest.get("digest")
    if not isinstance(sealed, str) or sealed != digest(body):
        raise Damaged(f"{path.name} does not match its digest")
    return body, sealed


def read_tensors(folder: Path, manifest: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of `folder`, memory-mapped, once their size and SHA-256 match `manifest`.

    Raises:
        Damaged: the file is missing, of another size or checksum, or not a mapping of
            tensors.
    """
    path = folder / TENSORS
    files = manifest.get("tensors")
    if not isinstance(files, dict):
        raise Damaged(f"{MANIFEST} does not describe {path.name}")
    if not path.is_file():
        raise Damaged(f"{path.name} is missing")
    size = path.stat().st_size
    if size != files.get("bytes"):
        raise Damaged(f"{path.name} has {size} bytes, the manifest says {files.get('bytes')}")
    if _sha256(path) != files.get("sha256"):
        raise Damaged(f"{path.name} does not match its SHA-256 (damaged)")
    try:
        tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises many types for a damaged file
        raise Damaged(f"{path.name} is unreadable ({exc})") from None
    if not isinstance(tensors, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()
    ):
        raise Damaged(f"{path.name} is not a mapping of tensors")
    return tensors


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _replace(partial: Path, target: Path) -> None:
    """Renames `partial` to `target`, moving an older `target` aside first."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.{uuid.uuid4().hex}.old")
        target.rename(old)
    partial.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):  # not every file system syncs folders
        descriptor = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
