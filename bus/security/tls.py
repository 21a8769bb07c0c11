"""`ssl.SSLContext`s built from Kafka's `ssl.*` keys, for a listener (server) or a client.

Kafka's PEM stores are supported (`ssl.keystore.type=PEM`, `ssl.truststore.type=PEM`): a key store is one
PEM file (`ssl.keystore.location`: a private key, encrypted with `ssl.key.password` or not, and its
certificate chain) or the inline `ssl.keystore.key` + `ssl.keystore.certificate.chain`; a trust store is a PEM
file of CA certificates (`ssl.truststore.location`) or the inline `ssl.truststore.certificates`. Inline PEM
may sit on one line with spaces for line breaks, as Kafka allows. JKS and PKCS12 stores need a JVM and are
refused with a message saying so. The combinations Kafka refuses are refused with Kafka's reasons.

A listener refuses a key store whose certificate (the first of the chain, the one it presents) is expired or not
yet valid, at start rather than at every client's handshake.

Every error is a `ConfigError` naming the key (as written: `listener.name.ssl.ssl.keystore.location` or
`ssl.keystore.location`) and what is wrong, never a bare `ssl.SSLError` and never a password.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from cryptography import x509

from bus.config.definitions import ConfigError
from bus.security.listener_config import ConfigView

PEM = "PEM"
_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# TLS 1.3 suites: OpenSSL enables them apart from `set_ciphers` (see `_apply_cipher_suites`).
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                 "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}
_KEY_EXCHANGES = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-",
                  "DHE_DSS": "DHE-DSS-"}
_IANA_SUITE = re.compile(r"TLS_(?P<kx>\w+?)_WITH_(?P<cipher>AES|CAMELLIA)_(?P<bits>128|256)_(?P<mode>GCM|CBC|CCM)"
                         r"(?:_(?P<mac>SHA\d*|8))?")
_PEM_BLOCK = re.compile(r"-+BEGIN ([A-Z0-9 ]+?)-+(.*?)-+END \1-+", re.DOTALL)
_PEM_HEADER = re.compile(r"\s*([A-Za-z-]+):\s*([^\r\n]*)")


@dataclass(frozen=True, slots=True)
class _PemBlock:
    label: str
    der: bytes = field(repr=False)
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def encrypted(self) -> bool:
        return self.label == "ENCRYPTED PRIVATE KEY" or ("Proc-Type", "4,ENCRYPTED") in self.headers

    def text(self) -> str:
        """Canonical PEM (64-column base64) that OpenSSL reads whatever layout the operator used."""
        body = base64.b64encode(self.der).decode()
        lines = [f"{name}: {value}" for name, value in self.headers] + ([""] if self.headers else [])
        lines += [body[i:i + 64] for i in range(0, len(body), 64)]
        return "\n".join([f"-----BEGIN {self.label}-----", *lines, f"-----END {self.label}-----", ""])


def server_ssl_context(config: ConfigView, security_protocol: str = "SSL") -> ssl.SSLContext:
    """The context of a listener with `security_protocol` SSL or SASL_SSL; `config` is its `listener_config`.

    A listener needs a key store. `ssl.client.auth` (none, requested, required) asks clients for certificates,
    checked against the trust store (the system's CAs if none is set, as Java's default trust store); on a
    SASL_SSL listener Kafka honours it only when listener-prefixed, and so do we.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(context, config)
    _apply_cipher_suites(context, config)
    if not _load_key_store(context, config, check_dates=True):
        raise ConfigError(f"{config.source('ssl.keystore.location')}: a listener with security protocol "
                          f"{security_protocol} needs a key store (ssl.keystore.location or ssl.keystore.key)")
    client_auth = config.value("ssl.client.auth")
    if security_protocol == "SASL_SSL" and not config.overridden("ssl.client.auth"):
        client_auth = "none"
    trusted = _load_trust_store(context, config)
    if client_auth != "none":
        if not trusted:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_ssl_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """A client's context: the server is verified against the trust store (the system's CAs if none is set),
    its host name checked unless `ssl.endpoint.identification.algorithm` is empty; a key store is optional."""
    view = config if isinstance(config, ConfigView) else ConfigView(config)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(context, view)
    _apply_cipher_suites(context, view)
    _load_key_store(context, view)
    if not _load_trust_store(context, view):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    algorithm = view.value("ssl.endpoint.identification.algorithm") or ""
    if algorithm.lower() not in ("", "https"):
        raise ConfigError(f"Invalid value {algorithm} for configuration "
                          f"{view.source('ssl.endpoint.identification.algorithm')}: only https (or empty) is supported")
    context.check_hostname = algorithm != ""
    return context


