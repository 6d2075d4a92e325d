"""The federated client (the Flower ClientApp wraps it)."""

from thinwire.clients.client import Client, ClientResult, ClientState

__all__ = ["Client", "ClientResult", "ClientState"]
