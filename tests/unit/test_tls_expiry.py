"""A certificate that is expired or not yet valid stops the start with a clear error, not the first handshake.

The broker: a listener's key store (`ssl.keystore.location`, or `ssl.keystore.certificate.chain` with
`ssl.keystore.key`) is a ConfigError naming the key, the certificate's subject and its date, and `bus broker` exits 2
with it on one line. The console: `[console] tls_cert` is a ValueError naming `console.tls_cert`, the path, the
subject and the date, and `python -m web` prints "bad config: ..." and exits 2.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bus.config.definitions import ConfigError
from bus.security.listener_config import listener_config
from bus.security.tls import server_ssl_context
from contracts.config import Config
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.pki import Authority, Identity, name, write_private
from web.settings import ConsoleSettings

EXPIRED_ON = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
VALID_FROM = datetime.datetime(2099, 6, 1, 12, 30, tzinfo=datetime.UTC)


def _identity(authority: Authority, common_name: str, not_before: datetime.datetime,
              not_after: datetime.datetime) -> Identity:
    """A server certificate for `common_name` valid from `not_before` to `not_after`, signed by `authority`."""
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (x509.CertificateBuilder().subject_name(name((NameOID.COMMON_NAME, common_name)))
                   .issuer_name(authority.identity.certificate.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
                   .sign(authority.identity.key, hashes.SHA256()))
    return Identity(key, (certificate, authority.identity.certificate))


@pytest.fixture(scope="module")
def authority() -> Authority:
    return Authority.create("expiry test CA")


@pytest.fixture(scope="module")
def expired(authority: Authority) -> Identity:
    return _identity(authority, "bus-node-1", EXPIRED_ON - datetime.timedelta(days=30), EXPIRED_ON)


@pytest.fixture(scope="module")
def future(authority: Authority) -> Identity:
    return _identity(authority, "bus-node-2", VALID_FROM, VALID_FROM + datetime.timedelta(days=365))


# -- the broker -------------------------------------------------------------------------------------------------------


def _server_context(props: dict[str, str], listener: str = "SSL") -> None:
    server_ssl_context(listener_config({"ssl.keystore.type": "PEM", **props}, listener))


def test_an_expired_key_store_file_is_refused_naming_the_key_subject_and_date(tmp_path: Path,
                                                                               expired: Identity) -> None:
    keystore = expired.write_keystore(tmp_path / "node-1.pem")
    with pytest.raises(ConfigError) as error:
        _server_context({"ssl.keystore.location": str(keystore)})
    assert str(error.value) == (f"ssl.keystore.location: {keystore}: the certificate CN=bus-node-1 expired on "
                                "2026-01-01T00:00:00Z")
    with pytest.raises(ConfigError) as prefixed:  # the key as the operator wrote it, listener prefix and all
        _server_context({"listener.name.ssl.ssl.keystore.location": str(keystore)})
    assert str(prefixed.value).startswith(f"listener.name.ssl.ssl.keystore.location: {keystore}: the certificate "
                                          "CN=bus-node-1 expired on 2026-01-01T00:00:00Z")


def test_a_key_store_not_yet_valid_is_refused(tmp_path: Path, future: Identity) -> None:
    keystore = future.write_keystore(tmp_path / "node-2.pem")
    with pytest.raises(ConfigError, match=r"the certificate CN=bus-node-2 is not valid before 2099-06-01T12:30:00Z"):
        _server_context({"ssl.keystore.location": str(keystore)})


def test_an_expired_inline_certificate_chain_is_refused(expired: Identity) -> None:
    with pytest.raises(ConfigError) as error:
        _server_context({"ssl.keystore.key": expired.key_pem(), "ssl.keystore.certificate.chain": expired.chain_pem()},
                        "SASL_SSL")
    assert str(error.value) == ("ssl.keystore.certificate.chain: the certificate CN=bus-node-1 expired on "
                                "2026-01-01T00:00:00Z")


def test_a_valid_key_store_still_loads(tmp_path: Path, authority: Authority) -> None:
    valid = authority.issue(name((NameOID.COMMON_NAME, "localhost")), server=True, days=1)
    _server_context({"ssl.keystore.location": str(valid.write_keystore(tmp_path / "valid.pem"))})


def test_the_broker_refuses_to_start_with_an_expired_key_store(tmp_path: Path, expired: Identity) -> None:
    keystore = expired.write_keystore(tmp_path / "node-1.pem")
    listeners = (f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:{free_port()},"
                 f"SSL://127.0.0.1:{free_port()}")
    command = [sys.executable, "-m", "bus", "broker", "--override", f"listeners={listeners}",
               "--override", f"log.dirs={tmp_path / 'data'}", "--override", "ssl.keystore.type=PEM",
               "--override", f"listener.name.ssl.ssl.keystore.location={keystore}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=30)
    error = done.stderr.decode()
    assert done.returncode == 2, error
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1] == (
        f"bus broker: configuration error: listener.name.ssl.ssl.keystore.location: {keystore}: the certificate "
        "CN=bus-node-1 expired on 2026-01-01T00:00:00Z")


# -- the console ------------------------------------------------------------------------------------------------------


def _console_files(directory: Path, identity: Identity) -> tuple[Path, Path]:
    cert = directory / "console.pem"
    cert.write_text(identity.chain_pem())
    return cert, write_private(directory / "console.key", identity.key_pem())


def _settings(cert: Path | str, key: Path | str, directory: Path) -> ConsoleSettings:
    return ConsoleSettings.from_config(Config({"console": {"tls_cert": str(cert), "tls_key": str(key)}},
                                              directory / "solution.toml"))


def test_the_console_refuses_an_expired_certificate(tmp_path: Path, expired: Identity) -> None:
    cert, key = _console_files(tmp_path, expired)
    with pytest.raises(ValueError) as error:
        _settings(cert, key, tmp_path)
    assert str(error.value) == f"console.tls_cert {cert}: the certificate CN=bus-node-1 expired on 2026-01-01T00:00:00Z"


def test_the_console_refuses_a_certificate_not_yet_valid(tmp_path: Path, future: Identity) -> None:
    cert, key = _console_files(tmp_path, future)
    with pytest.raises(ValueError) as error:
        _settings(cert, key, tmp_path)
    assert str(error.value) == (f"console.tls_cert {cert}: the certificate CN=bus-node-2 is not valid before "
                                "2099-06-01T12:30:00Z")


def test_the_console_refuses_a_certificate_it_cannot_read(tmp_path: Path, authority: Authority) -> None:
    _, key = _console_files(tmp_path, authority.issue(name((NameOID.COMMON_NAME, "console")), server=True))
    missing = tmp_path / "missing.pem"
    with pytest.raises(ValueError) as error:
        _settings(missing, key, tmp_path)
    assert str(error.value) == f"console.tls_cert {missing}: cannot read it (No such file or directory)"
    with pytest.raises(ValueError) as error:
        _settings(key, key, tmp_path)  # the key file given for the certificate
    assert str(error.value) == f"console.tls_cert {key}: not a PEM certificate chain"


def test_the_console_accepts_a_valid_certificate(tmp_path: Path, authority: Authority) -> None:
    cert, key = _console_files(tmp_path, authority.issue(name((NameOID.COMMON_NAME, "console")), server=True))
    settings = _settings(cert, key, tmp_path)
    assert settings.tls and settings.tls_cert == str(cert)


def test_python_m_web_exits_2_on_an_expired_certificate(tmp_path: Path, expired: Identity) -> None:
    cert, key = _console_files(tmp_path, expired)
    config = tmp_path / "solution.toml"
    config.write_text(f'[console]\nport = {free_port()}\ndata_dir = "{tmp_path / "data"}"\n'
                      f'tls_cert = "{cert}"\ntls_key = "{key}"\n')
    done = subprocess.run([sys.executable, "-m", "web", "--config", str(config)], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"bad config: console.tls_cert {cert}: the certificate CN=bus-node-1 expired on 2026-01-01T00:00:00Z")