def _apply_protocols(context: ssl.SSLContext, config: ConfigView) -> None:
    """`ssl.enabled.protocols` as the range from its oldest to its newest (empty: TLSv1.2 to TLSv1.3, what
    Java enables by default), capped by `ssl.protocol` (TLSv1.2 there rules TLS 1.3 out, as in Java)."""
    names: list[str] = config.value("ssl.enabled.protocols")
    key = config.source("ssl.enabled.protocols")
    unknown = [name for name in names if name not in _PROTOCOLS]
    if unknown:
        raise ConfigError(f"Invalid value {','.join(names)} for configuration {key}: unsupported protocol "
                          f"{unknown[0]} (supported: {', '.join(_PROTOCOLS)})")
    versions = sorted(_PROTOCOLS[name] for name in names) or [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]
    low, high = versions[0], versions[-1]
    protocol: str = config.value("ssl.protocol")
    if protocol != "TLS":
        if protocol not in _PROTOCOLS:
            raise ConfigError(f"Invalid value {protocol} for configuration {config.source('ssl.protocol')}: "
                              f"expected TLS or one of {', '.join(_PROTOCOLS)}")
        high = min(high, _PROTOCOLS[protocol])
    if low > high:
        raise ConfigError(f"{key}: no enabled protocol is allowed by {config.source('ssl.protocol')}={protocol}")
    context.minimum_version, context.maximum_version = low, high


def openssl_cipher_name(suite: str) -> str:
    """A TLS 1.2 suite's OpenSSL name: IANA/Java names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) are converted,
    OpenSSL names (ECDHE-RSA-AES128-GCM-SHA256) kept."""
    if suite.startswith("TLS_") and "_WITH_" in suite:
        if (chacha := suite.removesuffix("_WITH_CHACHA20_POLY1305_SHA256")) != suite:
            kx = _KEY_EXCHANGES.get(chacha.removeprefix("TLS_"))
            return f"{kx}CHACHA20-POLY1305" if kx is not None else suite
        match = _IANA_SUITE.fullmatch(suite)
        if match is None or match["kx"] not in _KEY_EXCHANGES:
            return suite
        mode = {"GCM": "-GCM", "CBC": "", "CCM": "-CCM"}[match["mode"]]
        mac = match["mac"] or ""
        tail = "8" if mac == "8" else f"-{mac}" if mac and match["mode"] != "CCM" else ""
        return f"{_KEY_EXCHANGES[match['kx']]}{match['cipher']}{match['bits']}{mode}{tail}"
    return suite


def _apply_cipher_suites(context: ssl.SSLContext, config: ConfigView) -> None:
    """`ssl.cipher.suites` (empty: OpenSSL's defaults). OpenSSL configures TLS 1.3 suites apart and Python cannot
    narrow them, so a list without TLS 1.3 suites turns TLS 1.3 off (as Java, which then has none to offer), a
    list with only TLS 1.3 suites turns TLS 1.2 off, and a list with some TLS 1.3 suites allows all three."""
    suites: list[str] = config.value("ssl.cipher.suites")
    if not suites:
        return
    key = config.source("ssl.cipher.suites")
    tls12 = [openssl_cipher_name(suite) for suite in suites if suite not in _TLS13_SUITES]
    for suite, name in zip([s for s in suites if s not in _TLS13_SUITES], tls12, strict=True):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(f"Invalid value {','.join(suites)} for configuration {key}: "
                              f"unsupported cipher suite {suite}") from None
    if tls12:
        context.set_ciphers(":".join(tls12))
    else:
        context.minimum_version = max(context.minimum_version, ssl.TLSVersion.TLSv1_3)
    if len(tls12) == len(suites):
        context.maximum_version = min(context.maximum_version, ssl.TLSVersion.TLSv1_2)
    if context.minimum_version > context.maximum_version:
        raise ConfigError(f"{key}: none of the cipher suites can be used with {config.source('ssl.enabled.protocols')}")


