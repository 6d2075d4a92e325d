"""Keys and certificates for a gossip run: one CA, one key and certificate per peer.

Mutual TLS binds each peer to a node id: peer i's certificate carries the common name
`node-i` (`thinwire.topologies.naming`), and a receiver refuses a push whose header claims
another sender. The subject alternative names hold what peers dial: a host name (`peer-{i}` by
default, as in the `pattern` of the gossip runtime), `localhost`, and the loopback addresses.
Keys are ECDSA P-256; private key files are written readable by their owner only.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> files = write_run_certificates(folder, 3, run_id="demo")
    >>> sorted(files.peers), files.peers[2].cert.name
    ([0, 1, 2], 'node-2.pem')
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from thinwire.topologies.naming import node_common_name

__all__ = [
    "PeerFiles",
    "RunCertificates",
    "create_ca",
    "issue_peer_certificate",
    "write_run_certificates",
]


class PeerFiles(NamedTuple):
    """PEM files of one peer."""

    cert: Path
    key: Path


class RunCertificates(NamedTuple):
    """Everything `write_run_certificates` wrote."""

    ca: Path  # the CA certificate every peer trusts
    ca_key: Path  # the CA's private key, to issue certificates for peers added later
    peers: dict[int, PeerFiles]


def _validity(valid_days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if valid_days < 1:
        raise ValueError(f"valid_days must be >= 1, got {valid_days}")
    now = datetime.datetime.now(datetime.UTC)
    # Backdated a little so peers with slightly slow clocks accept a fresh certificate.
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)


def create_ca(
    run_id: str, *, valid_days: int = 365
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new self-signed CA for one run (it may sign peer certificates only, not other CAs)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"thinwire run {run_id} CA")])
    start, end = _validity(valid_days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_peer_certificate(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    node: int,
    *,
    hosts: Sequence[str] = ("localhost",),
    addresses: Sequence[str] = ("127.0.0.1", "::1"),
    valid_days: int = 365,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and certificate for `node`, signed by the run's CA.

    The certificate serves both directions of a gossip link (server and client
    authentication). Its common name is `node_common_name(node)`; `hosts` (DNS names) and
    `addresses` (IP literals) become its subject alternative names.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(valid_days)
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in dict.fromkeys(hosts)]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys(addresses)]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_common_name(node))]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _write(path: Path, data: bytes, *, private: bool) -> Path:
    mode = 0o600 if private else 0o644
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_run_certificates(
    folder: str | Path,
    nodes: int,
    *,
    run_id: str,
    hostname: str = "peer-{i}",
    addresses: Sequence[str] = ("127.0.0.1", "::1"),
    valid_days: int = 365,
) -> RunCertificates:
    """Creates a CA and a certificate per node, as PEM files in `folder`.

    Writes `ca.pem`, `ca.key`, and `node-<i>.pem` / `node-<i>.key` for i in 0..nodes-1.

    Args:
        folder: where to write (created if missing).
        nodes: number of peers.
        run_id: names the run in the CA's common name.
        hostname: each peer's DNS name; `{i}` becomes its node id.
        addresses: IP literals every peer certificate also names.
        valid_days: lifetime of every certificate.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = create_ca(run_id, valid_days=valid_days)
    pem = serialization.Encoding.PEM
    ca = _write(target / "ca.pem", ca_cert.public_bytes(pem), private=False)
    ca_key_path = _write(target / "ca.key", _key_pem(ca_key), private=True)
    peers = {}
    for node in range(nodes):
        hosts = (hostname.format(i=node), "localhost")
        key, cert = issue_peer_certificate(
            ca_key, ca_cert, node, hosts=hosts, addresses=addresses, valid_days=valid_days
        )
        stem = node_common_name(node)
        peers[node] = PeerFiles(
            cert=_write(target / f"{stem}.pem", cert.public_bytes(pem), private=False),
            key=_write(target / f"{stem}.key", _key_pem(key), private=True),
        )
    return RunCertificates(ca=ca, ca_key=ca_key_path, peers=peers)
