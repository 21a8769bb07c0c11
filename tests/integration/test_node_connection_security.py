"""A broker's own connections to other nodes (`NodeConnection`, what replica fetchers, the KRaft driver and the
controller channel use) on secured listeners of a real broker: SCRAM logins that renew themselves within
`connections.max.reauth.ms` on the same socket (KIP-368), refused logins that back off instead of hammering, and
mutual TLS that needs the node's key store."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator

import pytest

from bus.network.network_client import NodeAuthenticationError, NodeConnection, NodeConnectionError
from bus.network.node_security import NodeSecurity
from bus.protocol.messages import request_shapes
from bus.security.sasl_login import SaslCredentials
from tests.support.secure_broker import PASSWORDS, SecureBroker, start_secure_broker

METADATA = 3
REAUTH_MS = 3000


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("node-conn"), reauth_ms=REAUTH_MS)
    try:
        yield broker
    finally:
        broker.broker.stop()


def _address(secure: SecureBroker, listener: str) -> tuple[str, int]:
    return "127.0.0.1", secure.ports[listener]


async def _metadata(connection: NodeConnection) -> None:
    response = await connection.request(request_shapes(METADATA, 12).make("MetadataRequest", topics=()), 12)
    assert response.brokers, response


def test_a_scram_session_is_renewed_on_the_same_socket_before_it_expires(secure: SecureBroker) -> None:
    """Requests for three session lifetimes: every one answered, and on one socket (the broker closes a session
    that outlives its lifetime, so the connection would otherwise have been dropped and made again)."""
    security = NodeSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                            credentials=SaslCredentials("SCRAM-SHA-256", "admin", PASSWORDS["admin"]))

    async def run() -> int:
        connection = NodeConnection(*_address(secure, "SASL_PLAINTEXT"), "node-test", security=security)
        try:
            await _metadata(connection)
            writer = connection._writer
            deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
            requests = 0
            while time.monotonic() < deadline:
                await _metadata(connection)
                assert connection._writer is writer, "the connection was dropped and made again"
                requests += 1
                await asyncio.sleep(0.2)
            # Idle for more than a whole lifetime: the session is renewed in time all the same.
            await asyncio.sleep(1.5 * REAUTH_MS / 1000)
            await _metadata(connection)
            assert connection._writer is writer, "an idle connection's session lapsed"
            return requests
        finally:
            await connection.close()

    assert asyncio.run(run()) >= 10


def test_a_refused_login_fails_the_request_and_backs_off(secure: SecureBroker) -> None:
    security = NodeSecurity("SASL_SSL", "SASL_SSL", ssl.create_default_context(cafile=str(secure.pki.truststore)),
                            SaslCredentials("SCRAM-SHA-512", "alice", "not-her-password"))

    async def run() -> tuple[BaseException, BaseException]:
        connection = NodeConnection(*_address(secure, "SASL_SSL"), "node-test", security=security)
        try:
            with pytest.raises(NodeAuthenticationError) as first:
                await _metadata(connection)
            with pytest.raises(NodeConnectionError) as second:  # at once, without a new connection attempt
                await _metadata(connection)
            return first.value, second.value
        finally:
            await connection.close()

    first, second = asyncio.run(run())
    assert "alice" in str(first) and "not-her-password" not in str(first)
    assert "backing off" in str(second)


@pytest.mark.parametrize("with_key_store", [True, False])
def test_mutual_tls_needs_the_nodes_certificate(secure: SecureBroker, with_key_store: bool) -> None:
    context = ssl.create_default_context(cafile=str(secure.pki.truststore))
    if with_key_store:
        context.load_cert_chain(str(secure.pki.client_keystore))
    security = NodeSecurity("SSL", "SSL", context)

    async def run() -> BaseException | None:
        connection = NodeConnection(*_address(secure, "SSL"), "node-test", security=security)
        try:
            await _metadata(connection)
        except NodeConnectionError as exc:
            return exc
        finally:
            await connection.close()
        return None

    error = asyncio.run(run())
    assert (error is None) == with_key_store, error


def test_the_node_security_of_a_properties_file_is_what_it_dials_with(secure: SecureBroker) -> None:
    """`inter_broker_security` read from a broker config whose inter-broker listener is SASL_SSL logs in."""
    from bus.config.broker import load_broker_config
    from bus.network.node_security import inter_broker_security

    config = load_broker_config({
        "listeners": "SASL_SSL://127.0.0.1:1,CONTROLLER://127.0.0.1:2", "inter.broker.listener.name": "SASL_SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.pki.truststore),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(secure.pki.server_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            f'password="{PASSWORDS["alice"]}";'})

    async def run() -> None:
        connection = NodeConnection(*_address(secure, "SASL_SSL"), "node-test", security=inter_broker_security(config))
        try:
            await _metadata(connection)
        finally:
            await connection.close()

    asyncio.run(run())