def _pem_blocks(text: str, where: str) -> list[_PemBlock]:
    blocks = []
    for match in _PEM_BLOCK.finditer(text):
        body = match.group(2)
        headers = []
        while header := _PEM_HEADER.match(body):
            headers.append((header.group(1), header.group(2).strip()))
            body = body[header.end():]
        try:
            der = base64.b64decode(re.sub(r"\s", "", body), validate=True)
        except binascii.Error:
            raise ConfigError(f"{where}: bad base64 in a PEM {match.group(1)} block") from None
        blocks.append(_PemBlock(match.group(1), der, tuple(headers)))
    return blocks


def _read(config: ConfigView, key: str) -> tuple[str, str]:
    """The PEM text of a `*.location` key, and how errors name it ("key: path")."""
    path = config[key]
    where = f"{config.source(key)}: {path}"
    try:
        with open(path, encoding="utf-8") as file:
            return file.read(), where
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from None


def _check_pem(config: ConfigView, key: str, what: str) -> None:
    store_type: str = config.value(key)
    if store_type != PEM:
        raise ConfigError(f"Invalid value {store_type} for configuration {config.source(key)}: {what} of type "
                          f"{store_type} need a JVM; only PEM is supported")


def _load_key_store(context: ssl.SSLContext, config: ConfigView, check_dates: bool = False) -> bool:
    """Load the key store if one is configured (Kafka's `createKeystore` rules); False if none is.

    `check_dates`: refuse a certificate that is expired or not yet valid (a listener's)."""
    key, chain = config.get("ssl.keystore.key"), config.get("ssl.keystore.certificate.chain")
    location, password = config.get("ssl.keystore.location"), config.get("ssl.keystore.password")
    if key is not None:
        if config.value("ssl.keystore.type") != PEM:
            raise ConfigError(f"{config.source('ssl.keystore.key')}: SSL private key can be specified only for PEM, "
                              f"but key store type is {config.value('ssl.keystore.type')}.")
        if chain is None:
            raise ConfigError(f"{config.source('ssl.keystore.key')}: SSL private key is specified, but certificate "
                              "chain is not specified.")
        if location is not None:
            raise ConfigError(f"{config.source('ssl.keystore.location')}: Both SSL key store location and separate "
                              "private key are specified.")
        if password is not None:
            raise ConfigError(f"{config.source('ssl.keystore.password')}: SSL key store password cannot be "
                              "specified with PEM format, only key password may be specified.")
        keys = _pem_blocks(key, config.source("ssl.keystore.key"))
        certificates = _pem_blocks(chain, config.source("ssl.keystore.certificate.chain"))
        _load_pem_key_store(context, config, keys, certificates, config.source("ssl.keystore.key"),
                            config.source("ssl.keystore.certificate.chain"), check_dates)
        return True
    if chain is not None:
        raise ConfigError(f"{config.source('ssl.keystore.certificate.chain')}: SSL certificate chain is specified, "
                          "but private key is not specified")
    if location is None:
        if password is not None:
            raise ConfigError(f"{config.source('ssl.keystore.password')}: SSL key store is not specified, but key "
                              "store password is specified.")
        return False
    _check_pem(config, "ssl.keystore.type", "key stores")
    if password is not None:
        raise ConfigError(f"{config.source('ssl.keystore.password')}: SSL key store password cannot be specified "
                          "with PEM format, only key password may be specified")
    text, where = _read(config, "ssl.keystore.location")
    blocks = _pem_blocks(text, where)
    _load_pem_key_store(context, config, blocks, blocks, where, where, check_dates)
    return True


