"""SCRAM derivation, credentials, messages, the client, and the tools' credential formats.

The RFC examples pin both nonces, so every byte each side sends is checked against the RFC's transcript.
"""

from __future__ import annotations

import base64

import pytest

from bus.security.sasl import Authenticated, Challenge, ScramSaslServer
from bus.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramCredentials,
    ScramError,
    ScramMechanism,
    random_salt,
    sasl_name,
    scram_mechanism,
    username_from_sasl_name,
)
from bus.security.scram_client import ScramClient, ScramClientError
from bus.security.scram_formats import parse_add_scram, parse_scram_config
from bus.security.scram_messages import ClientFinal, ClientFirst, ScramMessageError, ServerFinal, ServerFirst

# RFC 7677 section 3 (SCRAM-SHA-256) and RFC 5802 section 5 (SCRAM-SHA-1), user "user", password "pencil".
RFC_7677 = {
    "mechanism": SCRAM_SHA_256,
    "client_nonce": "rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}
RFC_5802 = {
    "mechanism": ScramMechanism("SCRAM-SHA-1", "sha1", 0),  # not a Kafka mechanism: the RFC's example flow only
    "client_nonce": "fyko+d2lbbFgONRv9qkxdawL",
    "server_nonce": "3rfcNHYJY1ZVvWVs7j",
    "salt": "QSXCR+Q6sek8bf92",
    "client_first": b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "server_first": b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "client_final": b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "server_final": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
}


@pytest.mark.parametrize("example", [RFC_7677, RFC_5802], ids=["rfc7677-sha256", "rfc5802-sha1"])
def test_rfc_examples_byte_for_byte(example: dict) -> None:
    mechanism: ScramMechanism = example["mechanism"]
    store = ScramCredentials()
    store.put(mechanism.name, "user",
              ScramCredential.from_password(mechanism, "pencil", 4096, base64.b64decode(example["salt"])))
    server = ScramSaslServer(mechanism, store, server_nonce=lambda: example["server_nonce"])
    client = ScramClient(mechanism, "user", "pencil", nonce=example["client_nonce"])

    assert client.first_message() == example["client_first"]
    challenge = server.evaluate(example["client_first"])
    assert challenge == Challenge(example["server_first"])
    assert client.final_message(example["server_first"]) == example["client_final"]
    outcome = server.evaluate(example["client_final"])
    assert isinstance(outcome, Authenticated)
    assert str(outcome.principal) == "User:user"
    assert outcome.data == example["server_final"]
    client.verify(example["server_final"])


def test_credential_keeps_keys_not_the_password() -> None:
    salt = b"salt-of-the-earth"
    credential = ScramCredential.from_password(SCRAM_SHA_512, "secret", 4096, salt)
    salted = SCRAM_SHA_512.salted_password("secret", salt, 4096)
    assert credential.stored_key == SCRAM_SHA_512.hash(SCRAM_SHA_512.client_key(salted))
    assert credential.server_key == SCRAM_SHA_512.server_key(salted)
    assert len(credential.stored_key) == 64
    assert "secret" not in repr(credential) and repr(credential.stored_key) not in repr(credential)


def test_random_salts_are_kafkas_base36_strings() -> None:
    salts = {random_salt() for _ in range(50)}
    assert len(salts) == 50
    assert all(salt.isalnum() and salt == salt.lower() and 20 <= len(salt) <= 26 for salt in salts)


@pytest.mark.parametrize("username", ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=",
                                      "=="])
def test_sasl_names_round_trip(username: str) -> None:
    """Kafka's ScramFormatterTest.saslName: no `,`, no `=` but the escapes, and back."""
    encoded = sasl_name(username)
    assert "," not in encoded
    assert "=" not in encoded.replace("=2C", "").replace("=3D", "")
    assert username_from_sasl_name(encoded) == username


def test_bad_sasl_name_escape_is_refused() -> None:
    with pytest.raises(ScramError, match="Invalid username"):
        username_from_sasl_name("user=41")


def test_unknown_mechanism() -> None:
    assert scram_mechanism("SCRAM-SHA-512") is SCRAM_SHA_512
    with pytest.raises(ScramError, match="SCRAM-SHA-1 is not supported"):
        scram_mechanism("SCRAM-SHA-1")


