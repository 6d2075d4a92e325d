"""TLS on the peer service: mutual authentication binds certificates to node ids."""

from __future__ import annotations

import grpc
import pytest

from thinwire.topologies.transport import PeerClient, TLSIdentity

from ..support import FAST, RUN, identity

Code = grpc.StatusCode


def tls_client(node: int, tls: TLSIdentity, address: str) -> PeerClient:
    return PeerClient(
        node=node, run_id=RUN, resolve={1: address}.__getitem__, settings=FAST, tls=tls
    )


@pytest.fixture
def tls_node(start_node, certificates):
    return start_node(1, neighbours={0, 2}, tls=identity(certificates, 1))


def test_mutual_tls_push_is_delivered(tls_node, certificates):
    with tls_client(0, identity(certificates, 0), tls_node.address) as sender:
        result = sender.push(0, b"secret update", {1})[1]
    assert result.ok and result.outcome == "DELIVERED"
    assert tls_node.mailbox.collect(0, {0}, timeout=5).messages == {0: b"secret update"}


def test_a_certificate_from_another_ca_is_refused(tls_node, certificates, foreign_certificates):
    # Trusts the run's CA (so it accepts the server) but presents another run's certificate.
    impostor = identity(foreign_certificates, 0, ca=certificates.ca)
    with tls_client(0, impostor, tls_node.address) as sender:
        result = sender.push(0, b"x", {1})[1]
    assert result.code is Code.UNAVAILABLE
    assert tls_node.mailbox.collect(0, set(), timeout=0).messages == {}


def test_a_peer_cannot_push_as_another_node(tls_node, certificates):
    # Node 2's certificate, claiming to be node 0 (a neighbour) in the header.
    with tls_client(0, identity(certificates, 2), tls_node.address) as sender:
        result = sender.push(0, b"forged", {1})[1]
    assert result.code is Code.PERMISSION_DENIED
    assert "certificate names 'node-2'; it cannot push as node 0" in result.detail
    with tls_client(2, identity(certificates, 2), tls_node.address) as sender:
        assert sender.push(0, b"honest", {1})[1].outcome == "DELIVERED"


def test_plaintext_clients_cannot_reach_a_tls_node(tls_node):
    with PeerClient(
        node=0, run_id=RUN, resolve={1: tls_node.address}.__getitem__, settings=FAST, insecure=True
    ) as sender:
        assert sender.push(0, b"x", {1})[1].code is Code.UNAVAILABLE


def test_server_only_tls_warns_and_does_not_bind_identities(start_node, certificates):
    files = certificates.peers[1]
    with pytest.warns(UserWarning, match="TLS without client certificates"):
        server_tls = TLSIdentity.from_files(certificates.ca, files.cert, files.key, mutual=False)
    node = start_node(1, neighbours={0}, tls=server_tls)
    with tls_client(0, identity(certificates, 0), node.address) as sender:
        assert sender.push(0, b"x", {1})[1].ok


def test_tls_identity_validates_its_files(tmp_path, certificates):
    with pytest.raises(ValueError, match="TLS key file .*absent.key"):
        TLSIdentity.from_files(certificates.ca, certificates.peers[0].cert, tmp_path / "absent.key")
    not_pem = tmp_path / "cert.der"
    not_pem.write_bytes(b"\x30\x82")
    with pytest.raises(ValueError, match="TLS cert is not PEM data"):
        TLSIdentity.from_files(certificates.ca, not_pem, certificates.peers[0].key)
    assert "BEGIN" not in repr(identity(certificates, 0))
