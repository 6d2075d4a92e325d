"""Throughput of the gossip peer transport against raw gRPC client streaming, on loopback.

One process, two threads of work: a node's server (`thinwire.topologies.transport`) and a
client that pushes one large message. The transport's rate counts everything a push costs: framing,
the header checks, reassembly into one buffer and the (trivial) handler, up to the reply.
The raw rate is a bare gRPC client-streaming call with the same 1 MiB slices that only sums
their lengths, measured in the same run. Runs alternate between the two so that drift in
the machine's speed affects both.

    python benchmarks/gossip_transport.py --size-mb 100 --repeats 5
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
from rich.console import Console
from rich.table import Table

from thinwire.topologies.transport import (
    Delivery,
    GossipReceiver,
    GossipServicer,
    Mailbox,
    PeerClient,
    TLSIdentity,
    TransportSettings,
    create_server,
    stop_server,
    write_run_certificates,
)

MiB = 2**20


def raw_rate_probe(size: int, chunk: int) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    """A bare client-streaming endpoint: returns (push(message), stop())."""

    def count(frames: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        return sum(len(f) for f in frames).to_bytes(8, "little")

    limit = [("grpc.max_receive_message_length", chunk + 4096)]
    server = grpc.server(ThreadPoolExecutor(2), options=limit)
    handler = grpc.stream_unary_rpc_method_handler(count)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("raw.Raw", {"Push": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", chunk + 4096)]
    )
    call = channel.stream_unary("/raw.Raw/Push")

    def push(message: bytes) -> None:
        view = memoryview(message)
        frames = (bytes(view[i : i + chunk]) for i in range(0, len(message), chunk))
        received = int.from_bytes(call(frames, timeout=120), "little")
        assert received == size

    def stop() -> None:
        channel.close()
        server.stop(0).wait()

    return push, stop


def transport_probe(
    size: int, settings: TransportSettings, tls: tuple[TLSIdentity, TLSIdentity] | None
) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    """A thinwire node and a peer client: returns (push(message), stop())."""
    rounds = itertools.count()

    def check(delivery: Delivery) -> int:
        return len(delivery.payload)

    mailbox: Mailbox[int] = Mailbox(window=2)
    receiver = GossipReceiver(
        node=1,
        run_id="bench",
        neighbours=lambda r: {0},
        mailbox=mailbox,
        handler=check,
        max_message_bytes=settings.max_message_bytes,
    )
    server_tls, client_tls = tls if tls else (None, None)
    server, port = create_server(
        "127.0.0.1:0",
        GossipServicer(receiver),
        tls=server_tls,
        insecure=tls is None,
        settings=settings,
    )
    client = PeerClient(
        node=0,
        run_id="bench",
        resolve=lambda peer: f"{'localhost' if tls else '127.0.0.1'}:{port}",
        settings=settings,
        tls=client_tls,
        insecure=tls is None,
    )

    def push(message: bytes) -> None:
        r = next(rounds)
        result = client.push(r, message, {1})[1]
        if not result.ok:
            raise RuntimeError(f"push failed: {result.code.name} {result.detail}")
        assert mailbox.collect(r, {0}, timeout=0).messages == {0: size}

    def stop() -> None:
        client.close()
        stop_server(server, 0)

    return push, stop


def timed(push: Callable[[bytes], None], message: bytes) -> float:
    start = time.perf_counter()
    push(message)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0, help="message size in MB (1e6)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk-kib", type=int, default=1024)
    parser.add_argument("--no-tls", action="store_true", help="skip the mutual-TLS row")
    args = parser.parse_args()

    size = int(args.size_mb * 1e6)
    chunk = args.chunk_kib * 1024
    message = np.random.default_rng(0).bytes(size)
    settings = TransportSettings(chunk_bytes=chunk, timeout_s=120, max_message_bytes=2 * size)

    probes = {
        "raw gRPC client stream": raw_rate_probe(size, chunk),
        "thinwire transport (insecure)": transport_probe(size, settings, None),
    }
    if not args.no_tls:
        with tempfile.TemporaryDirectory() as folder:
            pki = write_run_certificates(folder, 2, run_id="bench")
            ids = [
                TLSIdentity.from_files(pki.ca, pki.peers[i].cert, pki.peers[i].key) for i in (0, 1)
            ]
        probes["thinwire transport (mutual TLS)"] = transport_probe(
            size, settings, (ids[1], ids[0])
        )

    times: dict[str, list[float]] = {name: [] for name in probes}
    try:
        for push, _ in probes.values():  # warm up connections and allocators
            push(message)
        for _ in range(args.repeats):
            for name, (push, _) in probes.items():
                times[name].append(timed(push, message))
    finally:
        for _, stop in probes.values():
            stop()

    raw_best = size / min(times["raw gRPC client stream"])
    table = Table(
        title=f"one {size / 1e6:g} MB push over loopback, {chunk // 1024} KiB chunks, "
        f"{args.repeats} runs each"
    )
    for column in ("path", "best GB/s", "median GB/s", "best / raw best"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for name, samples in times.items():
        best, median = size / min(samples), size / statistics.median(samples)
        table.add_row(name, f"{best / 1e9:.2f}", f"{median / 1e9:.2f}", f"{best / raw_best:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
