"""The gRPC side of a node's inbound endpoint: a thin servicer and its server.

The servicer only translates: it hands the raw frames and the caller's certificate name to a
`GossipReceiver` and turns a `PushRejected` into the call's status. `create_server` binds and
starts a server (port 0 lets the OS choose, as tests do); `serving` does the same for a
`with` block and always stops it.

Frames reach the servicer as raw bytes (the method is registered without a request
deserializer): `thinwire.topologies.framing` reads them without copying the update's slices.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, NoReturn

import grpc

from thinwire.topologies import gossip_pb2, gossip_pb2_grpc
from thinwire.topologies.framing import SERVICE_NAME
from thinwire.topologies.options import TransportSettings, server_options
from thinwire.topologies.receiver import GossipReceiver, PushRejected
from thinwire.topologies.security import TLSIdentity, peer_common_name, require_security

__all__ = ["GossipServicer", "create_server", "serving", "stop_server"]

logger = logging.getLogger(__name__)


class GossipServicer(gossip_pb2_grpc.GossipServicer):
    """Serves `Gossip.Push` by delegating to a `GossipReceiver`."""

    def __init__(self, receiver: GossipReceiver[Any]) -> None:
        self.receiver = receiver

    def Push(  # noqa: N802 -- the rpc's name in gossip.proto
        self, request_iterator: Iterator[bytes], context: grpc.ServicerContext
    ) -> gossip_pb2.PushReply:
        """Receives one push; aborts with the receiver's status when it refuses it."""
        try:
            return self.receiver.receive(request_iterator, identity=peer_common_name(context))
        except PushRejected as rejected:
            _abort(context, rejected.code, rejected.reason)
        except grpc.RpcError:
            # The pusher cancelled, or its deadline passed, in the middle of the stream.
            logger.info("node %d: a push stream ended early", self.receiver.node)
            _abort(context, grpc.StatusCode.CANCELLED, "the push stream ended early")


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str) -> NoReturn:
    context.abort(code, reason)
    raise AssertionError("grpc.ServicerContext.abort returned")  # it always raises


def _add_servicer(servicer: GossipServicer, server: grpc.Server) -> None:
    handler = grpc.stream_unary_rpc_method_handler(
        servicer.Push, response_serializer=gossip_pb2.PushReply.SerializeToString
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Push": handler}),)
    )


def create_server(
    address: str,
    servicer: GossipServicer,
    *,
    tls: TLSIdentity | None = None,
    insecure: bool = False,
    settings: TransportSettings | None = None,
    workers: int = 8,
) -> tuple[grpc.Server, int]:
    """Builds, binds and starts a server for `servicer`.

    Args:
        address: `host:port` to listen on; port 0 picks a free port.
        servicer: the node's servicer.
        tls: serve TLS with this identity (mutual when `tls.mutual`).
        insecure: serve plaintext; must be asked for explicitly, instead of `tls`.
        settings: transport settings; they cap the size of a frame.
        workers: pushes served at once (each holds one thread while it streams).

    Returns:
        The started server and the port it listens on.

    Raises:
        ValueError: unless exactly one of `tls` and `insecure=True` is given, or when the
            address cannot be bound.
    """
    require_security(tls, insecure, "create_server")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    options = server_options(settings or TransportSettings())
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gossip-push"),
        options=options,
    )
    _add_servicer(servicer, server)
    try:
        if tls is not None:
            port = server.add_secure_port(address, tls.server_credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        server.stop(None)
        raise ValueError(f"cannot listen on {address!r}: {exc}") from None
    server.start()
    logger.info(
        "node %d serving on port %d (%s)",
        servicer.receiver.node,
        port,
        "tls" if tls else "insecure",
    )
    return server, port


def stop_server(server: grpc.Server, grace_s: float = 1.0) -> None:
    """Stops `server`, letting pushes in flight finish for up to `grace_s` seconds."""
    server.stop(grace_s).wait()


@contextmanager
def serving(
    address: str,
    servicer: GossipServicer,
    *,
    tls: TLSIdentity | None = None,
    insecure: bool = False,
    settings: TransportSettings | None = None,
    workers: int = 8,
    grace_s: float = 1.0,
) -> Iterator[int]:
    """`create_server` for a `with` block: yields the port, stops the server on exit."""
    server, port = create_server(
        address, servicer, tls=tls, insecure=insecure, settings=settings, workers=workers
    )
    try:
        yield port
    finally:
        stop_server(server, grace_s)
