"""The gossip runtimes: every node of a run in one process, or one node as a peer process.

`simulate_gossip` runs every node of a run in one process over real bytes; `run_peer` runs
one node as a `thinwire peer` process, its rounds over a `PeerExchange`, with checkpoints
and a `NodeReport` log per round; `write_peer_run` (`thinwire peer --report`) turns the
peers' logs and final checkpoints into the run folder `thinwire run` writes.

Importing this package loads gRPC and the TLS side: the peer runtime needs the transport.
"""

from thinwire.topologies.runtime.exchange import (
    PATIENCE,
    PeerExchange,
    RoundWatch,
    exchange_spacing,
    exchanges_between,
)
from thinwire.topologies.runtime.peer import (
    PeerAbandoned,
    PeerResult,
    PeerRunSummary,
    node_log_path,
    run_peer,
    summarize_peers,
    wait_for_peers,
)
from thinwire.topologies.runtime.peer_report import write_peer_run
from thinwire.topologies.runtime.reports import NodeLog, NodeReport, read_node_log
from thinwire.topologies.runtime.simulation import (
    GossipSimulation,
    average_model,
    consensus_distance,
    network_s,
    simulate_gossip,
)

__all__ = [
    "GossipSimulation",
    "NodeLog",
    "NodeReport",
    "PATIENCE",
    "PeerAbandoned",
    "PeerExchange",
    "PeerResult",
    "PeerRunSummary",
    "RoundWatch",
    "average_model",
    "consensus_distance",
    "exchange_spacing",
    "exchanges_between",
    "network_s",
    "node_log_path",
    "read_node_log",
    "run_peer",
    "simulate_gossip",
    "summarize_peers",
    "wait_for_peers",
    "write_peer_run",
]
