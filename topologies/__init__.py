"""Decentralized topologies: communication graphs, mixing weights, gossip nodes and peers.

Graph side: `build_graph` and `GraphSchedule` turn the experiment's `topology:` section into
the graph and mixing matrix of each round; `summarize`, `summary_table` and `draw_graph`
describe them.

Round logic: `build_node` makes the node that the `gossip:` section describes, as plain
objects over bytes: `DPSGDNode` (exact averaging), `ChocoNode` (CHOCO-SGD, and SPARQ-SGD
with its `Trigger`), `JwinsNode`. `simulate_gossip` runs every node of a run in one process;
`run_peer` runs one node as a `thinwire peer` process over a `PeerExchange`, with
checkpoints and `NodeReport` logs.

Network side: a node serves `Gossip.Push` (`gossip.proto`) through a `GossipServicer` and
`GossipReceiver` into a `Mailbox`, and pushes its own updates with a `PeerClient`;
`PeerEndpoint` assembles the lot from the `gossip` runtime section. `write_run_certificates`
creates the CA and per-peer certificates for mutual TLS.
"""

from thinwire.topologies.admission import (
    Claim,
    FrameWatchdog,
    StreamGate,
    StreamLimits,
    claim_metadata,
    read_claim,
)
from thinwire.topologies.certificates import (
    PeerFiles,
    RunCertificates,
    create_ca,
    issue_peer_certificate,
    node_common_name,
    node_from_common_name,
    write_run_certificates,
)
from thinwire.topologies.checkpoint import (
    Checkpoint,
    checkpoint_path,
    experiment_digest,
    load_checkpoint,
    save_checkpoint,
)
from thinwire.topologies.choco import ChocoNode, ChocoState, Link
from thinwire.topologies.dpsgd import DPSGDNode, DPSGDState
from thinwire.topologies.endpoint import PeerEndpoint
from thinwire.topologies.exchange import PeerExchange, RoundWatch
from thinwire.topologies.graphs import (
    BUILDERS,
    GraphError,
    build_graph,
    describe_components,
    is_time_varying,
    read_edge_list,
    require_connected,
    torus_shape,
)
from thinwire.topologies.jwins import JwinsNode, JwinsState
from thinwire.topologies.mailbox import Admission, Inbox, Mailbox, MailboxCounters
from thinwire.topologies.methods import build_node, methods, register_method
from thinwire.topologies.mixing import (
    MixingError,
    Spectrum,
    load_mixing_matrix,
    max_degree_weights,
    metropolis_hastings,
    mixing_matrix,
    spectrum,
    validate_mixing,
)
from thinwire.topologies.node import Absorbed, GossipNode, NodeCore, Prepared, Received
from thinwire.topologies.options import (
    TransportSettings,
    channel_options,
    message_bound,
    server_options,
    service_config,
)
from thinwire.topologies.peer import (
    PeerAbandoned,
    PeerResult,
    PeerRunSummary,
    run_peer,
    summarize_peers,
    wait_for_peers,
)
from thinwire.topologies.peers import listen_address, peer_addresses
from thinwire.topologies.receiver import Delivery, GossipReceiver, PushRejected, ReceiverCounters
from thinwire.topologies.reports import NodeLog, NodeReport, read_node_log
from thinwire.topologies.schedule import GraphSchedule, RoundGraph
from thinwire.topologies.security import TLSIdentity, peer_common_name, require_security
from thinwire.topologies.service import GossipServicer, create_server, serving, stop_server
from thinwire.topologies.simulation import (
    GossipSimulation,
    average_model,
    consensus_distance,
    simulate_gossip,
)
from thinwire.topologies.sparq import Trigger, threshold
from thinwire.topologies.summary import TopologySummary, draw_graph, summarize, summary_table
from thinwire.topologies.traffic import LinkTraffic, Traffic
from thinwire.topologies.transport import PeerClient, PushResult

__all__ = [
    "BUILDERS",
    "Absorbed",
    "Admission",
    "Checkpoint",
    "ChocoNode",
    "ChocoState",
    "Claim",
    "DPSGDNode",
    "DPSGDState",
    "Delivery",
    "FrameWatchdog",
    "GossipNode",
    "GossipReceiver",
    "GossipServicer",
    "GossipSimulation",
    "GraphError",
    "GraphSchedule",
    "Inbox",
    "JwinsNode",
    "JwinsState",
    "Link",
    "LinkTraffic",
    "Mailbox",
    "MailboxCounters",
    "MixingError",
    "NodeCore",
    "NodeLog",
    "NodeReport",
    "PeerAbandoned",
    "PeerClient",
    "PeerEndpoint",
    "PeerExchange",
    "PeerFiles",
    "PeerResult",
    "PeerRunSummary",
    "Prepared",
    "PushRejected",
    "PushResult",
    "Received",
    "ReceiverCounters",
    "RoundGraph",
    "RoundWatch",
    "RunCertificates",
    "Spectrum",
    "StreamGate",
    "StreamLimits",
    "TLSIdentity",
    "TopologySummary",
    "Traffic",
    "TransportSettings",
    "Trigger",
    "average_model",
    "build_graph",
    "build_node",
    "channel_options",
    "checkpoint_path",
    "claim_metadata",
    "consensus_distance",
    "create_ca",
    "create_server",
    "describe_components",
    "draw_graph",
    "experiment_digest",
    "is_time_varying",
    "issue_peer_certificate",
    "listen_address",
    "load_checkpoint",
    "load_mixing_matrix",
    "max_degree_weights",
    "message_bound",
    "methods",
    "metropolis_hastings",
    "mixing_matrix",
    "node_common_name",
    "node_from_common_name",
    "peer_addresses",
    "peer_common_name",
    "read_claim",
    "read_edge_list",
    "read_node_log",
    "register_method",
    "require_connected",
    "require_security",
    "run_peer",
    "save_checkpoint",
    "server_options",
    "service_config",
    "serving",
    "simulate_gossip",
    "spectrum",
    "stop_server",
    "summarize",
    "summarize_peers",
    "summary_table",
    "threshold",
    "torus_shape",
    "validate_mixing",
    "wait_for_peers",
    "write_run_certificates",
]
