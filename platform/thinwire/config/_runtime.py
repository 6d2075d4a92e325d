"""The `channel` section (the simulated network) and the `runtime` section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from thinwire.config._base import NonNegativeFloat, PositiveFloat, PositiveInt, Section
from thinwire.registry import RUNTIMES, Kinded


class ChannelConfig(Section):
    """The simulated network: per-client link speeds (one value for all, or one per client)."""

    uplink_mbps: PositiveFloat | list[PositiveFloat] = 20.0
    """Client-to-server (or peer push) link speed in Mbit/s: one value, or one per client."""
    downlink_mbps: PositiveFloat | list[PositiveFloat] = 100.0
    """Server-to-client link speed in Mbit/s: one value, or one per client."""
    latency_ms: NonNegativeFloat | list[NonNegativeFloat] = 10.0
    """One-way latency per message in ms: one value, or one per client."""
    slots: PositiveInt | None = None
    """Random-access uplink: slots per round (slotted ALOHA); None: every sender gets a link."""
    slot_ms: PositiveFloat = 10.0
    """Duration of one random-access slot."""


@RUNTIMES.declare
class SimulationRuntime(Section):
    """Every role in one process."""

    kind: Literal["simulation"] = "simulation"
    checkpoint_every: Annotated[int, Field(ge=0)] = 0
    """Save the whole run's state every this many rounds, for `thinwire run --resume`; 0 never."""


_ADDRESS = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def _address(text: str, *, port_zero: bool = False) -> str:
    match = _ADDRESS.fullmatch(text)
    low = 0 if port_zero else 1
    if not match or not low <= int(match.group(1)) <= 65535:
        raise ValueError(f"{text!r} is not host:port (port {low}..65535; IPv6 hosts in [ ])")
    return text


def _peer_address(text: str) -> str:
    return _address(text)


def _peer_pattern(text: str) -> str:
    if "{i}" not in text:
        raise ValueError(f"pattern {text!r} must contain {{i}}, the node id")
    _address(text.replace("{i}", "0"))
    return text


def _listen_address(text: str) -> str:
    _address(text.replace("{port}", "1").replace("{i}", "0"), port_zero=True)
    return text


class TLSFiles(Section):
    """PEM files of one node: the run's CA, this node's certificate and its private key."""

    ca: Path
    """PEM file of the run's certificate authority."""
    cert: Path
    """PEM file of this node's certificate."""
    key: Path
    """PEM file of this node's private key."""
    mutual: bool = True
    """Require a client certificate from every pusher and bind it to the claimed node id."""


