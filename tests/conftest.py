"""Settings every test shares."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _flower_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's home (and with it the default client-state folder) in the test's own folder.

    In-process ClientApps keep client state under `$FLWR_HOME` unless their node config
    names a folder; a test must never read or write the user's `~/.flwr`.
    """
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr_home"))
