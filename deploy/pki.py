"""A local certificate authority for a secured bus: the CA, and a key and certificate for each node or client it
signs, written in Kafka's PEM layout (`ssl.keystore.type=PEM`: the private key, then the certificate chain;
`ssl.truststore.type=PEM`: the CA's certificate). EC P-256 keys, so a whole cluster's set takes milliseconds.

`python -m deploy.cluster --secure` makes one per cluster, so TLS between the nodes and to the clients works out
of the box on one machine; an operations centre replaces it with certificates from its own CA by pointing the
`ssl.*` keys elsewhere. Key files are written readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 365
PRIVATE = 0o600


def name(*attributes: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    """A subject from its attributes, most significant first (as encoded: `O`, then `OU`, then `CN`)."""
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


def write_private(path: Path, text: str) -> Path:
    """`text` into `path`, created readable by its owner only (never world-readable, not even for a moment)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    path.chmod(PRIVATE)
    return path


@dataclass(frozen=True)
class Identity:
    """A private key and its certificate chain (the leaf first, its CA after it)."""

    key: ec.EllipticCurvePrivateKey
    chain: tuple[x509.Certificate, ...]

    @property
    def certificate(self) -> x509.Certificate:
        return self.chain[0]

    def key_pem(self, password: str | None = None) -> str:
        """PKCS#8 PEM, encrypted with `password` if given (`ENCRYPTED PRIVATE KEY`, as Kafka expects)."""
        encryption = serialization.BestAvailableEncryption(password.encode()) if password else \
            serialization.NoEncryption()
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      encryption).decode()

    def chain_pem(self) -> str:
        return "".join(cert.public_bytes(serialization.Encoding.PEM).decode() for cert in self.chain)

    def der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    def write_keystore(self, path: Path, password: str | None = None) -> Path:
        """One PEM file, the key then the chain: `ssl.keystore.location` with `ssl.keystore.type=PEM`."""
        return write_private(path, self.key_pem(password) + self.chain_pem())


@dataclass(frozen=True)
class Authority:
    identity: Identity

    @classmethod
    def create(cls, common_name: str, days: int = DEFAULT_DAYS) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.COMMON_NAME, common_name))
        builder = _builder(subject, subject, key.public_key(), days).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True)
        return cls(Identity(key, (builder.sign(key, hashes.SHA256()),)))

    @classmethod
    def load(cls, keystore: Path) -> Authority:
        """The CA `write_keystore` saved (to sign a node added to the cluster later)."""
        data = keystore.read_bytes()
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{keystore}: not an EC private key")
        return cls(Identity(key, tuple(x509.load_pem_x509_certificates(data))))

    def issue(self, subject: x509.Name, server: bool = False, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              days: int = DEFAULT_DAYS) -> Identity:
        """A certificate for `subject`: a server's names `hosts` (DNS names or IP addresses) and serves client
        authentication too (a node presents it when it dials the other nodes); a client's is for client auth."""
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else \
            [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = _builder(subject, self.identity.certificate.subject, key.public_key(), days).add_extension(
            x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
                                            critical=False)
        certificate = builder.sign(self.identity.key, hashes.SHA256())
        return Identity(key, (certificate, self.identity.certificate))

    def write_certificate(self, path: Path) -> Path:
        """The CA certificate alone: `ssl.truststore.location` with `ssl.truststore.type=PEM`."""
        path.write_text(self.identity.chain_pem())
        return path


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))
