"""Serving a process's Prometheus ``/metrics`` on the configured port, or on a free one when it is taken.

Every service reads its metrics port from the solution config, so two instances started from one
config on one host (scaling out a surveillance stage, a monitor's standby, a second mirror) ask for
the same port. A taken port must never stop the second instance: it is logged, with the port actually
bound, and a free one is used instead; a scraper finds the instance through that log line.
"""

from __future__ import annotations

import errno
import logging

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

log = logging.getLogger("metrics")


def serve_metrics(port: int, *, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY,
                  name: str = "metrics") -> int:
    """Serve ``registry`` on ``host:port`` in a daemon thread; return the port bound (``port`` or a free one).

    ``port`` 0 asks for a free port outright. An ``OSError`` other than a taken port (a host name that does
    not resolve, a privileged port) still raises: that is a configuration error the operator must see.
    """
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if port == 0 or exc.errno != errno.EADDRINUSE:
            raise
        server, _thread = start_http_server(0, addr=host, registry=registry)
        bound = int(server.server_port)
        log.warning("%s port %d on %s is taken (%s): serving /metrics on port %d instead",
                    name, port, host, exc.strerror or exc, bound)
        return bound
    bound = int(server.server_port)
    log.info("%s: serving /metrics on http://%s:%d/metrics", name, host, bound)
    return bound
