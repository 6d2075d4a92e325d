"""The `thinwire` command: one Typer app, its commands grouped by what they run.

- `experiments`: `run`, `validate` (simulated runs and sweeps);
- `results`: `compare` (run folders as a results table and figure);
- `flower`: `server`, `client` (the star on Flower's deployment engine);
- `gossip`: `topology`, `peer` (decentralized runs on a graph);
- `ddp`: `ddp` (the star's clients as torch.distributed ranks).

Importing a group registers its commands on `app`, in the order `thinwire --help` lists them.
"""

from __future__ import annotations

from thinwire.cli import ddp, experiments, flower, gossip, results  # noqa: F401  (register commands)
from thinwire.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the `thinwire` console script."""
    app()
