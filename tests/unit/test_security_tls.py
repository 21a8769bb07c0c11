"""TLS contexts from Kafka's `ssl.*` keys, the per-listener override rule, and real handshakes between them.

The handshakes run OpenSSL on both ends through memory BIOs (the same TLS a socket would carry), and one runs over
loopback through asyncio, as the broker's listeners will.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from bus.config.definitions import ConfigError
from bus.security.listener_config import listener_config
from bus.security.principal import SslPrincipalMapper, ssl_principal
from bus.security.tls import client_ssl_context, openssl_cipher_name, server_ssl_context
from bus.security.x500 import subject_name
from testkit.tls import KEY_PASSWORD, Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server_props(pki: Pki, **extra: str) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore), **extra}


def _client(pki: Pki, keystore: Path | None = None, extra: dict[str, str] | None = None) -> ssl.SSLContext:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore), **(extra or {})}
    if keystore is not None:
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    return client_ssl_context(props)


def _server(props: dict[str, str], listener: str = "SSL", protocol: str = "SSL") -> ssl.SSLContext:
    return server_ssl_context(listener_config(props, listener), protocol)


def handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext,
              server_hostname: str = "localhost") -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a TLS handshake between the two contexts and pass one record each way; raises ssl.SSLError on refusal."""
    bios = [ssl.MemoryBIO() for _ in range(4)]
    server = server_context.wrap_bio(bios[0], bios[1], server_side=True)
    client = client_context.wrap_bio(bios[2], bios[3], server_hostname=server_hostname)
    pending = [client, server]
    for _ in range(10):
        for end in list(pending):
            try:
                end.do_handshake()
                pending.remove(end)
            except ssl.SSLWantReadError:
                pass
        bios[0].write(bios[3].read())
        bios[2].write(bios[1].read())
        if not pending:
            break
    assert not pending, "handshake did not finish"
    client.write(b"ping")
    bios[0].write(bios[3].read())
    assert server.read(4) == b"ping"
    return server, client


def test_listener_prefix_beats_the_plain_key() -> None:
    props = {"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required",
             "listener.name.other.ssl.client.auth": "requested", "LISTENER.NAME.INTERNAL.ssl.keystore.type": "PKCS12",
             "listener.name.internal.scram-sha-512.sasl.jaas.config": "x"}
    view = listener_config(props, "INTERNAL")
    assert view["ssl.client.auth"] == "required"
    assert view.source("ssl.client.auth") == "listener.name.internal.ssl.client.auth"
    assert view.overridden("ssl.client.auth") and not view.overridden("ssl.keystore.type")
    assert view["scram-sha-512.sasl.jaas.config"] == "x"
    assert "ssl.keystore.type" not in view  # only the lower-case listener name matches, as in Kafka
    assert not any(key.startswith("listener.name.") for key in view)
    assert view.value("ssl.keystore.type") == "JKS"  # Kafka's default
    assert listener_config(props, "PLAIN")["ssl.client.auth"] == "none"
    with pytest.raises(ConfigError, match=re.escape("Invalid value maybe for configuration listener.name.internal.")):
        listener_config({"listener.name.internal.ssl.client.auth": "maybe"}, "INTERNAL").value("ssl.client.auth")


def test_keystore_file_and_handshake(pki: Pki) -> None:
    server, client = handshake(_server(_server_props(pki)), _client(pki))
    assert server.version() == client.version() == "TLSv1.3"
    assert server.getpeercert(binary_form=True) is None
    assert ssl_principal(server.getpeercert(binary_form=True), SslPrincipalMapper.from_rules(None)).name == "ANONYMOUS"
    assert subject_name(client.getpeercert(binary_form=True) or b"") == "CN=localhost,O=city"


def test_inline_keystore_and_truststore(pki: Pki) -> None:
    one_line = pki.server.key_pem().replace("\n", " ")  # a properties file value may hold PEM on one line
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.key": one_line,
             "ssl.keystore.certificate.chain": pki.server.chain_pem()}
    client = client_ssl_context({"ssl.truststore.type": "PEM",
                                 "ssl.truststore.certificates": pki.ca.identity.chain_pem().replace("\n", " ")})
    handshake(_server(props), client)


def test_encrypted_key(pki: Pki) -> None:
    props = _server_props(pki, **{"ssl.keystore.location": str(pki.server_keystore_encrypted),
                                  "ssl.key.password": KEY_PASSWORD})
    handshake(_server(props), _client(pki))
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.key": pki.server.key_pem(KEY_PASSWORD),
              "ssl.keystore.certificate.chain": pki.server.chain_pem(), "ssl.key.password": KEY_PASSWORD}
    handshake(_server(inline), _client(pki))
    # OpenSSL's traditional encrypted PEM (Proc-Type and DEK-Info headers) works too, though Kafka wants PKCS#8.
    traditional = pki.server.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode())).decode()
    assert "Proc-Type: 4,ENCRYPTED" in traditional
    handshake(_server(inline | {"ssl.keystore.key": traditional}), _client(pki))
    without_password = {key: value for key, value in inline.items() if key != "ssl.key.password"}
    with pytest.raises(ConfigError, match=re.escape("ssl.key.password: the private key in ssl.keystore.key is "
                                                    "encrypted and no password is set")):
        _server(without_password | {"ssl.keystore.key": traditional})