class TestMessages:
    def test_client_first_with_authzid_and_extensions(self) -> None:
        first = ClientFirst.parse(b"n,a=bob,n=bob,r=abc,tokenauth=true,other=x=y")
        assert (first.gs2_header, first.authzid, first.saslname, first.nonce) == ("n,a=bob,", "bob", "bob", "abc")
        assert dict(first.extensions) == {"tokenauth": "true", "other": "x=y"}
        assert first.bare == "n=bob,r=abc,tokenauth=true,other=x=y"

    @pytest.mark.parametrize("message", [
        b"y,,n=user,r=abc",  # channel binding flags other than n are not supported (as in Kafka)
        b"p=tls-unique,,n=user,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=user",
        b"n,,n=user,r=a,b",
        b"n,,n=us\xc3\xa9r,r=abc",  # Kafka's grammar is 7-bit
        b"n,,n=user,r=abc\x00",
        b"",
    ])
    def test_malformed_client_first(self, message: bytes) -> None:
        with pytest.raises(ScramMessageError, match="client first"):
            ClientFirst.parse(message)

    def test_server_first_round_trip_and_bounds(self) -> None:
        first = ServerFirst.build("abc123", b"\x00salt", 4096)
        assert ServerFirst.parse(first.text.encode()) == first
        for bad in (b"r=abc,s=c2FsdA==,i=0", b"r=abc,s=c2FsdA=,i=4096", b"r=abc,s=c2FsdA==,i=99999999999",
                    b"s=c2FsdA==,r=abc,i=4096"):
            with pytest.raises(ScramMessageError):
                ServerFirst.parse(bad)

    def test_client_final_keeps_the_signed_part(self) -> None:
        final = ClientFinal.parse(b"c=biws,r=abc,ext=1,p=AAAA")
        assert (final.channel_binding, final.nonce, final.proof) == (b"n,,", "abc", b"\x00\x00\x00")
        assert final.without_proof == "c=biws,r=abc,ext=1"
        for bad in (b"c=biws,r=abc", b"r=abc,c=biws,p=AAAA", b"c=biws,r=abc,p=AAA", b"c=bi ws,r=abc,p=AAAA"):
            with pytest.raises(ScramMessageError):
                ClientFinal.parse(bad)

    def test_server_final(self) -> None:
        assert ServerFinal.parse(b"e=invalid-proof") == ServerFinal(None, "invalid-proof")
        assert ServerFinal.parse(b"v=AAAA").signature == b"\x00\x00\x00"
        with pytest.raises(ScramMessageError):
            ServerFinal.parse(b"x=1")


class TestClient:
    def _first(self, client: ScramClient) -> str:
        return ClientFirst.parse(client.first_message()).nonce

    def test_server_nonce_must_extend_ours(self) -> None:
        client = ScramClient("SCRAM-SHA-256", "user", "pencil")
        self._first(client)
        with pytest.raises(ScramClientError, match="does not start with client nonce"):
            client.final_message(b"r=someone-elses,s=c2FsdA==,i=4096")

    @pytest.mark.parametrize(("iterations", "message"), [(4095, "less than the minimum 4096"),
                                                          (16385, "more than the maximum 16384")])
    def test_iteration_bounds(self, iterations: int, message: str) -> None:
        client = ScramClient("SCRAM-SHA-512", "user", "pencil")
        nonce = self._first(client)
        with pytest.raises(ScramClientError, match=message):
            client.final_message(f"r={nonce}x,s=c2FsdA==,i={iterations}".encode())

    def test_server_error_and_forged_signature(self) -> None:
        for server_final, message in ((b"e=unknown-user", "failed with error: unknown-user"),
                                      (b"v=" + base64.b64encode(bytes(32)), "Invalid server signature"),
                                      (b"garbage", "server final message format")):
            client = ScramClient("SCRAM-SHA-256", "user", "pencil")
            nonce = self._first(client)
            client.final_message(f"r={nonce}x,s=c2FsdA==,i=4096".encode())
            with pytest.raises(ScramClientError, match=message):
                client.verify(server_final)

    def test_steps_out_of_order(self) -> None:
        client = ScramClient("SCRAM-SHA-256", "user", "pencil")
        with pytest.raises(ScramClientError, match="out of order"):
            client.final_message(b"r=x,s=c2FsdA==,i=4096")

    def test_user_name_is_sasl_encoded(self) -> None:
        assert ScramClient("SCRAM-SHA-256", "a,b=c", "pw").first_message().startswith(b"n,,n=a=2Cb=3Dc,r=")


