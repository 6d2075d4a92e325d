"""The federated server: the Aggregator, its composable pieces and client sampling.

`buffered` is the asynchronous star's server (FedBuff) over the same pieces. The pieces:
aggregation rules (`rules`, chosen by the `aggregation` section), the server
halves of send policies (`halves`, named by the policy kind) and the server step (`steps`,
chosen by `train.server`). The Flower ServerApp wraps the Aggregator.
"""

from typing import Any

from thinwire.server.aggregator import Aggregator, AggregatorState, Receipt, RoundResult
from thinwire.server.buffered import BufferedServer
from thinwire.server.halves import ServerHalf, build_server_half, register_server_half
from thinwire.server.sampling import sample_clients
from thinwire.server.steps import build_step
from thinwire.server.vote import VoteAggregator

__all__ = [
    "Aggregator",
    "AggregatorState",
    "BufferedServer",
    "Receipt",
    "RoundResult",
    "ServerHalf",
    "VoteAggregator",
    "build_aggregator",
    "build_server_half",
    "build_step",
    "register_server_half",
    "sample_clients",
]


def build_aggregator(**kwargs: Any) -> Aggregator:
    """The experiment's server (`Aggregator` arguments): a `VoteAggregator` with `vote`."""
    if kwargs["experiment"].vote is not None:
        return VoteAggregator(**kwargs)
    return Aggregator(**kwargs)