def test_mutual_tls(pki: Pki) -> None:
    props = _server_props(pki, **{"ssl.client.auth": "required"})
    server, _ = handshake(_server(props), _client(pki, pki.client_keystore))
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]*),OU=ops,.*$/$1/")
    assert ssl_principal(server.getpeercert(binary_form=True), mapper).name == "alice"
    assert ssl_principal(server.getpeercert(binary_form=True), SslPrincipalMapper.from_rules(None)).name == \
        "CN=alice,OU=ops,O=city"


@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_client_certificate_from_an_untrusted_ca_is_refused(pki: Pki, client_auth: str) -> None:
    props = _server_props(pki, **{"ssl.client.auth": client_auth})
    with pytest.raises(ssl.SSLError, match="certificate verify failed"):
        handshake(_server(props), _client(pki, pki.untrusted_client_keystore))


def test_required_client_auth_needs_a_certificate(pki: Pki) -> None:
    with pytest.raises(ssl.SSLError, match="peer did not return a certificate"):
        handshake(_server(_server_props(pki, **{"ssl.client.auth": "required"})), _client(pki))
    server, _ = handshake(_server(_server_props(pki, **{"ssl.client.auth": "requested"})), _client(pki))
    assert server.getpeercert(binary_form=True) is None


def test_sasl_ssl_listener_asks_for_certificates_only_when_listener_prefixed(pki: Pki) -> None:
    plain = _server_props(pki, **{"ssl.client.auth": "required"})
    assert _server(plain, "SASL_SSL", "SASL_SSL").verify_mode == ssl.CERT_NONE
    prefixed = _server_props(pki, **{"listener.name.sasl_ssl.ssl.client.auth": "required"})
    assert _server(prefixed, "SASL_SSL", "SASL_SSL").verify_mode == ssl.CERT_REQUIRED
    assert _server(plain, "SSL").verify_mode == ssl.CERT_REQUIRED


def test_server_certificate_is_checked_by_the_client(pki: Pki) -> None:
    handshake(_server(_server_props(pki)), _client(pki), server_hostname="127.0.0.1")  # the IP SAN
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(_server(_server_props(pki)), _client(pki), server_hostname="broker.example")
    handshake(_server(_server_props(pki)), _client(pki, extra={"ssl.endpoint.identification.algorithm": ""}),
              server_hostname="broker.example")
    untrusting = client_ssl_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore),
                                     "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.client_keystore)})
    untrusted_server = _server({"ssl.keystore.type": "PEM",
                                "ssl.keystore.location": str(pki.untrusted_client_keystore)})
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(untrusted_server, untrusting)


def test_protocols_and_cipher_suites(pki: Pki) -> None:
    tls12 = _server(_server_props(pki, **{"ssl.enabled.protocols": "TLSv1.2"}))
    assert handshake(tls12, _client(pki))[0].version() == "TLSv1.2"
    capped = _server(_server_props(pki, **{"ssl.protocol": "TLSv1.2"}))
    assert handshake(capped, _client(pki))[0].version() == "TLSv1.2"

    suite = _server(_server_props(pki, **{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}))
    server, _ = handshake(suite, _client(pki))
    assert (server.cipher() or ())[:2] == ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLSv1.2")  # no TLS 1.3 suite listed
    only13 = _server(_server_props(pki, **{"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"}))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    assert handshake(only13, _client(pki))[0].version() == "TLSv1.3"


