"""What routes ask for: settings, backends, an HBase connection (and, from web.auth, the current user).

Everything here comes from ``app.state``, set once by :func:`web.app.create_app`, so nothing deep
inside a route reads a file or a global.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import happybase
from fastapi import Depends, Request

from web.backends import Backends
from web.settings import ConsoleSettings


def get_settings(request: Request) -> ConsoleSettings:
    return request.app.state.settings


def get_backends(request: Request) -> Backends:
    return request.app.state.backends


def get_hbase(request: Request) -> Iterator[happybase.Connection]:
    """A pooled HBase connection for the duration of one request (503 naming hbase if unreachable)."""
    with get_backends(request).hbase() as connection:
        yield connection


# Annotated aliases keep route signatures short and free of call-in-default (ruff B008).
SettingsDep = Annotated[ConsoleSettings, Depends(get_settings)]
BackendsDep = Annotated[Backends, Depends(get_backends)]
HBaseDep = Annotated[happybase.Connection, Depends(get_hbase)]
