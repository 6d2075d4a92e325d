"""The gRPC peer transport: how a node's bytes reach its neighbours.

A node serves `Gossip.Push` (`gossip.proto`) through a `GossipServicer` and a
`GossipReceiver` into a `Mailbox`, and pushes its own updates with a `PeerClient`; both
sides count their bytes in a `Traffic` ledger. `StreamGate` and `StreamLimits` keep a
node's push workers from being held. `PeerEndpoint` assembles the lot from the `gossip`
runtime section, `TransportSettings` carries its deadlines and retries, and
`write_run_certificates` creates the CA and per-peer certificates for mutual TLS.
"""

from thinwire.topologies.transport.admission import (
    CLAIM_KEY,
    Claim,
    FrameWatchdog,
    StreamGate,
    StreamLimits,
    claim_metadata,
    read_claim,
    remote_host,
)
from thinwire.topologies.transport.certificates import (
    PeerFiles,
    RunCertificates,
    create_ca,
    issue_peer_certificate,
    write_run_certificates,
)
from thinwire.topologies.transport.client import PeerClient, PushResult
from thinwire.topologies.transport.endpoint import PeerEndpoint
from thinwire.topologies.transport.framing import (
    FRAME_OVERHEAD,
    PUSH_METHOD,
    SERVICE_NAME,
    chunk_count,
    frame_data,
    frame_header,
    parse_frame,
    push_frames,
)
from thinwire.topologies.transport.mailbox import Admission, Inbox, Mailbox, MailboxCounters
from thinwire.topologies.transport.options import (
    TransportSettings,
    channel_options,
    message_bound,
    server_options,
    service_config,
)
from thinwire.topologies.transport.peers import listen_address, peer_addresses
from thinwire.topologies.transport.receiver import (
    Delivery,
    GossipReceiver,
    PushRejected,
    ReceiverCounters,
)
from thinwire.topologies.transport.security import TLSIdentity, peer_common_name, require_security
from thinwire.topologies.transport.service import (
    GossipServicer,
    create_server,
    serving,
    stop_server,
)
from thinwire.topologies.transport.traffic import LinkTraffic, Traffic

__all__ = [
    "Admission",
    "CLAIM_KEY",
    "Claim",
    "Delivery",
    "FRAME_OVERHEAD",
    "FrameWatchdog",
    "GossipReceiver",
    "GossipServicer",
    "Inbox",
    "LinkTraffic",
    "Mailbox",
    "MailboxCounters",
    "PUSH_METHOD",
    "PeerClient",
    "PeerEndpoint",
    "PeerFiles",
    "PushRejected",
    "PushResult",
    "ReceiverCounters",
    "RunCertificates",
    "SERVICE_NAME",
    "StreamGate",
    "StreamLimits",
    "TLSIdentity",
    "Traffic",
    "TransportSettings",
    "channel_options",
    "chunk_count",
    "claim_metadata",
    "create_ca",
    "create_server",
    "frame_data",
    "frame_header",
    "issue_peer_certificate",
    "listen_address",
    "message_bound",
    "parse_frame",
    "peer_addresses",
    "peer_common_name",
    "push_frames",
    "read_claim",
    "remote_host",
    "require_security",
    "server_options",
    "service_config",
    "serving",
    "stop_server",
    "write_run_certificates",
]
