"""Fixtures for the topology tests: real gRPC servers on 127.0.0.1:0, always stopped."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import grpc
import pytest

from thinwire.topologies.transport import (
    Delivery,
    GossipReceiver,
    GossipServicer,
    Mailbox,
    RunCertificates,
    StreamLimits,
    TLSIdentity,
    Traffic,
    TransportSettings,
    create_server,
    stop_server,
    write_run_certificates,
)

from .support import FAST, RUN, Node, raw_bytes

StartNode = Callable[..., Node]


@pytest.fixture
def start_node() -> Iterator[StartNode]:
    """Starts a node's server; every server started is stopped when the test ends."""
    servers: list[grpc.Server] = []

    def start(
        node: int,
        *,
        neighbours: Collection[int] | Callable[[int], Collection[int]],
        handler: Callable[[Delivery], Any] = raw_bytes,
        run_id: str = RUN,
        window: int = 2,
        settings: TransportSettings = FAST,
        tls: TLSIdentity | None = None,
        limits: StreamLimits | None = None,
    ) -> Node:
        lookup = neighbours if callable(neighbours) else (lambda r, fixed=neighbours: fixed)
        traffic = Traffic()
        mailbox: Mailbox[Any] = Mailbox(window=window)
        receiver = GossipReceiver(
            node=node,
            run_id=run_id,
            neighbours=lookup,
            mailbox=mailbox,
            handler=handler,
            max_message_bytes=settings.max_message_bytes,
            traffic=traffic,
        )
        servicer = GossipServicer(receiver, limits)
        server, port = create_server(
            "127.0.0.1:0",
            servicer,
            tls=tls,
            insecure=tls is None,
            settings=settings,
        )
        servers.append(server)
        return Node(node, port, mailbox, receiver, traffic, servicer)

    try:
        yield start
    finally:
        for server in servers:
            stop_server(server, 0)


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> RunCertificates:
    """A CA and certificates for nodes 0..3 of the run."""
    return write_run_certificates(tmp_path_factory.mktemp("pki"), 4, run_id=RUN)


@pytest.fixture(scope="session")
def foreign_certificates(tmp_path_factory: pytest.TempPathFactory) -> RunCertificates:
    """Another run's CA and certificates: same node names, untrusted issuer."""
    return write_run_certificates(tmp_path_factory.mktemp("pki-other"), 2, run_id="other")
