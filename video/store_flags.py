"""The object-store flags the video command-line tools share (``python -m video upload``, ``python -m
video.cameras``): defaults from ``[object_storage]`` of the solution config, flags override, and a
client that gives up on a dead endpoint within seconds (the SDK's default retries for minutes, which a
person at a terminal or a camera's schedule cannot wait for).
"""

from __future__ import annotations

import argparse

import urllib3
from minio import Minio

from contracts import s3_credentials
from contracts.config import Config
from video import storage

TIMEOUT_S = 10.0


class StoreUnreachable(RuntimeError):
    """The object store did not answer (wrong endpoint, not started, network down)."""


def add_store_flags(parser: argparse.ArgumentParser, config: Config) -> None:
    s3_credentials.add_store_flags(parser, config, "cameras")
    parser.add_argument("--bucket", default=storage.VIDEOS_BUCKET)


def store_client(args: argparse.Namespace, config: Config, component: str = "cameras") -> Minio:
    """A client with ``component``'s key, short timeouts and one retry; :class:`StoreUnreachable` when nobody
    answers; ``contracts.s3_credentials.CredentialsError`` when no usable key is found."""
    key = s3_credentials.resolve(config, component, args.s3_credentials)
    return _client(args.endpoint, key, args.bucket)


def dr_store_client(args: argparse.Namespace, config: Config, component: str = "cameras") -> Minio | None:
    """The same at the DR site's store (``--dr-endpoint``, ``--dr-s3-credentials``), for a device that follows the
    active site; None when there is no DR store or no key there."""
    key = s3_credentials.resolve_dr(config, component, args.dr_s3_credentials)
    return None if key is None or not args.dr_endpoint else _client(args.dr_endpoint, key, args.bucket)


def _client(endpoint: str, key: s3_credentials.Credentials, bucket: str) -> Minio:
    http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=TIMEOUT_S, read=60.0),
                               retries=urllib3.Retry(total=1, backoff_factor=0.2))
    client = storage.connect(endpoint, key.access_key, key.secret_key, http_client=http)
    try:
        storage.ensure_bucket(client, bucket)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise StoreUnreachable(f"object store at {endpoint} unreachable: {type(exc).__name__}") from None
    return client
