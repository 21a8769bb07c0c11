"""Object-store identities: one key per component, each with only the rights it needs, kept in files, never argv.

| component | may | why |
|---|---|---|
| ``cameras`` | put into ``videos`` | they upload footage and never read it back |
| ``simulator`` | put into ``captures`` | capture devices upload their images |
| ``video-jobs`` | read and list ``videos``; read, list and put ``synopsis`` | Spark's video jobs condense footage |
| ``console`` | read and list every bucket; put under ``synopsis/transcoded/``; | pages play footage (a copy the |
| | put under ``captures/thumbs/``; | browser can play is cached under that prefix); |
| | put (copy) and delete in ``evidence`` | pages show capture thumbnails, made once and cached there |
| | | (never the devices' own images, which it only reads); |
| | | an evidence lock copies footage, an admin's unlock removes the copy |
| ``mirror`` | read and list every bucket | the DR site's copy |
| ``monitor`` | read ``captures``, read and list ``videos`` | it decodes a sample of capture images to find devices |
| | | whose images are missing, truncated or black, and of the cameras' footage to find |
| | | cameras that stop uploading or record frozen, black or blurred video (issue 28) |
| ``dr-images`` | read ``captures`` (no list); at the DR site's store: read and put ``captures`` | the DR image copier |
| | | (issue 28): it reads at the primary only the images the mirrored records name (GET by key, never a |
| | | listing, never another bucket), and at the DR site checks (HEAD) and puts them under the same key |
| ``retention`` | read, list, put and delete in every bucket | the only component that deletes (retention) |
| ``admin`` | everything | the store's own wrapper: buckets and their policies |

The DR site's object store (``deploy/dr_site.py``) has the same identities with keys of its own, and the same rights
but for those :data:`DR_SITE_RIGHTS` changes (:func:`site_rights`): only there may ``dr-images`` write, so its
primary-site key cannot alter a device's image, and its DR-site key opens nothing at the primary.

The rights are SeaweedFS's identity actions (``Write:videos/*``), which the store enforces; S3's "write" includes
deleting, so every bucket also gets a policy that refuses ``s3:DeleteObject`` to every user but ``retention`` (and, in
the ``evidence`` bucket only, ``console``). ``evidence`` holds footage locked as evidence and has no lifecycle rule
(``contracts.retention.Retention.bucket_days`` does not name it): its objects stay until an admin unlocks them.

A component's key is a file ``s3-<component>.env`` with AWS's variable names (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``), mode 0600, in the secrets directory (``make up``: ``DATA/secrets``). A process finds
its key, in order: the file its ``--s3-credentials`` flag names; ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
in its environment; ``s3-<component>.env`` in ``[object_storage] credentials_dir``; ``access_key`` /
``secret_key`` written into the config itself (a test's generated config; never a tracked file).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

EVIDENCE_BUCKET = "evidence"
BUCKETS = ("videos", "synopsis", "captures", EVIDENCE_BUCKET)
ALL = tuple(f"{right}:{bucket}" for bucket in BUCKETS for right in ("Read", "List"))
RIGHTS: dict[str, tuple[str, ...]] = {
    "admin": ("Admin", "Read", "Write", "List", "Tagging"),
    "cameras": ("Write:videos/*",),
    "simulator": ("Write:captures/*",),
    "video-jobs": ("Read:videos", "List:videos", "Read:synopsis", "List:synopsis", "Write:synopsis/*"),
    "console": (*ALL, "Write:synopsis/transcoded/*", "Write:captures/thumbs/*", f"Write:{EVIDENCE_BUCKET}/*"),
    "mirror": ALL,
    # reads the capture images its sampled records name, lists and reads the cameras' footage; never writes
    "monitor": ("Read:captures", "Read:videos", "List:videos"),
    # the DR image copier: at the primary, GET of the images the mirrored records name, and the listing and GET of
    # the cameras' footage it copies too; it writes at the DR site only
    "dr-images": ("Read:captures", "Read:videos", "List:videos"),
    "retention": (*ALL, *(f"Write:{bucket}" for bucket in BUCKETS)),
}
DR_SITE_RIGHTS: dict[str, tuple[str, ...]] = {
    # HEAD (is it there already?) and PUT under the same key; no listing, no other bucket; deleting is refused by
    # the bucket policy as everywhere
    "dr-images": ("Read:captures", "Write:captures/*", "Read:videos", "Write:videos/*"),
}
"""The identities whose rights differ at the DR site's object store."""
SITES = ("primary", "dr")
COMPONENTS = tuple(name for name in RIGHTS if name != "admin")
DELETER = "retention"
DELETERS: dict[str, tuple[str, ...]] = {EVIDENCE_BUCKET: (DELETER, "console")}
"""The identities that may delete in a bucket where not only ``DELETER`` may."""
ACCESS_KEY_VAR, SECRET_KEY_VAR = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"


