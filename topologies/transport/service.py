"""The gRPC side of a node's inbound endpoint: a thin servicer and its server.

The servicer only translates: it hands the raw frames and the caller's certificate name to a
`GossipReceiver` and turns a `PushRejected` into the call's status. `create_server` binds and
starts a server (port 0 lets the OS choose, as tests do); `serving` does the same for a
`with` block and always stops it.

Frames reach the servicer as raw bytes (the method is registered without a request
deserializer): `thinwire.topologies.transport.framing` reads them without copying the
update's slices.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn

import grpc

from thinwire.topologies.transport import gossip_pb2, gossip_pb2_grpc
from thinwire.topologies.transport.admission import (
    Claim,
    FrameWatchdog,
    StreamGate,
    StreamLimits,
    read_claim,
    remote_host,
)
from thinwire.topologies.transport.framing import SERVICE_NAME
from thinwire.topologies.transport.options import TransportSettings, server_options
from thinwire.topologies.transport.receiver import GossipReceiver, PushRejected
from thinwire.topologies.transport.security import TLSIdentity, peer_common_name, require_security

__all__ = ["GossipServicer", "create_server", "serving", "stop_server"]

logger = logging.getLogger(__name__)

_SPARE_WORKERS = 8
"""Threads beyond the admitted streams: even when every lane is held, a new stream is
screened (and an honest one answered) at once instead of waiting for a worker."""
_QUEUED_PER_STREAM = 4
"""Calls gRPC accepts at once per admitted stream: a burst of strangers queues behind
refusals that take microseconds each, so an honest push in the burst is delayed, not
refused; beyond it gRPC refuses at once (RESOURCE_EXHAUSTED)."""

_FINAL = (("grpc-retry-pushback-ms", "-1"),)
"""Trailing metadata that forbids the caller's channel to retry the call (gRPC retry spec)."""


class GossipServicer(gossip_pb2_grpc.GossipServicer):
    """Serves `Gossip.Push` by delegating to a `GossipReceiver`, within `StreamLimits`.

    Before a frame is read, the push's claim (call metadata) is screened and the stream is
    admitted to its lane or refused at once (see `thinwire.topologies.transport.admission`); then
    every frame must arrive within `limits.frame_timeout_s`, the push within
    `limits.stream_timeout_s`.
    """

    def __init__(self, receiver: GossipReceiver[Any], limits: StreamLimits | None = None) -> None:
        self.receiver = receiver
        self.limits = limits or StreamLimits()
        self.gate = StreamGate(self.limits)
        self.watchdog = FrameWatchdog(self.limits.frame_timeout_s, self.limits.stream_timeout_s)

    def Push(  # noqa: N802 -- the rpc's name in gossip.proto
        self, request_iterator: Iterator[bytes], context: grpc.ServicerContext
    ) -> gossip_pb2.PushReply:
        """Receives one push; aborts with the receiver's status when it refuses it."""
        identity = peer_common_name(context)
        try:
            claim = self._screen(context, identity)
            host = remote_host(context.peer())
            with ExitStack() as place:
                try:
                    place.enter_context(
                        self.gate.admit(host, None if claim is None else claim.sender)
                    )
                except PushRejected as rejected:
                    raise self.receiver.refused(rejected) from None
                frames = self.watchdog.watch(request_iterator, context.cancel)
                return self.receiver.receive(frames, identity=identity, claim=claim)
        except PushRejected as rejected:
            if not rejected.transient:
                # gRPC's retry policy would retry RESOURCE_EXHAUSTED (a full receiver); a
                # negative pushback tells the pusher's channel that this verdict is final.
                context.set_trailing_metadata(_FINAL)
            _abort(context, rejected.code, rejected.reason)
        except grpc.RpcError:
            # The pusher cancelled, or its deadline passed, in the middle of the stream.
            logger.info("node %d: a push stream ended early", self.receiver.node)
            _abort(context, grpc.StatusCode.CANCELLED, "the push stream ended early")

    def _screen(self, context: grpc.ServicerContext, identity: str | None) -> Claim | None:
        try:
            claim = read_claim(context.invocation_metadata())
        except ValueError as exc:
            raise self.receiver.refused(
                PushRejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            ) from None
        if claim is not None:
            self.receiver.screen(claim.run_id, claim.sender, claim.round, identity)
        return claim


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
) -> tuple[grpc.Server, int]:
    """Builds, binds and starts a server for `servicer`.

    Args:
        address: `host:port` to listen on; port 0 picks a free port.
        servicer: the node's servicer.
        tls: serve TLS with this identity (mutual when `tls.mutual`).
        insecure: serve plaintext; must be asked for explicitly, instead of `tls`.
        settings: transport settings; they cap the size of a frame.

    The server has a worker thread for every stream `servicer.limits` admits in all, plus a
    few that stay free to screen and refuse new streams; gRPC queues at most
    `_QUEUED_PER_STREAM` calls per admitted stream and refuses the rest at once.

    Returns:
        The started server and the port it listens on.

    Raises:
        ValueError: unless exactly one of `tls` and `insecure=True` is given, or when the
            address cannot be bound.
    """
    require_security(tls, insecure, "create_server")
    options = server_options(settings or TransportSettings())
    total = servicer.limits.total
    server = grpc.server(
        ThreadPoolExecutor(max_workers=total + _SPARE_WORKERS, thread_name_prefix="gossip-push"),
        options=options,
        maximum_concurrent_rpcs=_QUEUED_PER_STREAM * total,
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
    grace_s: float = 1.0,
) -> Iterator[int]:
    """`create_server` for a `with` block: yields the port, stops the server on exit."""
    server, port = create_server(address, servicer, tls=tls, insecure=insecure, settings=settings)
    try:
        yield port
    finally:
        stop_server(server, grace_s)
