"""PeerEndpoint: a node's server, mailbox and client working together over rounds."""

from __future__ import annotations

from functools import partial

import pytest

from thinwire.config import GossipRuntime, MatchingTopology, RingTopology, TLSFiles
from thinwire.topologies.graph import GraphSchedule
from thinwire.topologies.transport import PeerEndpoint, TransportSettings

from ..support import RUN, raw_bytes


def endpoints(schedule: GraphSchedule, addresses: dict[int, str], **kwargs) -> list[PeerEndpoint]:
    made: list[PeerEndpoint] = []
    try:
        for i in range(schedule.nodes):
            made.append(
                PeerEndpoint(
                    node=i,
                    run_id=RUN,
                    neighbours=partial(schedule.neighbours, node=i),
                    handler=raw_bytes,
                    resolve=addresses.__getitem__,
                    listen="127.0.0.1:0",
                    insecure=True,
                    **kwargs,
                )
            )
    except BaseException:
        for endpoint in made:
            endpoint.close(0)
        raise
    addresses.update({e.node: f"127.0.0.1:{e.port}" for e in made})
    return made


@pytest.fixture
def cluster():
    started: list[PeerEndpoint] = []

    def start(schedule: GraphSchedule, **kwargs) -> list[PeerEndpoint]:
        made = endpoints(schedule, {}, **kwargs)
        started.extend(made)
        return made

    try:
        yield start
    finally:
        for endpoint in started:
            endpoint.close(0)


def test_rounds_on_a_time_varying_graph(cluster):
    schedule = GraphSchedule(MatchingTopology(), 4, seed=0)
    nodes = cluster(schedule, settings=TransportSettings(timeout_s=10))
    for r in range(3):
        for node in nodes:
            results = node.push(r, f"{node.node}@{r}".encode())
            assert set(results) == schedule.neighbours(r, node=node.node)
            assert all(result.ok for result in results.values())
        for node in nodes:
            inbox = node.collect(r)
            expected = {j: f"{j}@{r}".encode() for j in schedule.neighbours(r, node=node.node)}
            assert inbox.messages == expected and not inbox.missing
    sent = sum(n.traffic.total().payload_sent for n in nodes)
    received = sum(n.traffic.total().payload_received for n in nodes)
    assert sent == received > 0


def test_a_silent_neighbour_is_reported_missing_at_the_deadline(cluster):
    schedule = GraphSchedule(RingTopology(), 3, seed=0)
    nodes = cluster(schedule, settings=TransportSettings(timeout_s=0.3))
    nodes[1].push(0, b"from 1")  # node 2 stays silent
    inbox = nodes[0].collect(0)
    assert inbox.messages == {1: b"from 1"}
    assert inbox.missing == frozenset({2})
    assert nodes[0].mailbox.counters.missing == {2: 1}


def test_from_runtime_wires_settings_security_and_addresses(certificates):
    runtime = GossipRuntime(
        run_id=RUN,
        peers=["127.0.0.1:7000", "localhost:7001"],
        listen="127.0.0.1:0",  # port 0 here; a deployment uses {port}
        deadline_s=2.5,
        chunk_bytes=4096,
        window=3,
        tls=TLSFiles(
            ca=certificates.ca, cert=certificates.peers[0].cert, key=certificates.peers[0].key
        ),
    )
    endpoint = PeerEndpoint.from_runtime(
        runtime, node=0, nodes=2, neighbours=lambda r: {1}, handler=raw_bytes
    )
    try:
        assert endpoint.port > 0
        assert endpoint.settings == TransportSettings.from_runtime(runtime)
        assert endpoint.mailbox.window == 3
        assert endpoint.receiver.run_id == RUN
    finally:
        endpoint.close(0)


def test_endpoints_need_explicit_security():
    with pytest.raises(ValueError, match="PeerEndpoint: pass exactly one of tls"):
        PeerEndpoint(
            node=0,
            run_id=RUN,
            neighbours=lambda r: (),
            handler=raw_bytes,
            resolve=str,
            listen="127.0.0.1:0",
        )
