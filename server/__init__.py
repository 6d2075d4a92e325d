"""The federated server: the Aggregator, its composable pieces and client sampling.

`buffered` is the asynchronous star's server (FedBuff) over the same pieces. The pieces:
aggregation rules (`rules`, chosen by the `aggregation` section), the server
halves of send policies (`halves`, named by the policy kind) and the server step (`steps`,
chosen by `train.server`). The Flower ServerApp wraps the Aggregator.
"""

from thinwire.server.aggregator import Aggregator, AggregatorState, Receipt, RoundResult
from thinwire.server.buffered import BufferedServer
from thinwire.server.halves import ServerHalf, build_server_half, register_server_half
from thinwire.server.sampling import sample_clients
from thinwire.server.steps import build_step

__all__ = [
    "Aggregator",
    "AggregatorState",
    "BufferedServer",
    "Receipt",
    "RoundResult",
    "ServerHalf",
    "build_server_half",
    "build_step",
    "register_server_half",
    "sample_clients",
]
