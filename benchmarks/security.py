"""What security costs on the bus: produce over SASL_SSL against PLAINTEXT, the authorizer, TLS handshakes.

One `bus broker` process with a PLAINTEXT and a SASL_SSL listener, the StandardAuthorizer on and 10,000 ACLs
loaded through CreateAcls (as an operations centre with many services and users has them). The same
confluent-kafka producer (100-byte records, acks=1, linger.ms=5) runs in its own process against each
listener in turn: on PLAINTEXT as User:ANONYMOUS (a super user here, so no ACL is looked up: the reference),
on SASL_SSL as a SCRAM-SHA-512 user whose WRITE comes from a prefixed ACL among the 10,000 (TLS, SASL and an
authorization check on every produce). Targets (issue 26): SASL_SSL >= 0.6x PLAINTEXT; an authorization
check <= 5 us with 10,000 ACLs; TLS handshakes per second are printed (one client, one after another).

    .venv/bin/python benchmarks/security.py [--records N] [--acls N] [--handshake-seconds S]
"""

from __future__ import annotations

import argparse
import functools
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.broker_throughput import produce_rate, run_in_process
from bus.security.acls import AclBinding, AclIndex, AclOperation, PatternType, PermissionType, ResourceType
from bus.security.authorizer import StandardAuthorizer
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess
from testkit.tls import make_pki

TOPIC = "bench.secured"
USER, PASSWORD = "bench", "bench-secret"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def _many_acls(count: int) -> list[AclBinding]:
    """ACLs of the kinds a large deployment holds: literal and prefixed topics and groups of 500 principals, with
    prefixes of many lengths, and DENYs from one host."""
    acls = []
    for i in range(count):
        user = f"User:app{i % 500}"
        kind = i % 4
        if kind == 0:
            acls.append(AclBinding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, user, "*",
                                   AclOperation.READ, PermissionType.ALLOW))
        elif kind == 1:
            acls.append(AclBinding(ResourceType.TOPIC, f"team{i % 97}.svc{i}."[: 6 + i % 20], PatternType.PREFIXED,
                                   user, "*", AclOperation.WRITE, PermissionType.ALLOW))
        elif kind == 2:
            acls.append(AclBinding(ResourceType.GROUP, f"group-{i}", PatternType.LITERAL, user, "*",
                                   AclOperation.READ, PermissionType.ALLOW))
        else:
            acls.append(AclBinding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, user, "10.1.1.1",
                                   AclOperation.WRITE, PermissionType.DENY))
    return acls


def _granted() -> list[AclBinding]:
    """What the benchmark user needs: WRITE (hence DESCRIBE) on the `bench.` topics, by prefix."""
    return [AclBinding(ResourceType.TOPIC, "bench.", PatternType.PREFIXED, f"User:{USER}", "*", operation,
                       PermissionType.ALLOW) for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]


class _Asker:
    principal = f"User:{USER}"
    client_host = "127.0.0.1"
    api_key = 0


def check_us(acls: list[AclBinding]) -> float:
    """Microseconds per authorization check of the broker's authorizer with `acls` (in this process: a partial
    figure, the check alone), over topics that hit literal, prefixed and no ACLs, best of 5 rounds."""
    index = AclIndex()
    for binding in acls:
        index.add(uuid.uuid4(), binding)
    authorizer = StandardAuthorizer(lambda: index, (), False)
    names = [f"topic-{i}" for i in range(0, 400, 3)] + [f"team{i}.svc{i}.x" for i in range(100)] + [TOPIC]
    checks = [functools.partial(authorizer.authorize, _Asker(), operation, ResourceType.TOPIC, name,
                                log_if_denied=False)
              for name in names for operation in (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for check in checks:
            check()
        best = min(best, time.perf_counter() - started)
    return best / len(checks) * 1e6


def handshakes_per_s(port: int, truststore: Path, seconds: float) -> float:
    """Full TLS handshakes (no session resumption) a single client completes per second, one after another."""
    context = ssl.create_default_context(cafile=str(truststore))
    done = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost"):
            done += 1
    return done / (time.perf_counter() - started)


def _broker(base: Path) -> tuple[BrokerProcess, int, Path]:
    pki = make_pki(base)
    sasl_port = free_port()
    broker = BrokerProcess(base / "data", {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS",
        "cluster.id": "bench-security-cluster",
    })
    broker.overrides["listeners"] += f",SASL_SSL://127.0.0.1:{sasl_port}"
    base.joinpath("data").mkdir(parents=True, exist_ok=True)
    properties = base / "server.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in broker.overrides.items()))
    subprocess.run([sys.executable, "-m", "bus", "storage", "format", "--config", str(properties), "--cluster-id",
                    broker.overrides["cluster.id"], "--add-scram",
                    f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    return broker.start(), sasl_port, pki.truststore


def _load_acls(bootstrap: str, acls: list[AclBinding]) -> None:
    from confluent_kafka.admin import AclBinding as Binding
    from confluent_kafka.admin import AclOperation as Operation
    from confluent_kafka.admin import AclPermissionType, AdminClient, NewTopic, ResourcePatternType
    from confluent_kafka.admin import ResourceType as Resource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    for start in range(0, len(acls), 1000):
        bindings = [Binding(Resource[a.resource_type.name], a.resource_name, ResourcePatternType[a.pattern_type.name],
                            a.principal, a.host, Operation[a.operation.name], AclPermissionType[a.permission.name])
                    for a in acls[start:start + 1000]]
        for future in admin.create_acls(bindings).values():
            future.result(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--handshake-seconds", type=float, default=5.0)
    args = parser.parse_args()
    acls = _many_acls(args.acls - len(_granted())) + _granted()
    with tempfile.TemporaryDirectory() as tmp:
        broker, sasl_port, truststore = _broker(Path(tmp))
        try:
            _load_acls(broker.bootstrap, acls)
            plaintext = run_in_process(produce_rate, {"bootstrap.servers": broker.bootstrap}, TOPIC, args.records)
            secured = run_in_process(produce_rate, {
                "bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD,
                "ssl.ca.location": str(truststore)}, TOPIC, args.records)
            handshakes = handshakes_per_s(sasl_port, truststore, args.handshake_seconds)
        finally:
            broker.stop()
    print(f"produce, 100-byte records, acks=1, {len(acls):,} ACLs loaded (the broker as a process):")
    print(f"  PLAINTEXT (super user, no ACL looked up)        {plaintext:>10,.0f} records/s")
    print(f"  SASL_SSL SCRAM-SHA-512 (prefixed ACL, checked)  {secured:>10,.0f} records/s   "
          f"ratio {secured / plaintext:.2f} (target >= 0.6)")
    print(f"TLS handshakes (one client, sequential, full handshakes): {handshakes:,.0f}/s")
    small = check_us(_many_acls(10) + _granted())
    large = check_us(acls)
    print(f"authorization check (partial: the authorizer alone, in this process): {small:.2f} us with "
          f"{len(_granted()) + 10} ACLs, {large:.2f} us with {len(acls):,} ACLs (target <= 5 us)")


if __name__ == "__main__":
    main()
