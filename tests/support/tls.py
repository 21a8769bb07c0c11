"""Throw-away TLS key material for tests: a CA, a server and a client certificate it signs, and a second CA
that nobody trusts with a client of its own. EC P-256 keys, so a whole set takes milliseconds.

`make_pki(tmp_path)` writes PEM files in Kafka's `ssl.keystore.type=PEM` layout (private key, then the
certificate chain) and returns where they are; `Pki.issue` signs more certificates (other subjects).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "key-secret"


def name(*attributes: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    """A subject from its attributes, most significant first (as encoded: `O`, then `OU`, then `CN`)."""
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


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
        path.write_text(self.key_pem(password) + self.chain_pem())
        return path


@dataclass(frozen=True)
class Authority:
    identity: Identity

    @classmethod
    def create(cls, common_name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.COMMON_NAME, common_name))
        builder = _builder(subject, subject, key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True)
        return cls(Identity(key, (builder.sign(key, hashes.SHA256()),)))

    def issue(self, subject: x509.Name, server: bool = False) -> Identity:
        """A certificate for `subject`; a server's names localhost and 127.0.0.1, a client's is for client auth."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = _builder(subject, self.identity.certificate.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        certificate = builder.sign(self.identity.key, hashes.SHA256())
        return Identity(key, (certificate, self.identity.certificate))

    def write_certificate(self, path: Path) -> Path:
        """The CA certificate alone: `ssl.truststore.location` with `ssl.truststore.type=PEM`."""
        path.write_text(self.identity.chain_pem())
        return path


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Authority
    untrusted_ca: Authority
    server: Identity  # CN=localhost, for localhost and 127.0.0.1
    client: Identity  # CN=alice,OU=ops,O=city
    untrusted_client: Identity  # CN=mallory,OU=ops,O=city, signed by the untrusted CA
    truststore: Path  # the CA's certificate
    server_keystore: Path  # unencrypted key + chain
    server_keystore_encrypted: Path  # key encrypted with KEY_PASSWORD + chain
    client_keystore: Path
    untrusted_client_keystore: Path


def make_pki(directory: Path) -> Pki:
    ca, untrusted = Authority.create("bus test CA"), Authority.create("untrusted CA")
    server = ca.issue(name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.COMMON_NAME, "localhost")), server=True)
    client = ca.issue(name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                           (NameOID.COMMON_NAME, "alice")))
    mallory = untrusted.issue(name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                                   (NameOID.COMMON_NAME, "mallory")))
    return Pki(
        directory, ca, untrusted, server, client, mallory,
        truststore=ca.write_certificate(directory / "ca.pem"),
        server_keystore=server.write_keystore(directory / "server.pem"),
        server_keystore_encrypted=server.write_keystore(directory / "server-encrypted.pem", KEY_PASSWORD),
        client_keystore=client.write_keystore(directory / "client.pem"),
        untrusted_client_keystore=mallory.write_keystore(directory / "mallory.pem"),
    )


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))
