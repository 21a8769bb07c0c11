"""The data services' long-lived state in one place: the map store, broker connections, the lag sampler.

``create_app`` makes one :class:`DataServices` (``app.state.data``) and its lifespan starts and
stops it, so the lag sampler runs exactly as long as the console serves.
"""

from __future__ import annotations

from ..backends import Backends
from ..settings import ConsoleSettings
from .deployment import MapStore
from .lag_history import LagHistory
from .log_dirs import LogDirs
from .monitoring import MonitoringService


class DataServices:
    def __init__(self, settings: ConsoleSettings, backends: Backends) -> None:
        self.map = MapStore(settings.map_path)
        self.log_dirs = LogDirs(settings.bus_java, timeout_s=settings.backend_timeout_s)
        self.lag_history = LagHistory(backends, settings.lag_sample_interval_s)
        self.monitoring = MonitoringService(backends, settings.map_path)

    def start(self) -> None:
        self.lag_history.start()

    def stop(self) -> None:
        self.lag_history.stop()
        self.log_dirs.close()
