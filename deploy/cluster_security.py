"""What `python -m deploy.cluster --secure` secures a cluster with: TLS and SASL on every listener, ACLs enforced.

- Clients and brokers meet on a `SASL_SSL` listener with SCRAM-SHA-512 (`inter.broker.listener.name=SASL_SSL`):
  replica fetches and transaction markers log in as the user `broker`, whose SCRAM credential is in the
  metadata from the first start (written by `bus storage format --add-scram` before it).
- The KRaft quorum, broker registration, heartbeats and forwarding run on the `CONTROLLER` listener, also
  `SASL_SSL`, with PLAIN: SCRAM credentials live in the metadata log, which the quorum must have formed to serve,
  so the controller listener cannot check them, as in Kafka, whose own setups use PLAIN (or mutual TLS) there.
  The login is TLS-encrypted; only `broker` can log in there.
- The StandardAuthorizer with `super.users=User:broker;User:admin` and no access without an ACL: an
  unauthenticated process can neither join nor fence a broker, and every other user needs ACLs (`bus acls`).
- A local CA (`deploy.pki`) signs each node's certificate (for its host, localhost and 127.0.0.1); the nodes check
  each other's host names, as Kafka's `ssl.endpoint.identification.algorithm=https` does.

Everything lives in `<data-dir>/security/`: `ca.pem` (the trust store), `ca-key.pem`, `passwords.json`,
`node-<id>.pem` (key stores) and `client.properties` (the `admin` user's Kafka client properties), each secret
file readable by its owner only. Passwords are random, made on the first start, and never on a command line or
in a log: a node reads its `server.properties` (also owner-only), and the tools take `--command-config`.
"""

from __future__ import annotations

import argparse
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.x509.oid import NameOID

from bus.config.broker import STANDARD_AUTHORIZER
from bus.tools import storage_cmd
from deploy.pki import Authority, write_private
from deploy.pki import name as name_of

SECURITY_DIR = "security"
LISTENER = "SASL_SSL"
CONTROLLER = "CONTROLLER"
MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"
ADMIN_USER = "admin"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def is_secured(data_dir: Path) -> bool:
    """Whether the cluster in `data_dir` was made with `--secure` (it then always starts secured)."""
    return (data_dir / SECURITY_DIR / "passwords.json").exists()


