"""A broker process with every security protocol on its listeners, for tests of clients and tools against it.

Listeners: PLAINTEXT (setup), SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL with `ssl.client.auth=required`
(alice's certificate maps to User:ops-alice), SASL_PLAINTEXT with a short `connections.max.reauth.ms` (KIP-368), and
the PLAINTEXT controller listener; the StandardAuthorizer with the logins below as super users. The SCRAM users are
made by `bus storage format --add-scram` before the first start, as an operator makes them; PLAIN's come from the
listener's JAAS line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bus.config.broker import STANDARD_AUTHORIZER
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess
from testkit.tls import Pki, make_pki

CLUSTER_ID = "Xy0fGzZxQWqJdWQ2hLq6sA"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
             "mallory": "mallory-secret"}
"""bob has no credentials at start: a test makes his with AlterUserScramCredentials."""
SCRAM_USERS = ("SCRAM-SHA-256=[name=admin,password=admin-secret]",
               "SCRAM-SHA-512=[name=alice,iterations=8192,password=alice-secret]")
PLAIN_USERS = ("carol", "mallory")  # mallory logs in but is no super user
SUPER_USERS = ("User:ANONYMOUS", "User:admin", "User:alice", "User:bob", "User:carol", "User:ops-alice")
SECURED = ("SASL_SSL", "SSL", "SASL_PLAINTEXT")
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass
class SecureBroker:
    broker: BrokerProcess
    pki: Pki
    ports: dict[str, int]  # listener name -> port
    metrics_port: int

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, listener: str, mechanism: str | None = None, user: str | None = None,
                      password: str | None = None) -> dict[str, str]:
        """Kafka (Java) client settings for `listener`: the CA as trust store, SASL as `user` (with the password
        PASSWORDS gives unless `password`), or alice's certificate on the SSL listener."""
        conf = {"bootstrap.servers": self.address(listener), "security.protocol": listener}
        if listener.endswith("SSL"):
            conf |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.truststore)}
        if listener == "SSL":
            conf |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.pki.client_keystore)}
        if mechanism is not None and user is not None:
            module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
            secret = PASSWORDS.get(user, "") if password is None else password
            conf |= {"sasl.mechanism": mechanism,
                     "sasl.jaas.config": f'org.apache.kafka.common.security.{module} required username="{user}" '
                                         f'password="{secret}";'}
        return conf

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a Prometheus sample over the series matching `labels`."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
            if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
                total += float(match.group(2))
        return total


def _overrides(pki: Pki, reauth_ms: int, metrics_port: int, failure_delay_ms: int,
               handshake_timeout_ms: int) -> dict[str, str]:
    plain_jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + \
        " ".join(f'user_{user}="{PASSWORDS[user]}"' for user in PLAIN_USERS) + ";"
    overrides = {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=ops,O=city$/ops-$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(reauth_ms),
        "connection.failed.authentication.delay.ms": str(failure_delay_ms),
        "bus.ssl.handshake.timeout.ms": str(handshake_timeout_ms),
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": ";".join(SUPER_USERS),
        "bus.metrics.listener": f"127.0.0.1:{metrics_port}",
        "cluster.id": CLUSTER_ID,
    }
    for listener in ("sasl_ssl", "sasl_plaintext"):
        overrides[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain_jaas
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            overrides[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = SCRAM_JAAS
    return overrides


def format_storage(broker: BrokerProcess, *scram: str) -> None:
    """`bus storage format` on the broker's config with `--add-scram` for each of `scram`, as an operator runs
    kafka-storage format before the first start."""
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    config = broker.data_dir.parent / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in broker.overrides.items()))
    arguments = [item for user in scram for item in ("--add-scram", user)]
    subprocess.run([sys.executable, "-m", "bus", "storage", "format", "--config", str(config), "--cluster-id",
                    broker.overrides["cluster.id"], *arguments], cwd=ROOT, check=True, capture_output=True, timeout=60)


def start_secure_broker(base: Path, reauth_ms: int = 3000, failure_delay_ms: int = 200,
                        handshake_timeout_ms: int = 10_000) -> SecureBroker:
    """Format the storage with the SCRAM users, then start the broker (the caller stops `.broker`)."""
    pki = make_pki(base)
    ports = {listener: free_port() for listener in SECURED}
    metrics_port = free_port()
    broker = BrokerProcess(base / "data", _overrides(pki, reauth_ms, metrics_port, failure_delay_ms,
                                                     handshake_timeout_ms))
    ports["PLAINTEXT"] = broker.port
    broker.overrides["listeners"] = ",".join(
        [f"PLAINTEXT://127.0.0.1:{broker.port}", f"CONTROLLER://127.0.0.1:{broker.controller_port}",
         *(f"{listener}://127.0.0.1:{ports[listener]}" for listener in SECURED)])
    format_storage(broker, *SCRAM_USERS)
    broker.start()
    return SecureBroker(broker, pki, ports, metrics_port)
