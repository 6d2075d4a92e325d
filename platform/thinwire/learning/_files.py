"""Finding and reading the local files of on-disk data sets, with errors that say what to fix."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DatasetError", "find_folder", "read_file"]


class DatasetError(ValueError):
    """A data set whose files are missing, unreadable or not in the expected format."""


def find_folder(root: Path, subfolders: Sequence[str], names: Sequence[str]) -> Path:
    """Returns the first of `root`, `root/<subfolder>`... that holds every file in `names`.

    A file counts as present plain or gzipped (`name.gz`).

    Raises:
        DatasetError: naming the files looked for and every folder searched, and the files
            missing from a folder that holds only some of them.
    """
    folders = [root, *(root / sub for sub in subfolders)]
    partial = []
    for folder in folders:
        present = [name for name in names if _locate(folder, name) is not None]
        if len(present) == len(names):
            return folder
        if present:
            missing = [name for name in names if name not in present]
            partial.append(f"{folder} lacks {', '.join(missing)}")
    detail = f" ({'; '.join(partial)})" if partial else ""
    raise DatasetError(
        f"expected the files {', '.join(names)} (plain or .gz) in one of "
        f"{', '.join(str(f) for f in folders)}{detail}"
    )


def read_file(folder: Path, name: str) -> bytes:
    """Returns the contents of `folder/name`, or of `folder/name.gz` decompressed.

    Raises:
        DatasetError: the file is missing, unreadable, or not valid gzip.
    """
    path = _locate(folder, name)
    if path is None:
        raise DatasetError(f"expected the file {name} (plain or .gz) in {folder}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read the file ({exc})") from None


def _locate(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None