class CredentialsError(ValueError):
    """No key for a component, or a key file that is malformed or readable by others."""


class MissingCredentials(CredentialsError):
    """Nothing names a key for the component (a service that can run without the store may go on without)."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)


def file_name(component: str) -> str:
    return f"s3-{component}.env"


def read_file(path: Path) -> Credentials:
    """The key in an env file; refused when the file is readable or writable by anyone but its owner."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise CredentialsError(f"cannot read object-store credentials {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(f"{path} is open to other users (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, value = line.split("=", 1)
            values[name.strip()] = value.strip().strip('"').strip("'")
    if not values.get(ACCESS_KEY_VAR) or not values.get(SECRET_KEY_VAR):
        raise CredentialsError(f"{path} should set {ACCESS_KEY_VAR} and {SECRET_KEY_VAR}")
    return Credentials(values[ACCESS_KEY_VAR], values[SECRET_KEY_VAR])


def write_file(path: Path, credentials: Credentials) -> None:
    """Write an env file readable by its owner only (created 0600, never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pending = path.with_suffix(".new")
    pending.unlink(missing_ok=True)
    fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{ACCESS_KEY_VAR}={credentials.access_key}\n{SECRET_KEY_VAR}={credentials.secret_key}\n")
    pending.rename(path)


def ensure_files(directory: Path) -> dict[str, Credentials]:
    """Every identity's key in ``directory``, made (random) for those that have none yet."""
    found: dict[str, Credentials] = {}
    for name in RIGHTS:
        path = directory / file_name(name)
        if not path.exists():
            write_file(path, Credentials(f"{name}-{secrets.token_hex(6)}", secrets.token_urlsafe(30)))
        found[name] = read_file(path)
    return found


def site_rights(site: str = "primary") -> dict[str, tuple[str, ...]]:
    """Each identity's rights at the store of ``site`` (``primary`` or ``dr``)."""
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}: one of {', '.join(SITES)}")
    return {**RIGHTS, **DR_SITE_RIGHTS} if site == "dr" else dict(RIGHTS)


def identities(keys: Mapping[str, Credentials], site: str = "primary") -> dict[str, object]:
    """SeaweedFS's S3 identities file: each identity with its key and its rights (at the store of ``site``)."""
    rights = site_rights(site)
    return {"identities": [{"name": name, "credentials": [{"accessKey": c.access_key, "secretKey": c.secret_key}],
                            "actions": list(rights[name])} for name, c in keys.items()]}


def delete_policy(bucket: str) -> str:
    """The bucket policy that refuses deleting to everyone but the retention identity (S3 "write" includes it), and
    in the evidence bucket to everyone but retention and the console (an admin's unlock removes the copy)."""
    deleters = DELETERS.get(bucket)
    sid = "OnlyRetentionDeletes" if deleters is None else "OnlyRetentionAndConsoleDelete"
    allowed: str | list[str] = DELETER if deleters is None else list(deleters)
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": sid, "Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject"],
        "Resource": [f"arn:aws:s3:::{bucket}/*"],
        "Condition": {"StringNotEquals": {"aws:username": allowed}}}]})