@RUNTIMES.declare
class GossipRuntime(Section):
    """One `thinwire peer` process per graph node, each serving the gRPC `Gossip` service.

    Peers are listed (`peers`, one host:port per node) or generated (`pattern`, such as
    `peer-{i}:50051`). Exactly one of `tls` and `insecure: true` must be set, so a run is
    never unencrypted by accident.
    """

    kind: Literal["gossip"] = "gossip"
    run_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    """Names the run; nodes accept pushes only from their own run."""
    peers: list[Annotated[str, AfterValidator(_peer_address)]] | None = None
    """host:port of every node, in node order."""
    pattern: Annotated[str, AfterValidator(_peer_pattern)] | None = None
    """host:port with {i} for the node id, e.g. peer-{i}:50051."""
    listen: Annotated[str, AfterValidator(_listen_address)] = "[::]:{port}"
    """Where a node serves; {port} is the port of its own peer address, {i} its id."""
    deadline_s: PositiveFloat = 30.0
    """How long a node waits for its neighbours each round; also each push's deadline."""
    chunk_bytes: Annotated[int, Field(ge=1024, le=64 * 2**20)] = 2**20
    """Stream chunk size of a push, in bytes."""
    max_message_bytes: Annotated[int, Field(ge=1024, le=2**40)] | None = None
    """Largest encoded update a node accepts, in bytes; None derives it from the model (twice
    the most any honest encoding of its tensors can take)."""
    frame_timeout_s: PositiveFloat | None = None
    """Longest a push may leave a node waiting for its next frame; None: deadline_s / 2. A
    whole push may take at most deadline_s."""
    max_streams: Annotated[int, Field(ge=4, le=4096)] = 64
    """Push streams a node serves at once (its worker threads); more are refused at once."""
    max_streams_per_host: Annotated[int, Field(ge=1, le=4096)] = 32
    """Push streams a node serves at once from one remote address."""
    window: Annotated[int, Field(ge=1, le=1000)] = 2
    """Rounds a node buffers: pushes for [current, current + window) are kept."""
    retries: Annotated[int, Field(ge=0, le=4)] = 3
    """Extra attempts of a push that failed with UNAVAILABLE (gRPC allows at most 4)."""
    backoff_s: PositiveFloat = 0.2
    """First retry's backoff bound; it doubles with every further attempt."""
    keepalive_s: PositiveFloat = 60.0
    """Interval of HTTP/2 keepalive pings on an open connection."""
    tls: TLSFiles | None = None
    insecure: bool = False
    """Plain gRPC without TLS (loopback or a private network only)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> GossipRuntime:
        if (self.peers is None) == (self.pattern is None):
            raise ValueError("set exactly one of runtime.peers and runtime.pattern")
        if self.peers is not None and len(self.peers) < 2:
            raise ValueError(f"runtime.peers lists {len(self.peers)} address; gossip needs 2+")
        if (self.tls is None) == (not self.insecure):
            raise ValueError("set exactly one of runtime.tls and runtime.insecure: true")
        if self.max_message_bytes is not None and self.chunk_bytes > self.max_message_bytes:
            raise ValueError("runtime.chunk_bytes must not exceed runtime.max_message_bytes")
        return self


@RUNTIMES.declare
class FlowerRuntime(Section):
    """The star on Flower's deployment engine: one SuperLink, one SuperNode per client.

    `thinwire server` submits the run to `superlink`; each client host runs
    `thinwire client --superlink HOST:PORT --partition i`. The ServerApp drives the rounds:
    a round ends when every participant has answered or `round_timeout_s` has passed, and
    needs `min_replies` answers by then, or the run stops (after a checkpoint).
    """

    kind: Literal["flower"] = "flower"
    superlink: Annotated[str, AfterValidator(_peer_address)] = "127.0.0.1:8000"
    """The SuperLink's HTTP API (Fleet and Control on one port), where runs are submitted."""
    insecure: bool = False
    """Plain HTTP to the SuperLink (loopback, a private compose network); TLS otherwise."""
    root_certificates: Path | None = None
    """PEM bundle of the CA that signed the SuperLink's certificate; None trusts the system's."""
    min_replies: PositiveInt = 1
    """Replies (with or without an update) a round needs by its deadline."""
    round_timeout_s: PositiveFloat = 600.0
    """How long a round waits for its participants; a missing reply is a dropout."""
    first_round_timeout_s: PositiveFloat | None = None
    """The deadline of the first round a server runs (a fresh start or a resume), in which
    every ClientApp process starts cold (imports, data, the first optimizer step); None
    gives it twice `round_timeout_s`."""
    connect_timeout_s: PositiveFloat = 300.0
    """How long the server waits for every partition's SuperNode before the first round."""
    poll_interval_s: Annotated[float, Field(gt=0.0, le=10.0)] = 0.1
    """Pause between the server's pulls of replies from the SuperLink."""
    checkpoint_every: Annotated[int, Field(ge=0)] = 0
    """Write the server state every this many rounds (and after the last); 0 never."""
    client_eval: bool = False
    """Also evaluate the global model on each client's own data (one more message a round)."""

    @model_validator(mode="after")
    def _one_trust(self) -> FlowerRuntime:
        if self.insecure and self.root_certificates is not None:
            raise ValueError("runtime.root_certificates applies only without insecure: true")
        return self


@RUNTIMES.declare
class DDPRuntime(Section):
    """The star's clients as ranks of a torch.distributed job (`thinwire ddp`).

    Rank r is client r (`data.clients` ranks); every rank keeps the global model and
    averages the ranks' updates after exchanging them by collectives. `thinwire ddp
    exp.yaml --nproc N` starts the ranks on one machine; across machines, `torchrun` starts
    them (README). A rank that dies or stops answering ends the run: the others fail their
    next collective, at the latest after `timeout_s`.
    """

    kind: Literal["ddp"] = "ddp"
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Collective backend; auto: NCCL when the run trains on CUDA, gloo otherwise."""
    address: Annotated[str, Field(min_length=1, max_length=253)] = "127.0.0.1"
    """Where `--nproc` ranks meet (rank 0 listens on a free port there)."""
    timeout_s: PositiveFloat = 120.0
    """Process-group timeout: how long a rank waits in a collective for a silent peer."""


Runtime = Annotated[Kinded, RUNTIMES]
"""Any registered runtime (each registers how `thinwire run` starts it, where it lives)."""
