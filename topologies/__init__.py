"""Decentralized topologies: communication graphs, mixing weights, and the gRPC peer service.

Graph side: `build_graph` and `GraphSchedule` turn the experiment's `topology:` section into
the graph and mixing matrix of each round; `summarize`, `summary_table` and `draw_graph`
describe them.

Network side: a node serves `Gossip.Push` (`gossip.proto`) through a `GossipServicer` and
`GossipReceiver` into a `Mailbox`, and pushes its own updates with a `PeerClient`;
`PeerEndpoint` assembles the lot from the `gossip` runtime section. `write_run_certificates`
creates the CA and per-peer certificates for mutual TLS.
"""

from thinwire.topologies.certificates import (
    PeerFiles,
    RunCertificates,
    create_ca,
    issue_peer_certificate,
    node_common_name,
    node_from_common_name,
    write_run_certificates,
)
from thinwire.topologies.endpoint import PeerEndpoint
from thinwire.topologies.graphs import (
    BUILDERS,
    GraphError,
    build_graph,
    derived_seed,
    describe_components,
    is_time_varying,
    read_edge_list,
    require_connected,
    torus_shape,
)
from thinwire.topologies.mailbox import Admission, Inbox, Mailbox, MailboxCounters
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
from thinwire.topologies.options import (
    TransportSettings,
    channel_options,
    server_options,
    service_config,
)
from thinwire.topologies.peers import listen_address, peer_addresses
from thinwire.topologies.receiver import Delivery, GossipReceiver, PushRejected, ReceiverCounters
from thinwire.topologies.schedule import GraphSchedule, RoundGraph
from thinwire.topologies.security import TLSIdentity, peer_common_name, require_security
from thinwire.topologies.service import GossipServicer, create_server, serving, stop_server
from thinwire.topologies.summary import TopologySummary, draw_graph, summarize, summary_table
from thinwire.topologies.traffic import LinkTraffic, Traffic
from thinwire.topologies.transport import PeerClient, PushResult

__all__ = [
    "BUILDERS",
    "Admission",
    "Delivery",
    "GossipReceiver",
    "GossipServicer",
    "GraphError",
    "GraphSchedule",
    "Inbox",
    "LinkTraffic",
    "Mailbox",
    "MailboxCounters",
    "MixingError",
    "PeerClient",
    "PeerEndpoint",
    "PeerFiles",
    "PushRejected",
    "PushResult",
    "ReceiverCounters",
    "RoundGraph",
    "RunCertificates",
    "Spectrum",
    "TLSIdentity",
    "TopologySummary",
    "Traffic",
    "TransportSettings",
    "build_graph",
    "channel_options",
    "create_ca",
    "create_server",
    "describe_components",
    "derived_seed",
    "draw_graph",
    "is_time_varying",
    "issue_peer_certificate",
    "listen_address",
    "load_mixing_matrix",
    "max_degree_weights",
    "metropolis_hastings",
    "mixing_matrix",
    "node_common_name",
    "node_from_common_name",
    "peer_addresses",
    "peer_common_name",
    "read_edge_list",
    "require_connected",
    "require_security",
    "server_options",
    "service_config",
    "serving",
    "spectrum",
    "stop_server",
    "summarize",
    "summary_table",
    "torus_shape",
    "validate_mixing",
    "write_run_certificates",
]
