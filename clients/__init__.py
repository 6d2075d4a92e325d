"""The federated client (the Flower ClientApp wraps it)."""

from typing import Any

from thinwire.clients.client import Client, ClientResult, ClientState
from thinwire.clients.voter import VoteClient

__all__ = ["Client", "ClientResult", "ClientState", "VoteClient", "build_client"]


def build_client(**kwargs: Any) -> Client:
    """The experiment's client (`Client` arguments): a `VoteClient` with a `vote` section."""
    if kwargs["experiment"].vote is not None:
        return VoteClient(**kwargs)
    return Client(**kwargs)
