"""kio's schema modules, imported by one thread at a time.

kio imports a version's module the first time it is asked for it. The broker loads every schema in a background
thread at start (`messages.preload`) while its event loop may ask for one too, and a client may be used from several
threads. Two threads importing the same package and its submodules at once can fail on CPython 3.11 with
`_DeadlockError` ("deadlock detected by _ModuleLock('kio.schema.metadata.v8.request')"): a broker answered a Metadata
and a CreateTopics request with UNKNOWN_SERVER_ERROR that way under CI's load. So every lazy schema import in the
process goes through this module's lock; a lookup of a module already imported costs only the lock.
"""

from __future__ import annotations

import threading
from types import ModuleType

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.index import PayloadEntityType
from kio.static.protocol import RequestPayload, ResponsePayload

IMPORT_LOCK = threading.RLock()  # reentrant: an import never calls back in, but a caller may hold it already


def payload_module(api_key: int, version: int, entity_type: PayloadEntityType) -> ModuleType:
    """The module of one (api key, version) request or response (kio's errors for unknown ones)."""
    with IMPORT_LOCK:
        return load_payload_module(api_key, version, entity_type)


def request_schema(api_key: int, version: int) -> type[RequestPayload]:
    """The request class of one (api key, version) (kio's errors for unknown ones)."""
    with IMPORT_LOCK:
        return load_request_schema(api_key, version)


def response_schema(api_key: int, version: int) -> type[ResponsePayload]:
    """The response class of one (api key, version) (kio's errors for unknown ones)."""
    with IMPORT_LOCK:
        return load_response_schema(api_key, version)
