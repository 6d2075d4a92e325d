"""The `thinwire` command: one Typer app, its commands grouped by what they run."""

from __future__ import annotations

from thinwire.cli import experiments, flower, gossip
from thinwire.cli._app import app

__all__ = ["app", "main"]

_COMMANDS = (experiments, gossip, flower)  # importing a group registers its commands


def main() -> None:
    """Entry point of the `thinwire` console script."""
    app()