TEST_SALT = base64.b64decode("MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E=")
TEST_SALTED_PASSWORD = base64.b64decode("mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE=")


class TestAddScram:
    """`kafka-storage format --add-scram`: cases from Kafka's ScramParserTest."""

    def test_password_with_defaults(self) -> None:
        parsed = parse_add_scram("SCRAM-SHA-512=[name=scram-admin,password=scram-user-secret]")
        assert (parsed.name, parsed.mechanism, parsed.credential.iterations) == ("scram-admin", SCRAM_SHA_512, 4096)
        expected = ScramCredential.from_password(SCRAM_SHA_512, "scram-user-secret", 4096, parsed.credential.salt)
        assert parsed.credential == expected

    def test_iterations_and_quoted_salt(self) -> None:
        parsed = parse_add_scram('SCRAM-SHA-256=[name=bob,password=my pass,iterations=8192,'
                                 'salt="MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E="]')
        assert parsed.credential == ScramCredential.from_password(SCRAM_SHA_256, "my pass", 8192, TEST_SALT)

    def test_salted_password(self) -> None:
        parsed = parse_add_scram('SCRAM-SHA-512=[name=alice,salt="MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E=",'
                                 'saltedpassword="mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE="]')
        assert parsed.credential == ScramCredential.from_salted_password(SCRAM_SHA_512, TEST_SALT,
                                                                         TEST_SALTED_PASSWORD, 4096)

    @pytest.mark.parametrize(("argument", "message"), [
        ("SCRAM-SHA-512", "Failed to find equals sign in SCRAM argument"),
        ("SCRAM-SHA-UNSUPPORTED=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-UNSUPPORTED is not supported"),
        ("SCRAM-SHA-256=name=a,password=b", "Expected configuration string to start with \\["),
        ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with \\]"),
        ("SCRAM-SHA-256=[password=mypass]", "You must supply 'name' to add-scram"),
        ("SCRAM-SHA-256=[name=bar]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
        ("SCRAM-SHA-256=[name=alice,saltedpassword=\"mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE=\"]",
         "You must supply 'salt' with 'saltedpassword' to add-scram"),
        ("SCRAM-SHA-256=[name=bob,password=mypass,unknown=something,unknown2=somethingelse]",
         "Unknown SCRAM configurations: unknown, unknown2"),
        ("SCRAM-SHA-256=[name=bob,password=mypass,iterations=4095]", "must be >= 4096"),
        ("SCRAM-SHA-256=[name=bob,password=mypass,iterations=16385]", "must be <= 16384"),
        ("SCRAM-SHA-256=[name=bob,password=mypass,iterations=many]", "Failed to parse iterations count: many"),
        ("SCRAM-SHA-256=[name=bob,password=mypass,salt=!!]", "Failed to decode given salt"),
        ("SCRAM-SHA-256=[name=bob,pass,word]", "No equals sign found in a SCRAM component"),
    ])
    def test_errors(self, argument: str, message: str) -> None:
        with pytest.raises(ScramError, match=message) as error:
            parse_add_scram(argument)
        assert "mypass" not in str(error.value)


class TestConfigsValue:
    """A `kafka-configs --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'` value."""

    def test_values(self) -> None:
        parsed = parse_scram_config("SCRAM-SHA-256", "iterations=8192,password=alice-secret")
        assert (parsed.mechanism, parsed.iterations, parsed.password) == (SCRAM_SHA_256, 8192, "alice-secret")
        assert parse_scram_config("SCRAM-SHA-512", "password=a,b=c").password == "a,b=c"
        assert parse_scram_config("SCRAM-SHA-512", "iterations=-1,password=x").iterations == 4096
        assert "alice-secret" not in repr(parsed)

    def test_errors_never_show_the_password(self) -> None:
        for value, message in (("iterations=100,password=alice-secret", "less than the minimum 4096"),
                               ("alice-secret", "expected \\[iterations=N,\\]password=P")):
            with pytest.raises(ScramError, match=message) as error:
                parse_scram_config("SCRAM-SHA-256", value)
            assert "alice-secret" not in str(error.value)