def _load_pem_key_store(context: ssl.SSLContext, config: ConfigView, key_blocks: list[_PemBlock],
                        chain_blocks: list[_PemBlock], key_where: str, chain_where: str,
                        check_dates: bool = False) -> None:
    keys = [block for block in key_blocks if block.label.endswith("PRIVATE KEY")]
    certificates = [block for block in chain_blocks if block.label == "CERTIFICATE"]
    if not keys:
        raise ConfigError(f"{key_where}: no private key found")
    if len(keys) > 1:
        raise ConfigError(f"{key_where}: expected one private key, but found {len(keys)}")
    if not certificates:
        raise ConfigError(f"{chain_where}: no certificate found")
    key_password = config.get("ssl.key.password")
    password_key = config.source("ssl.key.password")
    if keys[0].encrypted and key_password is None:
        raise ConfigError(f"{password_key}: the private key in {key_where} is encrypted and no password is set")
    with _memory_file("".join(block.text() for block in (*keys, *certificates))) as path:
        try:
            context.load_cert_chain(path, password=_no_password if key_password is None else key_password)
        except ssl.SSLError as exc:
            if keys[0].encrypted:
                raise ConfigError(f"{password_key}: cannot decrypt the private key in {key_where} "
                                  "(wrong password?)") from None
            reason = "the private key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(exc) else \
                f"cannot load the key store ({exc.reason or exc})"
            raise ConfigError(f"{key_where}: {reason}") from None
    if check_dates:
        _check_validity_period(certificates[0].der, chain_where)


def _check_validity_period(der: bytes, where: str) -> None:
    """A ConfigError naming `where`, the certificate's subject and the date it failed, if the certificate is
    expired or not yet valid now."""
    try:
        certificate = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise ConfigError(f"{where}: cannot read the certificate ({exc})") from None
    now = datetime.datetime.now(datetime.UTC)
    subject = certificate.subject.rfc4514_string() or "(empty subject)"
    if now > certificate.not_valid_after_utc:
        raise ConfigError(f"{where}: the certificate {subject} expired on {_iso(certificate.not_valid_after_utc)}")
    if now < certificate.not_valid_before_utc:
        raise ConfigError(f"{where}: the certificate {subject} is not valid before "
                          f"{_iso(certificate.not_valid_before_utc)}")


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_password() -> str:
    """Given to OpenSSL for an unencrypted key, so that it never prompts on the terminal."""
    raise ssl.SSLError("no key password")


def _load_trust_store(context: ssl.SSLContext, config: ConfigView) -> bool:
    """Load the trust store if one is configured (Kafka's `createTruststore` rules); False if none is."""
    inline, location = config.get("ssl.truststore.certificates"), config.get("ssl.truststore.location")
    password = config.get("ssl.truststore.password")
    if inline is not None:
        if config.value("ssl.truststore.type") != PEM:
            raise ConfigError(f"{config.source('ssl.truststore.certificates')}: SSL trust store certs can be "
                              f"specified only for PEM, but trust store type is {config.value('ssl.truststore.type')}.")
        if location is not None:
            raise ConfigError(f"{config.source('ssl.truststore.location')}: Both SSL trust store location and "
                              "separate trust certificates are specified.")
        text, where = inline, config.source("ssl.truststore.certificates")
    elif location is not None:
        _check_pem(config, "ssl.truststore.type", "trust stores")
        text, where = _read(config, "ssl.truststore.location")
    else:
        if password is not None:
            raise ConfigError(f"{config.source('ssl.truststore.password')}: SSL trust store is not specified, but "
                              "trust store password is specified.")
        return False
    if password is not None:
        raise ConfigError(f"{config.source('ssl.truststore.password')}: SSL trust store password cannot be "
                          "specified for PEM format.")
    certificates = [block for block in _pem_blocks(text, where) if block.label == "CERTIFICATE"]
    if not certificates:
        raise ConfigError(f"{where}: no certificate found")
    try:
        context.load_verify_locations(cadata="".join(block.text() for block in certificates))
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: cannot load the trust store ({exc.reason or exc})") from None
    return True


@contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path OpenSSL can read `text` from without it touching a disk (the key store holds a private key)."""
    fd = os.memfd_create("bus-keystore", os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
