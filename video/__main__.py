"""Camera uploads: ``python -m video upload --camera ID [--start ISO] FILE...``.

Each file goes to the ``videos`` bucket under ``CAMERA/YYYY/MM/DD/HHMMSS_name`` (multipart above
``--part-size``, content type from the name) with a progress bar. Every file is checked before the
first byte leaves (it exists, it decodes as video, the camera id is usable), so a typo in the last
argument does not leave half a batch uploaded. The start time is ``--start`` for the first file and
each next file starts where the previous one ended (a camera's consecutive segments); without
``--start`` a file's modification time minus its duration (when the recording began).

Exit codes: 0 all uploaded, 2 bad input (nothing uploaded), 3 object store unreachable or refusing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

import urllib3
from minio.error import S3Error
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

from contracts.config import Config, add_config_flag, preparse_config
from contracts.s3_credentials import CredentialsError
from video import storage
from video.analyze import VideoError, VideoInfo, probe
from video.store_flags import StoreUnreachable, add_store_flags, store_client

CAMERA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
EXIT_BAD_INPUT = 2
EXIT_STORE = 3


class BadInput(ValueError):
    """An argument that makes the whole batch pointless (reported before anything is uploaded)."""


class _Bar:
    """minio's progress protocol (``set_meta``, ``update``) onto one rich task."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress, self.task = progress, task

    def set_meta(self, object_name: str, total_length: int) -> None:
        self.progress.update(self.task, total=total_length, description=object_name)

    def update(self, length: int) -> None:
        self.progress.advance(self.task, length)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m video", description="Video tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    upload = commands.add_parser("upload", help="upload camera recordings to the videos bucket")
    add_config_flag(upload)
    add_store_flags(upload, config)
    upload.add_argument("--camera", required=True, help="camera id (letters, digits, . _ : -)")
    upload.add_argument("--start", type=dt.datetime.fromisoformat, default=None,
                        help="ISO start time of the first file (default: from each file's mtime)")
    upload.add_argument("--part-size", type=int, default=storage.PART_SIZE // 2**20,
                        help="multipart part size in MiB (S3's minimum is 5)")
    upload.add_argument("--quiet", action="store_true", help="no progress bar")
    upload.add_argument("files", nargs="+", type=Path)
    return parser.parse_args(argv), config


def check(args: argparse.Namespace) -> list[tuple[Path, VideoInfo]]:
    if not CAMERA_ID.match(args.camera):
        raise BadInput(f"bad camera id {args.camera!r}: 1-64 letters, digits, '.', '_', ':' or '-'")
    if args.part_size < 5:
        raise BadInput(f"--part-size {args.part_size} MiB is below S3's 5 MiB minimum")
    checked = []
    for path in args.files:
        if not path.is_file():
            raise BadInput(f"no such file: {path}")
        try:
            checked.append((path, probe(path)))
        except VideoError as exc:
            raise BadInput(f"{path}: {exc}") from None
    return checked


def start_times(files: list[tuple[Path, VideoInfo]], start: dt.datetime | None) -> list[dt.datetime]:
    if start is None:
        return [dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC) - dt.timedelta(seconds=info.frames / info.fps)
                for path, info in files]
    start = start if start.tzinfo else start.replace(tzinfo=dt.UTC)
    times = []
    for _, info in files:
        times.append(start)
        start += dt.timedelta(seconds=info.frames / info.fps)
    return times


def upload(args: argparse.Namespace, config: Config, err: Console) -> int:
    """Progress and errors go to ``err`` (stderr); each stored object's s3:// URL to stdout, so a
    script can collect them and knows which files made it when the store fails half way."""
    try:
        files = check(args)
    except BadInput as exc:
        err.print(f"[red]error:[/] {exc}")
        return EXIT_BAD_INPUT
    try:
        client = store_client(args, config)
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=err, disable=args.quiet) as progress:
            for (path, _), start in zip(files, start_times(files, args.start), strict=True):
                bar = _Bar(progress, progress.add_task(path.name, total=path.stat().st_size))
                video = storage.upload_video(client, path, args.camera, start, bucket=args.bucket,
                                             part_size=args.part_size * 2**20, progress=bar)
                print(video.url, flush=True)
    except (StoreUnreachable, CredentialsError) as exc:
        err.print(f"[red]error:[/] {exc}")
        return EXIT_STORE
    except S3Error as exc:
        err.print(f"[red]error:[/] object store refused: {exc.code}: {exc.message}")
        return EXIT_STORE
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        err.print(f"[red]error:[/] object store at {args.endpoint} failed during the upload: {type(exc).__name__}")
        return EXIT_STORE
    return 0


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    return upload(args, config, Console(stderr=True, highlight=False, soft_wrap=True))


if __name__ == "__main__":
    sys.exit(main())