def add_store_flags(parser: argparse.ArgumentParser, config: Config, component: str) -> None:
    """``--endpoint`` and ``--s3-credentials``, as every command-line client of the store takes them: defaults from
    ``[object_storage]``, the key found by :func:`resolve` as ``component`` when the flag is not given."""
    parser.add_argument("--endpoint", default=config.get("object_storage", "endpoint", "127.0.0.1:9000"),
                        help="S3 endpoint (host:port or URL); default [object_storage] endpoint")
    parser.add_argument("--s3-credentials", type=Path, default=None,
                        help=f"the object-store key, an env file with {ACCESS_KEY_VAR} and {SECRET_KEY_VAR} (make up: "
                             f"DATA/secrets/{file_name(component)}); default: those variables in the environment, "
                             f"else [object_storage] credentials_dir/{file_name(component)}")


DR_KEYS = "dr-object-store"
"""The DR site's store's keys: this directory beside the primary's (make up: ``DATA/secrets/dr-object-store``)."""


def add_dr_store_flags(parser: argparse.ArgumentParser, config: Config, component: str) -> None:
    """``--dr-endpoint`` and ``--dr-s3-credentials``: the DR site's store, where a device that follows the active
    site (``[site]``) puts its objects while the DR site runs the business; defaults ``[dr] s3_endpoint`` and the
    key :func:`resolve_dr` finds."""
    parser.add_argument("--dr-endpoint", default=str(config.get("dr", "s3_endpoint", "")) or None,
                        help="the DR site's S3 endpoint; default [dr] s3_endpoint")
    parser.add_argument("--dr-s3-credentials", type=Path, default=None,
                        help=f"the key at the DR site's store (make up: DATA/secrets/{DR_KEYS}/"
                             f"{file_name(component)}); default [object_storage] credentials_dir/{DR_KEYS}/"
                             f"{file_name(component)}")


def resolve_dr(config: Config, component: str, flag: Path | None = None) -> Credentials | None:
    """``component``'s key at the DR site's store: its flag's file, else the file under the credentials directory's
    :data:`DR_KEYS`; None when there is none (no DR site's store to follow the business to)."""
    if flag is not None:
        return read_file(flag)
    directory = config.section("object_storage").get("credentials_dir")
    path = Path(directory) / DR_KEYS / file_name(component) if isinstance(directory, str) and directory else None
    return read_file(path) if path is not None and path.exists() else None


def resolve(config: Config, component: str, flag: Path | None = None,
            environ: Mapping[str, str] | None = None) -> Credentials:
    """``component``'s key from its flag's file, the environment, the config's credentials_dir, or the config."""
    if flag is not None:
        return read_file(flag)
    env = os.environ if environ is None else environ
    if env.get(ACCESS_KEY_VAR) and env.get(SECRET_KEY_VAR):
        return Credentials(env[ACCESS_KEY_VAR], env[SECRET_KEY_VAR])
    section = config.section("object_storage")
    directory = section.get("credentials_dir")
    if isinstance(directory, str) and directory:
        path = Path(directory) / file_name(component)
        if path.exists():
            return read_file(path)
    access_key, secret_key = section.get("access_key"), section.get("secret_key")
    if isinstance(access_key, str) and isinstance(secret_key, str) and access_key and secret_key:
        return Credentials(access_key, secret_key)
    where = f"{directory or '[object_storage] credentials_dir'}/{file_name(component)}"
    raise MissingCredentials(f"no object-store key for {component}: give --s3-credentials FILE, set {ACCESS_KEY_VAR} "
                           f"and {SECRET_KEY_VAR}, or create {where} (make up writes it)")
