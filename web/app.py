"""The console app: ``create_app(settings)`` wires settings, backends, routers and error handling once.

Errors a user can cause are answered with a 4xx naming what was wrong; an unreachable backend is a
503 naming which one; a command the bus's ACLs refuse the console's own bus identity is a 403 naming what it may
not do; anything else is a 500 with no stack trace in the body (it goes to the log).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from web.audit import AuditLog, ServerTiming
from web.auth import Auth
from web.backends import BUS, Backends, BackendUnavailable
from web.events import EventHub, hub_topics
from web.hardening import StrictTransportSecurity, add_docs, metrics_endpoint
from web.metrics import ConsoleMetrics, MetricsMiddleware
from web.overview import Overview
from web.routers import (
    alerts,
    audit,
    auth,
    bus,
    captures,
    devices,
    dr,
    events,
    evidence,
    faces,
    health,
    monitoring,
    overview,
    pages,
    site,
    stats,
    users,
    video,
    watchlist,
)
from web.services.account_sync import AccountSync
from web.services.audit_loader import AuditLoader
from web.services.dr import DrService, DrSettings
from web.services.errors import Forbidden
from web.services.face_follow import FaceSearch, FollowSettings
from web.services.runtime import DataServices
from web.services.surveillance import SurveillanceConsole
from web.settings import ConsoleSettings
from web.site import ConsoleSite
from web.standby import StandbyGuard

log = logging.getLogger(__name__)

ROUTERS = (health.router, auth.router, users.router, audit.router, events.router, overview.router,
           faces.router, captures.router, devices.router, bus.router, monitoring.router, alerts.router, video.router,
           watchlist.router, stats.router, dr.router, site.router, evidence.router, pages.router)


def create_app(settings: ConsoleSettings, backends: Backends | None = None) -> FastAPI:
    backends = backends or Backends(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.hub.start(asyncio.get_running_loop())
        app.state.overview.start(backends)
        app.state.data.start()  # the lag-history sampler
        app.state.dr.start()  # the DR mirror's lag sampler
        app.state.audit_loader.start()
        app.state.accounts.start()
        app.state.faces.start()  # builds the face index from HBase, then follows the bus
        yield
        app.state.faces.stop()
        app.state.accounts.stop()
        app.state.audit_loader.stop()
        app.state.audit.close()
        app.state.dr.stop()
        app.state.data.stop()
        await app.state.overview.stop()
        app.state.hub.stop()
        backends.close()

    app = FastAPI(title="Security-video data bus console", version="1", lifespan=lifespan,
                  openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.backends = backends
    app.state.auth = Auth(settings, backends)
    audit_ttl_s = settings.retention.audit_ttl_s
    console_site = ConsoleSite(settings.site, settings.topics.audit)
    app.state.site = console_site
    app.state.audit = AuditLog(backends.hbase, settings.bus, console_site.audit_topic, settings.backend_timeout_s,
                               audit_ttl_s)
    app.state.audit_loader = AuditLoader(backends.hbase, settings.bus, console_site.audit_topics(),
                                         settings.backend_timeout_s, audit_ttl_s, console_site.loader_group())
    app.state.accounts = AccountSync(backends.hbase, settings.bus, settings.topics.console_accounts,
                                     console_site.publishing, settings.backend_timeout_s)
    app.state.data = DataServices(settings, backends)
    app.state.dr = DrService(DrSettings.from_console(settings), backends, settings.lag_sample_interval_s)
    metrics = ConsoleMetrics()
    app.state.metrics = metrics
    app.state.hub = EventHub(settings.bus, hub_topics(settings.topics))
    app.state.hub.register_metrics(metrics.registry)
    app.state.audit.register_metrics(metrics.registry)
    app.state.audit_loader.register_metrics(metrics.registry)
    app.state.accounts.register_metrics(metrics.registry)
    app.state.faces = FaceSearch(FollowSettings.from_console(settings), backends)
    app.state.faces.register_metrics(metrics.registry)
    app.state.overview = Overview(settings.topics, app.state.hub)
    app.state.surveillance = SurveillanceConsole(backends, app.state.hub)
    app.add_middleware(StandbyGuard, site=console_site)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(ServerTiming)
    if settings.tls:
        app.add_middleware(StrictTransportSecurity)
    app.add_route("/metrics", metrics_endpoint(metrics), include_in_schema=False)
    add_docs(app)
    app.mount("/static", pages.static_files(), name="static")
    for router in ROUTERS:
        app.include_router(router)

    @app.exception_handler(BackendUnavailable)
    async def backend_unavailable(_request: Request, exc: BackendUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "backend": exc.backend}, status_code=503)

    @app.exception_handler(Forbidden)
    async def bus_forbidden(_request: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "backend": BUS}, status_code=403)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (logged)"}, status_code=500)

    return app
