"""Throw-away TLS key material for tests: a CA, a server and a client certificate it signs, and a second CA
that nobody trusts with a client of its own. EC P-256 keys, so a whole set takes milliseconds.

`make_pki(tmp_path)` writes PEM files in Kafka's `ssl.keystore.type=PEM` layout (private key, then the
certificate chain) and returns where they are; `Pki.ca.issue` signs more certificates (other subjects). The
authority is the one `python -m deploy.cluster --secure` makes (`deploy.pki`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.x509.oid import NameOID

from deploy.pki import Authority, Identity, name

KEY_PASSWORD = "key-secret"


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
