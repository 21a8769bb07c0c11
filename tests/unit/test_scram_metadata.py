"""SCRAM credentials as metadata (KIP-554): the records, the image, snapshots, the controller's checks of
AlterUserScramCredentials (Kafka's ScramControlManager), the error answers, and `bus storage format --add-scram`
giving a new node its first users."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode

from bus.broker.broker import Broker
from bus.cli import main
from bus.config.broker import load_broker_config
from bus.controller.bootstrap import BOOTSTRAP_FILE
from bus.controller.controller import ControllerError, QuorumController, ScramUpsertion
from bus.controller.image import (
    ImageScramCredentials,
    MetadataImage,
    remove_scram_credential_record,
    scram_credential_record,
    snapshot_records,
)
from bus.controller.metadata_log.local_file import MetadataLog
from bus.protocol.error_response import error_response
from bus.protocol.messages import response_class, shapes
from bus.security.sasl import Authenticated, Challenge, ScramSaslServer
from bus.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from bus.security.scram_client import ScramClient

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SHA_256, SHA_512 = 1, 2  # AlterUserScramCredentials' mechanism types


def _upsertion(name: str, password: str, mechanism: int = SHA_256, iterations: int = 4096,
               salt: bytes = b"salt") -> ScramUpsertion:
    """What an AdminClient sends: the password salted client-side, never the password."""
    hash_name = "sha256" if mechanism == SHA_256 else "sha512"
    return ScramUpsertion(name, mechanism, iterations, salt,
                          hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations))


def _logs_in(store: ImageScramCredentials, mechanism: str, user: str, password: str) -> bool:
    server = ScramSaslServer(SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else SCRAM_SHA_512, store)
    client = ScramClient(mechanism, user, password)
    first = server.evaluate(client.first_message())
    if not isinstance(first, Challenge):
        return False
    return isinstance(server.evaluate(client.final_message(first.data)), Authenticated)


@pytest.fixture
def controller(tmp_path: Path) -> QuorumController:
    return QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1, default_replication_factor=1)


# -- records and image ------------------------------------------------------------------------------------------


def test_records_apply_snapshot_copy_and_replace() -> None:
    alice = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", 8192)
    bob = ScramCredential.from_password(SCRAM_SHA_256, "bob-secret", 4096)
    image = MetadataImage()
    for record in (scram_credential_record("alice", "SCRAM-SHA-512", alice),
                   scram_credential_record("bob", "SCRAM-SHA-256", bob),
                   scram_credential_record("bob", "SCRAM-SHA-512", alice),
                   remove_scram_credential_record("bob", "SCRAM-SHA-512")):
        image.apply(json.loads(json.dumps(record)))  # as the log stores it
    assert image.scram_credentials == {("SCRAM-SHA-512", "alice"): alice, ("SCRAM-SHA-256", "bob"): bob}
    copy = image.copy()
    image.apply(remove_scram_credential_record("alice", "SCRAM-SHA-512"))
    assert ("SCRAM-SHA-512", "alice") in copy.scram_credentials  # the copy a snapshot is made of stays
    rebuilt = MetadataImage()
    for record in snapshot_records(copy):
        rebuilt.apply(record)
    assert rebuilt.scram_credentials == copy.scram_credentials
    store = ImageScramCredentials(lambda: image)
    image.replace_with(rebuilt)  # a snapshot from the leader: the store reads the new credentials
    assert store.get("SCRAM-SHA-512", "alice") == alice


def test_a_record_holds_keys_and_salt_never_the_password() -> None:
    record = scram_credential_record("alice", "SCRAM-SHA-256",
                                     ScramCredential.from_password(SCRAM_SHA_256, "alice-secret", 4096))
    assert set(record) == {"type", "name", "mechanism", "salt", "stored_key", "server_key", "iterations"}
    assert "alice-secret" not in json.dumps(record)


# -- the controller (Kafka's ScramControlManager) ---------------------------------------------------------------


def test_upserted_credentials_log_in_and_survive_a_reopen(controller: QuorumController, tmp_path: Path) -> None:
    results = controller.alter_user_scram_credentials([], [_upsertion("alice", "alice-secret"),
                                                           _upsertion("bob", "bob-secret", SHA_512, 8192)])
    assert results == [("alice", None), ("bob", None)]
    store = ImageScramCredentials(lambda: controller.image)
    assert _logs_in(store, "SCRAM-SHA-256", "alice", "alice-secret")
    assert not _logs_in(store, "SCRAM-SHA-256", "alice", "bob-secret")
    assert _logs_in(store, "SCRAM-SHA-512", "bob", "bob-secret")
    assert "alice-secret" not in (tmp_path / "__cluster_metadata-0" / "metadata.log").read_text()
    controller.log.close()
    reopened = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1, default_replication_factor=1)
    assert _logs_in(ImageScramCredentials(lambda: reopened.image), "SCRAM-SHA-512", "bob", "bob-secret")


def test_deletion_and_kafkas_refusals(controller: QuorumController) -> None:
    controller.alter_user_scram_credentials([], [_upsertion("alice", "pw"), _upsertion("carol", "pw")])
    results = dict(controller.alter_user_scram_credentials(
        [("alice", SHA_256), ("bob", SHA_256), ("", SHA_256), ("dave", 7), ("carol", SHA_256)],
        [_upsertion("carol", "pw2"), _upsertion("erin", "pw", iterations=4095),
         _upsertion("fred", "pw", iterations=16385), _upsertion("gina", "pw", mechanism=0)]))

    def refused(user: str) -> tuple[ErrorCode, str]:
        error = results[user]
        assert isinstance(error, ControllerError)
        return error.code, error.message

    assert results["alice"] is None
    assert refused("bob") == (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    assert refused("") == (ErrorCode.unacceptable_credential, "Username must not be empty")
    assert refused("dave") == (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    assert refused("carol") == (ErrorCode.duplicate_resource,
                                "A user credential cannot be altered twice in the same request")
    assert refused("erin") == (ErrorCode.unacceptable_credential, "Too few iterations")
    assert refused("fred") == (ErrorCode.unacceptable_credential, "Too many iterations")
    assert refused("gina")[0] == ErrorCode.unsupported_sasl_mechanism
    assert set(controller.image.scram_credentials) == {("SCRAM-SHA-256", "carol")}  # alice deleted, carol unchanged


def test_one_user_twice_is_refused_even_for_two_mechanisms(controller: QuorumController) -> None:
    """Kafka refuses any second change of a user in one request: an AdminClient sends one request per user."""
    [(user, error)] = controller.alter_user_scram_credentials(
        [], [_upsertion("alice", "pw", SHA_256), _upsertion("alice", "pw", SHA_512)])
    assert user == "alice" and isinstance(error, ControllerError) and error.code == ErrorCode.duplicate_resource
    assert controller.image.scram_credentials == {}


# -- error answers ----------------------------------------------------------------------------------------------


def test_error_answers_name_every_user_as_kafka_builds_them() -> None:
    alter = AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion(name="bob", mechanism=1),),
        upsertions=(ScramCredentialUpsertion(name="alice", mechanism=1, iterations=4096, salt=b"s",
                                             salted_password=b"p"),
                    ScramCredentialUpsertion(name="bob", mechanism=2, iterations=4096, salt=b"s",
                                             salted_password=b"p")))
    answer = error_response(shapes(51, 0), response_class(51, 0), alter, ErrorCode.not_controller)
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.not_controller),
                                                                ("bob", ErrorCode.not_controller)]
    describe = DescribeUserScramCredentialsRequest(users=(UserName(name="alice"),))
    answer = error_response(shapes(50, 0), response_class(50, 0), describe, ErrorCode.cluster_authorization_failed)
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.cluster_authorization_failed)]


# -- bus storage format -----------------------------------------------------------------------------------------


def _node(tmp_path: Path, voters: str) -> tuple[Path, dict[str, str]]:
    props = {"node.id": "1", "log.dirs": str(tmp_path / "data"), "log.cleaner.enable": "false",
             "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "controller.quorum.voters": voters}
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    return path, props


@pytest.mark.parametrize("voters", ["", "1@127.0.0.1:1"], ids=["no-quorum", "lone-voter"])
def test_format_with_add_scram_gives_the_first_start_its_users(tmp_path: Path, voters: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, props = _node(tmp_path, voters)
    assert main(["storage", "format", "--config", str(path), "--cluster-id", CLUSTER_ID,
                 "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
                 "-S", 'SCRAM-SHA-512=[name=alice,iterations=8192,password="alice-secret"]']) == 0
    assert "Formatting metadata directory" in capsys.readouterr().out
    assert "admin-secret" not in (tmp_path / "data" / BOOTSTRAP_FILE).read_text()
    broker = Broker(load_broker_config(props))
    try:
        assert broker.cluster_id == CLUSTER_ID
        store = ImageScramCredentials(lambda: broker.controller.image)
        assert _logs_in(store, "SCRAM-SHA-256", "admin", "admin-secret")
        assert _logs_in(store, "SCRAM-SHA-512", "alice", "alice-secret")
        assert broker.controller.image.scram_credentials[("SCRAM-SHA-512", "alice")].iterations == 8192
    finally:
        broker.logs.close()
        broker.metadata_log.close()


def test_format_refuses_a_formatted_dir_unless_told_to_ignore_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path, _props = _node(tmp_path, "")
    args = ["storage", "format", "-c", str(path), "-t", CLUSTER_ID]
    assert main(args) == 0
    assert main(args) == 1
    assert "is already formatted. Use --ignore-formatted" in capsys.readouterr().err
    assert main([*args, "--ignore-formatted"]) == 0
    assert "All of the log directories are already formatted." in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "message"), [
    (["-t", "not-a-uuid"], "does not appear to be a valid UUID"),
    (["-t", CLUSTER_ID, "-S", "SCRAM-SHA-1=[name=a,password=b]"], "mechanism SCRAM-SHA-1 is not supported"),
    (["-t", CLUSTER_ID, "-S", "SCRAM-SHA-256=[name=a,password=b,iterations=10]"], "must be >= 4096"),
    (["-t", CLUSTER_ID, "-S", "SCRAM-SHA-256=[password=b]"], "You must supply 'name'"),
])
def test_format_refuses_bad_arguments_without_writing(tmp_path: Path, extra: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, _props = _node(tmp_path, "")
    assert main(["storage", "format", "-c", str(path), *extra]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_random_uuid_is_a_valid_cluster_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["storage", "random-uuid"]) == 0
    cluster_id = capsys.readouterr().out.strip()
    path, _props = _node(tmp_path, "")
    assert main(["storage", "format", "-c", str(path), "-t", cluster_id]) == 0


def test_a_random_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """One id in 64 began with "-", and `--cluster-id -Ab...` is a flag to argparse (CI: `bus storage format`
    exited 1, "expected one argument"). As Kafka's Uuid.randomUuid, such a draw is made again."""
    import uuid

    from bus.config.broker import random_cluster_id

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])  # the first encodes to "-A..."
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert random_cluster_id() == "AQEBAQEBAQEBAQEBAQEBAQ"
