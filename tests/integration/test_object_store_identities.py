"""One object-store identity per component, enforced by the store itself (SeaweedFS through S3, real process).

Each component's key works for exactly its rights: a camera puts footage but cannot list, read back or delete it;
the video jobs read footage and write synopses; the console reads, and caches transcodes and capture thumbnails only;
nothing but the retention identity deletes (a bucket policy, since S3's "write" includes deleting). The keys live in
0600 files that are made once and kept; the identities file the store reads is 0600 too."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from minio import Minio
from minio.commonconfig import CopySource
from minio.error import S3Error

from contracts import s3_credentials
from contracts.config import Config
from contracts.retention import Retention
from deploy.object_store import ObjectStore

ROOT = Path(__file__).resolve().parents[2]

Check = Callable[[Minio], object]
ACTIONS: dict[str, Check] = {
    "list videos": lambda c: list(c.list_objects("videos", recursive=True)),
    "read videos": lambda c: c.get_object("videos", "cam-1/seed.webm").read(),
    "put videos": lambda c: c.put_object("videos", "cam-1/new.webm", io.BytesIO(b"v"), 1),
    "delete videos": lambda c: c.remove_object("videos", "cam-1/seed.webm"),
    "read synopsis": lambda c: c.get_object("synopsis", "task/seed.webm").read(),
    "put synopsis": lambda c: c.put_object("synopsis", "task/new.webm", io.BytesIO(b"s"), 1),
    "put transcoded copy": lambda c: c.put_object("synopsis", "transcoded/videos/x.webm", io.BytesIO(b"t"), 1),
    "put captures": lambda c: c.put_object("captures", "cp/1.jpg", io.BytesIO(b"j"), 1),
    "read captures": lambda c: c.get_object("captures", "vehicle/seed.jpg").read(),
    "put capture thumbnail": lambda c: c.put_object("captures", "thumbs/vehicle/seed.jpg", io.BytesIO(b"t"), 1),
    "delete synopsis": lambda c: c.remove_object("synopsis", "task/seed.webm"),
    "read evidence": lambda c: c.get_object("evidence", "cam-1/locked.webm").read(),
    "put evidence": lambda c: c.put_object("evidence", "cam-1/new.webm", io.BytesIO(b"e"), 1),
    "copy footage into evidence": lambda c: c.copy_object("evidence", "cam-1/copy.webm",
                                                          CopySource("videos", "cam-1/seed.webm")),
    "delete evidence": lambda c: c.remove_object("evidence", "cam-1/locked.webm"),
}
EVIDENCE = {"read evidence", "put evidence", "copy footage into evidence", "delete evidence"}
ALLOWED: dict[str, set[str]] = {
    "cameras": {"put videos"},
    "simulator": {"put captures", "put capture thumbnail"},
    "video-jobs": {"list videos", "read videos", "read synopsis", "put synopsis", "put transcoded copy"},
    "console": {"list videos", "read videos", "read synopsis", "put transcoded copy", "read captures",
                "put capture thumbnail", *EVIDENCE},
    "mirror": {"list videos", "read videos", "read synopsis", "read evidence", "read captures"},
    "monitor": {"read captures", "list videos", "read videos"},  # its image and footage checks (issue 28)
    # the DR copier reads the images and lists and reads the footage at the primary; it writes only at the DR site's
    # store (tests/dr/test_images)
    "dr-images": {"read captures", "list videos", "read videos"},
    "retention": set(ACTIONS),
    "admin": set(ACTIONS) - {"delete videos", "delete synopsis", "delete evidence"},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with ObjectStore(tmp_path_factory.mktemp("s3"), port=0) as running:
        yield running


def _client(store: ObjectStore, identity: str) -> Minio:
    key = store.credentials(identity)
    return Minio(store.endpoint, access_key=key.access_key, secret_key=key.secret_key, secure=False,
                 region="us-east-1")


def _seed(store: ObjectStore) -> None:
    admin = _client(store, "admin")
    admin.put_object("videos", "cam-1/seed.webm", io.BytesIO(b"footage"), 7)
    admin.put_object("synopsis", "task/seed.webm", io.BytesIO(b"synopsis"), 8)
    admin.put_object("evidence", "cam-1/locked.webm", io.BytesIO(b"locked"), 6)
    admin.put_object("captures", "vehicle/seed.jpg", io.BytesIO(b"jpeg"), 4)


def _allowed(client: Minio, action: str) -> bool:
    try:
        ACTIONS[action](client)
    except S3Error as exc:
        assert exc.code == "AccessDenied", (action, exc)
        return False
    return True


@pytest.mark.parametrize("identity", sorted(ALLOWED))
def test_each_identity_can_do_exactly_its_rights(store: ObjectStore, identity: str) -> None:
    client = _client(store, identity)
    done = set()
    for action in ACTIONS:
        _seed(store)  # a delete allowed before must not hide what the next check reads
        if _allowed(client, action):
            done.add(action)
    assert done == ALLOWED[identity]


def test_rights_match_the_contract_table(store: ObjectStore) -> None:
    assert set(ALLOWED) == set(s3_credentials.RIGHTS)


def test_keys_are_owner_only_files_made_once_and_kept(store: ObjectStore, tmp_path: Path) -> None:
    files = sorted(store.secrets.iterdir())
    assert {f.name for f in files} == {s3_credentials.file_name(name) for name in s3_credentials.RIGHTS}
    for path in [*files, store.data_dir / "s3-identities.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert s3_credentials.ensure_files(store.secrets) == store.keys  # made once: a restart keeps them
    keys = {name: key.secret_key for name, key in store.keys.items()}
    assert len(set(keys.values())) == len(keys)  # every identity its own secret
    log = store.log_path.read_text(errors="replace")
    assert not any(secret in log for secret in keys.values())
    assert not any(secret in " ".join(store.command()) for secret in keys.values())  # never on the command line


def test_a_key_file_open_to_others_or_malformed_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "s3-console.env"
    s3_credentials.write_file(path, s3_credentials.Credentials("ak", "sk-secret"))
    assert s3_credentials.read_file(path) == s3_credentials.Credentials("ak", "sk-secret")
    os.chmod(path, 0o644)
    with pytest.raises(s3_credentials.CredentialsError, match="open to other users"):
        s3_credentials.read_file(path)
    os.chmod(path, 0o600)
    path.write_text("AWS_ACCESS_KEY_ID=only-half\n")
    with pytest.raises(s3_credentials.CredentialsError, match="AWS_SECRET_ACCESS_KEY"):
        s3_credentials.read_file(path)


def test_a_component_finds_its_key_by_flag_environment_directory_or_config(tmp_path: Path) -> None:
    from contracts.config import Config

    s3_credentials.ensure_files(tmp_path)
    console = s3_credentials.read_file(tmp_path / "s3-console.env")
    flag = tmp_path / "s3-cameras.env"
    config = Config({"object_storage": {"credentials_dir": str(tmp_path)}})
    assert s3_credentials.resolve(config, "console", None, {}) == console
    assert s3_credentials.resolve(config, "console", flag, {}) == s3_credentials.read_file(flag)
    env = {"AWS_ACCESS_KEY_ID": "env-ak", "AWS_SECRET_ACCESS_KEY": "env-sk"}
    assert s3_credentials.resolve(config, "console", None, env) == s3_credentials.Credentials("env-ak", "env-sk")
    inline = Config({"object_storage": {"access_key": "t-ak", "secret_key": "t-sk"}})
    assert s3_credentials.resolve(inline, "console", None, {}) == s3_credentials.Credentials("t-ak", "t-sk")
    with pytest.raises(s3_credentials.MissingCredentials, match="no object-store key for console"):
        s3_credentials.resolve(Config({}), "console", None, {})


def test_each_bucket_expires_its_objects_after_the_configured_days(store: ObjectStore) -> None:
    """The lifecycle rules the store holds, read back through S3: footage and synopses after 30 days, capture images
    with their records (90); the `retention` key's bucket policy is what may delete before that. The evidence bucket
    has no rule: what is locked as evidence stays until an admin unlocks it."""
    client = store.client()
    assert "evidence" in store.buckets and client.get_bucket_lifecycle("evidence") is None
    rules = {bucket: client.get_bucket_lifecycle(bucket).rules  # type: ignore[union-attr]
             for bucket in store.buckets if bucket != "evidence"}
    assert {bucket: [(r.rule_id, r.status, r.expiration.days) for r in found]  # type: ignore[union-attr]
            for bucket, found in rules.items()} == {
        "videos": [("retention", "Enabled", 30)], "synopsis": [("retention", "Enabled", 30)],
        "captures": [("retention", "Enabled", 90)]}


def test_retention_days_reach_the_buckets_and_bad_ones_are_refused(tmp_path: Path) -> None:
    config = Config({"retention": {"videos_days": 7, "synopsis_days": 0.5, "captures_days": 2}}, None)
    assert Retention.from_config(config).bucket_days() == {"videos": 7, "synopsis": 1, "captures": 2}
    with pytest.raises(ValueError, match=r"retention\.videos_days"):
        Retention.from_config(Config({"retention": {"videos_days": 0}}, None))
    shown = subprocess.run([sys.executable, "-m", "deploy.retention", "--show"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "mc ilm rule add --expire-days 30 <alias>/videos" in shown, shown
