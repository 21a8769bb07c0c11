"""The console's settings: read once from the solution config at start, then passed down."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509

from contracts import bus_client, s3_credentials
from contracts.config import Config
from contracts.deployment_map import map_path
from contracts.hbase import HBaseClient
from contracts.retention import Retention
from contracts.topics import Topics
from monitoring.config import console_alertmanager_url
from web.site import SiteSettings

PRINCIPAL = "console"
"""The console's bus identity (``contracts.bus_client``): its clients and the audit loader it runs log in as it."""
_PLAINTEXT = {"bootstrap.servers": "127.0.0.1:9092"}


@dataclass(frozen=True)
class ConsoleSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    url: str = "http://127.0.0.1:8000"
    data_dir: Path = Path("data/console")
    """Where the console keeps its signing key and the first admin's password file."""
    token_ttl_s: int = 3600
    """Lifetime of an API bearer token."""
    session_ttl_s: int = 8 * 3600
    """Lifetime of a page session (one operator's shift)."""
    bus: dict[str, str] = field(default_factory=lambda: dict(_PLAINTEXT), repr=False)
    """The console's bus client settings in librdkafka's keys (``bus_client.librdkafka``), which every
    confluent-kafka client of the console starts from. They may hold its password: never logged."""
    bus_java: dict[str, str] = field(default_factory=lambda: dict(_PLAINTEXT), repr=False)
    """The same settings in Kafka's (Java) keys, for the bus package's own wire client (``services.log_dirs``)."""
    hbase: HBaseClient = field(default_factory=HBaseClient)
    """How the console reaches HBase's Thrift server (``[hbase]``: address, transport, protocol)."""
    hbase_pool_size: int = 8
    s3_endpoint: str = "127.0.0.1:9000"
    s3_access_key: str = ""
    s3_secret_key: str = ""
    backend_timeout_s: float = 3.0
    """How long a request waits for a backend before answering 503 with its name."""
    map_path: Path = Path("data/deployment_map.json")
    lag_sample_interval_s: float = 30.0
    """How often the console records every consumer group's lag (kept in HBase for the lag charts)."""
    topics: Topics = field(default_factory=Topics)
    site: SiteSettings = field(default_factory=SiteSettings)
    """``[site]``: the site this console runs at and each site's console (none: a solution without a DR site)."""
    dr: dict[str, object] = field(default_factory=dict)
    """The ``[dr]`` section as it is (the DR page reads the mirror's metrics port and the drill reports dir)."""
    dr_bus: dict[str, str] = field(default_factory=lambda: {"bootstrap.servers": "127.0.0.1:19092"}, repr=False)
    """The console's client settings for the DR site's bus (librdkafka's keys, ``[dr] client_properties_dir``): the
    DR page reads the mirror's checkpoints there. They may hold its password: never logged."""
    prometheus_url: str = ""
    """Prometheus's address, linked from the monitoring page ("": no link). ``[prometheus] url``; `make up
    PROMETHEUS=1` passes the one it starts (``--prometheus-url``)."""
    alertmanager_url: str = ""
    """A real Alertmanager's base address: the alerts page reads its ``/api/v2/alerts`` ("" : the monitor's own
    book in HBase). ``[console] alertmanager_url``, else the monitor's first ``type = "alertmanager"`` receiver."""
    max_transcodes: int = 2
    """Video transcodes the console runs at once (``/api/v1/video/playable`` answers 429 beyond)."""
    max_transcodes_per_user: int = 1
    """Transcodes one user may have running at once."""
    max_image_bytes: int = 5 * 1024 * 1024
    """The largest capture image the console reads and decodes (``/api/v1/captures/{kind}/{id}/image`` answers 413
    for a larger object without reading it): a device's upload is untrusted, and a 640x360 capture is ~30 KB."""
    thumbnail_width: int = 240
    """Width in pixels of the thumbnails list pages show (made once per image and cached in the store)."""
    session_recheck_s: float = 5.0
    """How often a live event stream re-checks its session or token (logout, user removed or demoted ends it)."""
    login_free_failures: int = 5
    """Failed logins of one name from one client address before that pair is locked (growing lock)."""
    login_address_free_failures: int = 20
    """Failed logins from one client address, whatever the names, before that address is locked."""
    tls_cert: str = ""
    """PEM certificate chain: with ``tls_key``, the console serves HTTPS only (secure cookies, HSTS)."""
    tls_key: str = ""
    retention: Retention = field(default_factory=Retention)
    """``[retention]``: how long the audit trail is kept (the console creates its table)."""
    watch_expiry_days: float = 30.0
    """A watch given without ``expires_at`` ends this long after it is made (personal data is not watched forever);
    0: such watches never end."""
    vehicle_search_max_days: int = 31
    """The longest time range (``to - from``) of a multi-condition vehicle search: the range bounds what the
    search's index scans may read, so it is what keeps a broad query (one colour, say) from reading months."""
    face_search_max_days: int = 31
    """The longest time range (``to - from``) of a similar-face search: following a face through the city is a
    sensitive read, and the range bounds the day partitions one search scans."""
    face_search_min_score: float = 0.8
    """The cosine similarity a similar-face search asks for when the request names none: the surveillance service's
    default face watch threshold (two sightings of one person score ~0.98, two strangers ~0)."""
    face_search_follow_margin_s: float = 600.0
    """How far before its HBase scan the face index starts following the bus (``offsets_for_times``): it covers
    records produced before the scan that the ingest job had not yet written (``web.services.face_follow``)."""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    @classmethod
    def from_config(cls, config: Config, **overrides: object) -> ConsoleSettings:
        """``[console]`` for the console's own keys, the shared sections for the endpoints; flags override.

        The bus settings are principal ``console``'s (``[bus] client_properties_dir``): a properties file that is
        missing, open to others or incomplete is a ``BusCredentialsError`` (a ValueError) here, at start."""
        default = cls()
        bus_java = bus_client.java(config, PRINCIPAL)
        values: dict[str, object] = {
            "host": config.get("console", "host", default.host),
            "port": config.get("console", "port", default.port),
            "url": config.get("console", "url", default.url),
            "data_dir": Path(config.get("console", "data_dir", str(default.data_dir))),
            "token_ttl_s": config.get("console", "token_ttl_s", default.token_ttl_s),
            "session_ttl_s": config.get("console", "session_ttl_s", default.session_ttl_s),
            "bus": bus_client.to_librdkafka(bus_java),
            "bus_java": bus_java,
            "hbase": HBaseClient.from_config(config),
            "s3_endpoint": config.get("object_storage", "endpoint", default.s3_endpoint),
            "map_path": map_path(config),
            "lag_sample_interval_s": config.get("console", "lag_sample_interval_s", default.lag_sample_interval_s),
            "topics": Topics.from_config(config),
            "retention": Retention.from_config(config),
            "site": SiteSettings.from_config(config),
            "dr": config.section("dr"),
            "dr_bus": bus_client.librdkafka(config, PRINCIPAL, section=bus_client.DR),
            "prometheus_url": str(config.get("prometheus", "url", "")).rstrip("/"),
            "alertmanager_url": config.get("console", "alertmanager_url", "").rstrip("/")
            or console_alertmanager_url(config.section("monitoring")),
            **{key: config.get("console", key, getattr(default, key))
               for key in ("max_transcodes", "max_transcodes_per_user", "max_image_bytes", "thumbnail_width",
                           "session_recheck_s", "login_free_failures",
                           "login_address_free_failures", "tls_cert", "tls_key", "watch_expiry_days",
                           "vehicle_search_max_days", "face_search_max_days", "face_search_min_score",
                           "face_search_follow_margin_s")},
        }
        values.update({k: v for k, v in overrides.items() if v is not None and k != "s3_credentials"})
        values["s3_access_key"], values["s3_secret_key"] = _s3_key(config, overrides.get("s3_credentials"))
        expiry = values["watch_expiry_days"]
        if not isinstance(expiry, int | float) or isinstance(expiry, bool) or expiry < 0:
            raise ValueError(f"console.watch_expiry_days should be a number of days >= 0, not {expiry!r}")
        for key, lowest in (("max_image_bytes", 1024), ("thumbnail_width", 16), ("vehicle_search_max_days", 1)):
            value = values[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
                raise ValueError(f"console.{key} should be a whole number >= {lowest}, not {value!r}")
        for key, check in (("face_search_max_days", "a whole number of days >= 1"),
                           ("face_search_min_score", "a cosine similarity in [0, 1]"),
                           ("face_search_follow_margin_s", "a number of seconds >= 0")):
            if not _face_search_key_ok(key, values[key]):
                raise ValueError(f"console.{key} should be {check}, not {values[key]!r}")
        if bool(values["tls_cert"]) != bool(values["tls_key"]):
            raise ValueError("console.tls_cert and console.tls_key go together (both or neither)")
        if values["tls_cert"]:
            check_tls_cert(str(values["tls_cert"]))
        return cls(**values)  # type: ignore[arg-type]


def _face_search_key_ok(key: str, value: object) -> bool:
    """Whether a ``face_search_*`` key holds a value the face search can use (see the fields' docstrings)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    if key == "face_search_max_days":
        return isinstance(value, int) and value >= 1
    return 0 <= value <= 1 if key == "face_search_min_score" else value >= 0


def check_tls_cert(path: str) -> None:
    """A ValueError naming ``console.tls_cert``, ``path``, the certificate's subject and the date it fails, unless
    the first certificate of the PEM chain ``path`` is valid now: the console refuses to start rather than serve
    a certificate every browser rejects."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"console.tls_cert {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        certificate = x509.load_pem_x509_certificates(data)[0]
    except ValueError:
        raise ValueError(f"console.tls_cert {path}: not a PEM certificate chain") from None
    now = datetime.datetime.now(datetime.UTC)
    subject = certificate.subject.rfc4514_string() or "(empty subject)"
    if now > certificate.not_valid_after_utc:
        raise ValueError(f"console.tls_cert {path}: the certificate {subject} expired on "
                         f"{_iso(certificate.not_valid_after_utc)}")
    if now < certificate.not_valid_before_utc:
        raise ValueError(f"console.tls_cert {path}: the certificate {subject} is not valid before "
                         f"{_iso(certificate.not_valid_before_utc)}")


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _s3_key(config: Config, flag: object) -> tuple[str, str]:
    """The console's object-store key (``contracts.s3_credentials``); none at all leaves the video pages answering
    503, a key file open to other users or malformed stops the console at start."""
    try:
        found = s3_credentials.resolve(config, "console", flag if isinstance(flag, Path) else None)
    except s3_credentials.MissingCredentials:
        return "", ""
    return found.access_key, found.secret_key