@pytest.mark.parametrize(("iana", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"),
    ("TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", "DHE-RSA-AES128-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM", "ECDHE-ECDSA-AES128-CCM"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
])
def test_cipher_suite_names(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(openssl)  # OpenSSL knows it


def _error(props: dict[str, str], listener: str = "SSL") -> str:
    with pytest.raises(ConfigError) as error:
        _server(props, listener)
    assert "secret" not in str(error.value)
    return str(error.value)


def test_bad_key_stores_name_the_key(pki: Pki, tmp_path: Path) -> None:
    cert_only = tmp_path / "cert-only.pem"
    cert_only.write_text(pki.server.chain_pem())
    key_only = tmp_path / "key-only.pem"
    key_only.write_text(pki.server.key_pem())
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_text(pki.client.key_pem() + pki.server.chain_pem())
    pem = {"ssl.keystore.type": "PEM"}
    assert _error(pem | {"ssl.keystore.location": str(cert_only)}) == \
        f"ssl.keystore.location: {cert_only}: no private key found"
    assert _error(pem | {"listener.name.ssl.ssl.keystore.location": str(key_only)}) == \
        f"listener.name.ssl.ssl.keystore.location: {key_only}: no certificate found"
    assert _error(pem | {"ssl.keystore.location": str(mismatched)}) == \
        f"ssl.keystore.location: {mismatched}: the private key does not match the certificate"
    assert _error(pem | {"ssl.keystore.location": "/nonexistent/x.pem"}) == \
        "ssl.keystore.location: /nonexistent/x.pem: No such file or directory"
    assert _error({"ssl.keystore.location": str(pki.server_keystore)}) == "Invalid value JKS for configuration " \
        "ssl.keystore.type: key stores of type JKS need a JVM; only PEM is supported"
    assert "needs a key store" in _error({})
    assert _error(pem | {"ssl.keystore.location": str(pki.server_keystore_encrypted)}) == \
        f"ssl.key.password: the private key in ssl.keystore.location: {pki.server_keystore_encrypted} is encrypted " \
        "and no password is set"
    assert _error(pem | {"ssl.keystore.location": str(pki.server_keystore_encrypted),
                         "listener.name.ssl.ssl.key.password": "wrong-secret"}).startswith(
        "listener.name.ssl.ssl.key.password: cannot decrypt the private key in ssl.keystore.location")
    assert "Both SSL key store location and separate private key" in _error(
        pem | {"ssl.keystore.location": str(pki.server_keystore), "ssl.keystore.key": pki.server.key_pem(),
               "ssl.keystore.certificate.chain": pki.server.chain_pem()})
    assert _error(pem | {"ssl.keystore.key": pki.server.key_pem()}) == \
        "ssl.keystore.key: SSL private key is specified, but certificate chain is not specified."
    assert "SSL certificate chain is specified, but private key is not specified" in _error(
        pem | {"ssl.keystore.certificate.chain": pki.server.chain_pem()})
    assert "SSL private key can be specified only for PEM, but key store type is JKS" in _error(
        {"ssl.keystore.key": pki.server.key_pem(), "ssl.keystore.certificate.chain": pki.server.chain_pem()})
    assert "SSL key store password cannot be specified with PEM format" in _error(
        pem | {"ssl.keystore.location": str(pki.server_keystore), "ssl.keystore.password": "store-secret"})
    assert _error(pem | {"ssl.keystore.key": "-----BEGIN PRIVATE KEY----- !!!! -----END PRIVATE KEY-----",
                         "ssl.keystore.certificate.chain": pki.server.chain_pem()}) == \
        "ssl.keystore.key: bad base64 in a PEM PRIVATE KEY block"


def test_bad_trust_stores_name_the_key(pki: Pki, tmp_path: Path) -> None:
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore)}
    key_only = tmp_path / "key-only.pem"
    key_only.write_text(pki.server.key_pem())
    assert _error(base | {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(key_only)}) == \
        f"ssl.truststore.location: {key_only}: no certificate found"
    assert _error(base | {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "nothing"}) == \
        "ssl.truststore.certificates: no certificate found"
    assert "trust stores of type JKS need a JVM" in _error(base | {"ssl.truststore.location": str(pki.truststore)})
    assert "SSL trust store password cannot be specified for PEM format" in _error(
        base | {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore),
                "ssl.truststore.password": "store-secret"})


@pytest.mark.parametrize(("props", "message"), [
    ({"ssl.enabled.protocols": "TLSv1.2,SSLv3"}, "ssl.enabled.protocols: unsupported protocol SSLv3"),
    ({"ssl.protocol": "SSL"}, "Invalid value SSL for configuration ssl.protocol"),
    ({"ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.2"},
     "ssl.enabled.protocols: no enabled protocol is allowed by ssl.protocol=TLSv1.2"),
    ({"ssl.cipher.suites": "TLS_NOT_A_SUITE,TLS_AES_128_GCM_SHA256"}, "unsupported cipher suite TLS_NOT_A_SUITE"),
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols": "TLSv1.2"},
     "ssl.cipher.suites: none of the cipher suites can be used with ssl.enabled.protocols"),
])
def test_bad_protocols_and_suites(pki: Pki, props: dict[str, str], message: str) -> None:
    assert message in _error(_server_props(pki, **props))


def test_client_endpoint_identification_values(pki: Pki) -> None:
    assert _client(pki).check_hostname
    assert not _client(pki, extra={"ssl.endpoint.identification.algorithm": ""}).check_hostname
    with pytest.raises(ConfigError, match=re.escape("ssl.endpoint.identification.algorithm: only https")):
        _client(pki, extra={"ssl.endpoint.identification.algorithm": "ldaps"})


def test_asyncio_loopback_with_mutual_tls(pki: Pki) -> None:
    """The contexts as the broker's asyncio listener will use them: the peer certificate maps to a principal."""
    server_context = _server(_server_props(pki, **{"ssl.client.auth": "required"}))
    client_context = _client(pki, pki.client_keystore)
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]*),.*$/$1/U")

    async def scenario() -> tuple[str, bytes]:
        principals: list[str] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            principals.append(str(ssl_principal(writer.get_extra_info("ssl_object").getpeercert(True), mapper)))
            writer.write(await reader.readexactly(4))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                       server_hostname="localhost")
        writer.write(b"ping")
        echoed = await reader.readexactly(4)
        writer.close()
        server.close()
        await server.wait_closed()
        return principals[0], echoed

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == ("User:ALICE", b"ping")
