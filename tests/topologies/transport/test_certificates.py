"""Run certificates: one CA, one certificate per node, names that bind identities."""

from __future__ import annotations

import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from thinwire.topologies.transport import write_run_certificates


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_files_for_every_node(certificates):
    assert sorted(certificates.peers) == [0, 1, 2, 3]
    assert certificates.ca.name == "ca.pem"
    for node, files in certificates.peers.items():
        assert files.cert.name == f"node-{node}.pem" and files.key.name == f"node-{node}.key"
        assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(certificates.ca_key.stat().st_mode) == 0o600


def test_peer_certificates_name_their_node_and_hosts(certificates):
    ca = load(certificates.ca)
    cert = load(certificates.peers[3].cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node-3"
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["peer-3", "localhost"]
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_host_name_pattern_is_configurable(tmp_path):
    files = write_run_certificates(tmp_path, 2, run_id="r", hostname="gpu-{i}.lab")
    names = load(files.peers[1].cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "gpu-1.lab" in names.value.get_values_for_type(x509.DNSName)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="nodes must be >= 1"):
        write_run_certificates(tmp_path, 0, run_id="r")
    with pytest.raises(ValueError, match="valid_days must be >= 1"):
        write_run_certificates(tmp_path, 1, run_id="r", valid_days=0)
