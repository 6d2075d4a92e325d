"""TLS for the peer service: credentials from PEM files, and who is on the other end.

A node runs either with a `TLSIdentity` (the run's CA, its own certificate and key) or, only
when asked explicitly, insecure. With `mutual=True` (the default) the server demands a client
certificate signed by the run's CA, and the receiver binds the certificate's common name to
the sender id a push claims.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from thinwire.config import TLSFiles

__all__ = ["TLSIdentity", "peer_common_name", "require_security"]


@dataclass(frozen=True, slots=True)
class TLSIdentity:
    """One node's TLS material, as PEM bytes."""

    ca: bytes = field(repr=False)  # the run's CA certificate
    cert: bytes = field(repr=False)  # this node's certificate
    key: bytes = field(repr=False)  # this node's private key
    mutual: bool = True  # demand and check client certificates

    def __post_init__(self) -> None:
        for name in ("ca", "cert", "key"):
            if b"-----BEGIN " not in getattr(self, name):
                raise ValueError(f"TLS {name} is not PEM data (no '-----BEGIN' line)")
        if not self.mutual:
            warnings.warn(
                "TLS without client certificates: any host that can reach a peer may push as "
                "any node; set tls.mutual: true outside trusted networks",
                stacklevel=3,
            )

    @classmethod
    def from_files(
        cls, ca: str | Path, cert: str | Path, key: str | Path, *, mutual: bool = True
    ) -> TLSIdentity:
        """Reads the three PEM files.

        Raises:
            ValueError: naming a file that cannot be read or holds no PEM data.
        """
        data = {}
        for name, path in (("ca", ca), ("cert", cert), ("key", key)):
            try:
                data[name] = Path(path).read_bytes()
            except OSError as exc:
                raise ValueError(f"TLS {name} file {path}: {exc.strerror or exc}") from None
        return cls(mutual=mutual, **data)

    @classmethod
    def from_config(cls, files: TLSFiles) -> TLSIdentity:
        """Reads the files that a gossip runtime's `tls:` section names."""
        return cls.from_files(files.ca, files.cert, files.key, mutual=files.mutual)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server side: present this node's certificate; with `mutual`, demand the client's."""
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=self.mutual
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: trust only the run's CA, and present this node's certificate."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def require_security(tls: TLSIdentity | None, insecure: bool, where: str) -> None:
    """Insists that exactly one of `tls` and `insecure=True` is given.

    Raises:
        ValueError: naming `where` and the two ways to call it.
    """
    if (tls is None) == (not insecure):
        raise ValueError(
            f"{where}: pass exactly one of tls=TLSIdentity(...) and insecure=True "
            f"(got tls={'set' if tls else 'None'}, insecure={insecure})"
        )


def peer_common_name(context: grpc.ServicerContext) -> str | None:
    """The common name of the client certificate the caller authenticated with, if any."""
    names = context.auth_context().get("x509_common_name")
    return names[0].decode("utf-8", "replace") if names else None