@dataclass(frozen=True)
class ClusterSecurity:
    directory: Path
    ca: Authority
    passwords: dict[str, str]
    ca_directory: Path
    """Where the CA's ``ca.pem`` (the trust store) and key live: ``directory`` itself, or the site whose CA this
    cluster shares (`make up`'s DR site: one CA, so one trust store for clients of both sites)."""

    @classmethod
    def ensure(cls, directory: Path, ca_directory: Path | None = None) -> ClusterSecurity:
        """The cluster's CA and passwords in `directory` (`python -m deploy.cluster`: `<data-dir>/security`, `make
        up`: `DATA/secrets`), made on the first start and read back ever after. With `ca_directory` (one made by
        an earlier call) the CA is that one's, and only the passwords are this cluster's own."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        passwords_path = directory / "passwords.json"
        if ca_directory is None:
            ca_directory, ca_key = directory, directory / "ca-key.pem"
            if not ca_key.exists():
                ca = Authority.create("bus cluster CA")
                ca.identity.write_keystore(ca_key)
                ca.write_certificate(directory / "ca.pem")
                passwords_path.unlink(missing_ok=True)  # new CA, new cluster: new passwords
        authority = Authority.load(ca_directory / "ca-key.pem")
        if not passwords_path.exists():
            write_private(passwords_path, json.dumps({user: secrets.token_urlsafe(24)
                                                      for user in (BROKER_USER, ADMIN_USER)}))
        return cls(directory, authority, json.loads(passwords_path.read_text()), ca_directory)

    @property
    def truststore(self) -> Path:
        return self.ca_directory / "ca.pem"

    def keystore(self, node_id: int, host: str) -> Path:
        """Node `node_id`'s key and certificate chain (made on its first start)."""
        path = self.directory / f"node-{node_id}.pem"
        if not path.exists():
            subject = name_of((NameOID.ORGANIZATION_NAME, "city"), (NameOID.COMMON_NAME, f"bus-node-{node_id}"))
            self.ca.issue(subject, server=True, hosts=tuple(dict.fromkeys((host, "localhost", "127.0.0.1")))) \
                .write_keystore(path)
        return path

    def server_certificate(self, name: str, host: str) -> tuple[Path, Path]:
        """A server's certificate chain and key (`<name>.pem`, `<name>-key.pem`, the key owner-only) for `host`,
        localhost and 127.0.0.1, signed by the CA and made once (`make up`: the console's HTTPS)."""
        chain, key = self.directory / f"{name}.pem", self.directory / f"{name}-key.pem"
        if not (chain.exists() and key.exists()):
            subject = name_of((NameOID.ORGANIZATION_NAME, "city"), (NameOID.COMMON_NAME, name))
            identity = self.ca.issue(subject, server=True, hosts=tuple(dict.fromkeys((host, "localhost", "127.0.0.1"))))
            write_private(key, identity.key_pem())
            chain.write_text(identity.chain_pem())
        return chain, key

    def server_properties(self, node_id: int, host: str) -> dict[str, str]:
        """The security keys of node `node_id`'s server.properties (its listeners are set by the caller)."""
        broker = self.passwords[BROKER_USER]
        return {
            "listener.security.protocol.map": f"{LISTENER}:SASL_SSL,{CONTROLLER}:SASL_SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore(node_id, host)),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore),
            f"listener.name.{LISTENER.lower()}.sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
                f'{_SCRAM_LOGIN} required username="{BROKER_USER}" password="{broker}";',
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.{CONTROLLER.lower()}.sasl.enabled.mechanisms": "PLAIN",
            f"listener.name.{CONTROLLER.lower()}.plain.sasl.jaas.config":
                f'{_PLAIN_LOGIN} required username="{BROKER_USER}" password="{broker}" user_{BROKER_USER}="{broker}";',
            "sasl.mechanism.controller.protocol": "PLAIN",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def write_server_properties(self, path: Path, properties: dict[str, str]) -> Path:
        return write_private(path, "".join(f"{key}={value}\n" for key, value in properties.items()))

    def format_storage(self, properties: Path, cluster_id: str) -> None:
        """`bus storage format --add-scram` for the broker and admin users, run in this process (the passwords
        would be on a command line otherwise); a node formatted before is left as it is."""
        users = [f"{MECHANISM}=[name={user},password={self.passwords[user]}]" for user in (BROKER_USER, ADMIN_USER)]
        args = argparse.Namespace(action="format", config=str(properties), cluster_id=cluster_id, add_scram=users,
                                  ignore_formatted=True)
        if storage_cmd.run(args) != 0:
            raise RuntimeError(f"bus storage format failed for {properties}")

    def client_properties(self) -> dict[str, str]:
        """Kafka client properties for the `admin` user (Java clients and the bus tools' `--command-config`)."""
        return {
            "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": f'{_SCRAM_LOGIN} required username="{ADMIN_USER}" '
                                f'password="{self.passwords[ADMIN_USER]}";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore),
        }

    def write_client_properties(self) -> Path:
        path = self.directory / "client.properties"
        return write_private(path, "".join(f"{key}={value}\n" for key, value in self.client_properties().items()))

    def describe_client_properties(self) -> str:
        """The client properties as printed for the operator: the password stays in the file."""
        shown = dict(self.client_properties())
        shown["sasl.jaas.config"] = f'{_SCRAM_LOGIN} required username="{ADMIN_USER}" password="<in the file>";'
        lines = "".join(f"    {key}={value}\n" for key, value in shown.items())
        return (f"  client properties (user {ADMIN_USER}, a super user; readable by you only): "
                f"{self.directory / 'client.properties'}\n{lines}"
                f"  librdkafka: security.protocol=SASL_SSL sasl.mechanism={MECHANISM} sasl.username={ADMIN_USER} "
                f"sasl.password=<from the file> ssl.ca.location={self.truststore}")
