"""The topology and gossip runtime sections of the experiment schema."""

from __future__ import annotations

import pytest

from thinwire.config import (
    ConfigError,
    ErdosRenyiTopology,
    GossipRuntime,
    MatchingTopology,
    MaxDegreeWeights,
    StarTopology,
    TorusTopology,
    parse_config,
)


def parse(**sections):
    return parse_config({"name": "t", **sections})


def problems(**sections) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**sections)
    return str(info.value)


def test_topology_kinds_parse_with_their_fields():
    config = parse(topology={"kind": "erdos_renyi", "p": 0.3, "mixing": {"kind": "max_degree"}})
    assert config.topology == ErdosRenyiTopology(p=0.3, mixing=MaxDegreeWeights())
    assert parse(topology={"kind": "torus", "rows": 3, "cols": 4}).topology == TorusTopology(
        rows=3, cols=4
    )
    assert parse().topology == StarTopology()
    assert isinstance(parse(topology={"kind": "matching"}).topology, MatchingTopology)


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"kind": "hypercube"}, "unknown topology kind 'hypercube'"),
        ({"kind": "erdos_renyi"}, "topology.p: required field is missing"),
        ({"kind": "erdos_renyi", "p": 0}, "topology.p: must be in (0, 1]"),
        ({"kind": "torus", "rows": 4}, "set both torus rows and cols, or neither"),
        ({"kind": "torus", "rows": 2, "cols": 4}, "topology.rows"),
        ({"kind": "small_world", "k": 3}, "small_world k must be even"),
        ({"kind": "regular", "degree": 0}, "topology.degree"),
        ({"kind": "ring", "degree": 3}, "topology.degree: unknown key"),
        (
            {"kind": "matching", "mixing": {"kind": "file", "path": "w.csv"}},
            "a mixing matrix file needs a fixed graph",
        ),
        (
            {
                "kind": "regular",
                "degree": 3,
                "time_varying": True,
                "mixing": {"kind": "file", "path": "w"},
            },
            "a mixing matrix file needs a fixed graph",
        ),
        ({"kind": "ring", "mixing": {"kind": "sinkhorn"}}, "unknown mixing kind 'sinkhorn'"),
    ],
)
def test_bad_topologies_name_the_field(topology, message):
    assert message in problems(topology=topology)


def test_gossip_runtime_parses():
    config = parse(
        runtime={
            "kind": "gossip",
            "run_id": "exp-1",
            "peers": ["127.0.0.1:7000", "127.0.0.1:7001"],
            "tls": {"ca": "pki/ca.pem", "cert": "pki/node-0.pem", "key": "pki/node-0.key"},
            "deadline_s": 5,
        }
    )
    runtime = config.runtime
    assert isinstance(runtime, GossipRuntime)
    assert runtime.tls is not None and runtime.tls.mutual
    assert (runtime.window, runtime.chunk_bytes, runtime.deadline_s) == (2, 2**20, 5.0)


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ({"pattern": "p-{i}:1"}, "set exactly one of runtime.tls and runtime.insecure: true"),
        (
            {"pattern": "p-{i}:1", "insecure": True, "tls": {"ca": "a", "cert": "b", "key": "c"}},
            "set exactly one of runtime.tls and runtime.insecure",
        ),
        ({"insecure": True}, "set exactly one of runtime.peers and runtime.pattern"),
        ({"insecure": True, "peers": ["a:1"]}, "gossip needs 2+"),
        ({"insecure": True, "peers": ["a:1", "b"]}, "runtime.peers[1]: 'b' is not host:port"),
        ({"insecure": True, "pattern": "peer:1"}, "must contain {i}"),
        ({"insecure": True, "pattern": "p-{i}:1", "listen": "nowhere"}, "runtime.listen"),
        ({"insecure": True, "pattern": "p-{i}:1", "retries": 5}, "runtime.retries"),
        (
            {
                "insecure": True,
                "pattern": "p-{i}:1",
                "chunk_bytes": 4096,
                "max_message_bytes": 2048,
            },
            "chunk_bytes must not exceed",
        ),
    ],
)
def test_bad_gossip_runtimes_name_the_problem(runtime, message):
    assert message in problems(runtime={"kind": "gossip", "run_id": "r", **runtime})


def test_run_id_is_required():
    assert "runtime.run_id: required field is missing" in problems(
        runtime={"kind": "gossip", "pattern": "p-{i}:1", "insecure": True}
    )
