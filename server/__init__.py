"""The federated server: the Aggregator and client sampling (the Flower ServerApp wraps them)."""

from thinwire.server.aggregator import Aggregator, AggregatorState, Receipt, RoundResult
from thinwire.server.sampling import sample_clients

__all__ = ["Aggregator", "AggregatorState", "Receipt", "RoundResult", "sample_clients"]
