"""One gossip node's network side, assembled: serve pushes into a mailbox, push to neighbours.

The gossip round logic (CHOCO, SPARQ, JWINS nodes) needs two calls per round, whatever the
transport: `push(round, update_bytes)` and `collect(round)`. `PeerEndpoint` provides them
over the gRPC peer service, with one `Traffic` ledger for both directions, and the graph
schedule deciding every round whom to push to and whose pushes to accept.

Example (two nodes on loopback; the handler stores the raw bytes):
    >>> from thinwire.topologies.transport.options import TransportSettings
    >>> addresses = {}
    >>> def make(node):
    ...     return PeerEndpoint(
    ...         node=node, run_id="demo", neighbours=lambda r: {1 - node},
    ...         handler=lambda d: bytes(d.payload), resolve=addresses.__getitem__,
    ...         listen="127.0.0.1:0", insecure=True, settings=TransportSettings(timeout_s=5))
    >>> with make(0) as a, make(1) as b:
    ...     addresses.update({0: f"127.0.0.1:{a.port}", 1: f"127.0.0.1:{b.port}"})
    ...     a.push(0, b"hello")[1].outcome, b.collect(0).messages
    ('DELIVERED', {0: b'hello'})
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Generic, TypeVar

from thinwire.config import GossipRuntime
from thinwire.topologies.transport.client import PeerClient, PushResult
from thinwire.topologies.transport.mailbox import Inbox, Mailbox
from thinwire.topologies.transport.options import TransportSettings
from thinwire.topologies.transport.peers import listen_address, peer_addresses
from thinwire.topologies.transport.receiver import Delivery, GossipReceiver
from thinwire.topologies.transport.security import TLSIdentity, require_security
from thinwire.topologies.transport.service import GossipServicer, create_server, stop_server
from thinwire.topologies.transport.traffic import Traffic

__all__ = ["PeerEndpoint"]

T = TypeVar("T")


class PeerEndpoint(Generic[T]):
    """A node's server, mailbox and client, started together and closed together.

    Args:
        node: this node's id.
        run_id: the run; pushes from other runs are refused.
        neighbours: the node's neighbours in a round (e.g. `partial(schedule.neighbours,
            node=i)` bound to a `GraphSchedule`); pushes go to them, and only theirs are
            accepted.
        handler: decodes and validates a received update (raise `ValueError` to reject).
        resolve: a neighbour's `host:port`, given its id.
        listen: the address to serve on (port 0 picks one; see `port`).
        settings: chunking, size limit, deadline (also the round deadline), retries.
        window: rounds buffered ahead of the current one.
        tls: this node's TLS identity; or
        insecure: True for plaintext (must be explicit).
        start_round: the first round `collect` will hand out.
    """

    def __init__(
        self,
        *,
        node: int,
        run_id: str,
        neighbours: Callable[[int], Collection[int]],
        handler: Callable[[Delivery], T],
        resolve: Callable[[int], str],
        listen: str,
        settings: TransportSettings | None = None,
        window: int = 2,
        tls: TLSIdentity | None = None,
        insecure: bool = False,
        start_round: int = 0,
    ) -> None:
        require_security(tls, insecure, "PeerEndpoint")
        self.node = node
        self.settings = settings or TransportSettings()
        self.traffic = Traffic()
        self.mailbox: Mailbox[T] = Mailbox(window=window, start_round=start_round)
        self.receiver = GossipReceiver(
            node=node,
            run_id=run_id,
            neighbours=neighbours,
            mailbox=self.mailbox,
            handler=handler,
            max_message_bytes=self.settings.max_message_bytes,
            traffic=self.traffic,
        )
        self._neighbours = neighbours
        self.client = PeerClient(
            node=node,
            run_id=run_id,
            resolve=resolve,
            settings=self.settings,
            tls=tls,
            insecure=insecure,
            traffic=self.traffic,
        )
        try:
            self._server, self.port = create_server(
                listen,
                GossipServicer(self.receiver, self.settings.stream_limits),
                tls=tls,
                insecure=insecure,
                settings=self.settings,
            )
        except BaseException:
            self.client.close()
            raise

    @classmethod
    def from_runtime(
        cls,
        runtime: GossipRuntime,
        *,
        node: int,
        nodes: int,
        neighbours: Callable[[int], Collection[int]],
        handler: Callable[[Delivery], T],
        start_round: int = 0,
        model: Sequence[int] | None = None,
    ) -> PeerEndpoint[T]:
        """The endpoint a gossip runtime section describes for node `node` of `nodes`.

        `model` (each tensor's element count) derives the message size cap when the section
        leaves `max_message_bytes` unset (see `TransportSettings.from_runtime`).
        """
        addresses = peer_addresses(runtime, nodes)
        return cls(
            node=node,
            run_id=runtime.run_id,
            neighbours=neighbours,
            handler=handler,
            resolve=addresses.__getitem__,
            listen=listen_address(runtime, node, nodes),
            settings=TransportSettings.from_runtime(runtime, model),
            window=runtime.window,
            tls=TLSIdentity.from_config(runtime.tls) if runtime.tls is not None else None,
            insecure=runtime.insecure,
            start_round=start_round,
        )

    def push(self, round: int, message: bytes) -> dict[int, PushResult]:
        """Sends this node's encoded update of `round` to its neighbours in that round."""
        return self.client.push(round, message, self._neighbours(round))

    def collect(self, round: int) -> Inbox[T]:
        """The neighbours' updates of `round`, waiting at most the deadline for missing ones."""
        return self.mailbox.collect(round, self._neighbours(round), timeout=self.settings.timeout_s)

    def close(self, grace_s: float = 1.0) -> None:
        """Stops serving (pushes in flight get `grace_s` seconds) and closes the channels."""
        try:
            stop_server(self._server, grace_s)
        finally:
            self.client.close()

    def __enter__(self) -> PeerEndpoint[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
