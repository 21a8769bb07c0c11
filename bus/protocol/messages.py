"""Request/response bodies through kio, plus a version-tolerant response builder.

Each API handler is written once for all the versions we serve. kio generates a distinct dataclass
per version, so handlers describe a response by class name and field values, and `Shapes` fills in
the class of the negotiated version: fields that version lacks are dropped, fields the handler did
not mention get the type's zero value, and ints become the `ErrorCode`/`timedelta` kio expects.
A name that no version of the class has is a typo and raises `UnknownField`: silently dropping it
would lose the field in every version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.index import PayloadEntityType, api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from bus.protocol import produce_codec
from bus.protocol.guard import check_body
from bus.protocol.schemas import payload_module, request_schema, response_schema


class UnsupportedApi(LookupError):
    """kio has no schema for this API key/version."""


class UnknownField(TypeError):
    """A response (or request) builder named a field that no version of the class has."""


@functools.cache
def request_class(api_key: int, version: int) -> type:
    try:
        return request_schema(api_key, version)
    except Exception as exc:  # kio raises several index/import errors for unknown keys/versions
        raise UnsupportedApi(f"no schema for api {api_key} v{version}") from exc


@functools.cache
def response_class(api_key: int, version: int) -> type:
    try:
        return response_schema(api_key, version)
    except Exception as exc:
        raise UnsupportedApi(f"no schema for api {api_key} v{version}") from exc


PRODUCE_KEY = 0

_READERS: dict[type, Callable[[bytes, int], tuple[Any, int]]] = {}
_WRITERS: dict[type, Callable[[io.BytesIO, Any], None]] = {}


def _reader(cls: type) -> Callable[[bytes, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def preload(served: Iterable[tuple[int, int, int]]) -> int:
    """Load the request and response classes (and their codecs) of every (api key, min, max) served.

    kio builds each version's dataclasses when its module is first imported, which costs 2-10 ms a
    module; loaded lazily, the first fetch of a new version stalled the event loop for every connection
    by up to ~200 ms. The broker runs this in a thread at start, where an import holds the GIL for at
    most a switch interval at a time. Returns the number of classes loaded.
    """
    loaded = 0
    for api_key, low, high in served:
        for version in range(low, high + 1):
            for lookup, codec in ((request_class, _reader), (response_class, _writer)):
                try:
                    codec(lookup(api_key, version))
                except UnsupportedApi:
                    continue
                loaded += 1
        # A builder that names a field its version lacks makes `Shapes.make` look the name up in every
        # version kio knows (`_fields_in_any_version`), newer ones than we serve included: import them here
        # too, or the first fetch that does so imports Fetch v17-v18 on the loop (a 50-60 ms stall).
        for version in schema_name_map[api_key_map[api_key]]:
            for entity_type in (EntityType.request, EntityType.response):
                payload_module(api_key, version, entity_type)
    return loaded


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """Decode a request body; raises MalformedRequest (or kio's errors) on a bad frame."""
    cls = request_class(api_key, version)
    if api_key == PRODUCE_KEY and produce_codec.MIN_VERSION <= version <= produce_codec.MAX_VERSION:
        produce_codec.parse_request(frame, offset, version)  # the hand-written twin of check_body
    else:
        check_body(cls, frame, offset)
    request, _size = _reader(cls)(frame, offset)
    return request


def encode(obj: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(obj))(out, obj)
    return out.getvalue()


_SIZE_AND_CORRELATION = struct.Struct(">ii")


def encode_response(correlation_id: int, obj: Any, flexible_header: bool) -> memoryview:
    """The whole response frame (size, header, body) encoded in one buffer and returned without a copy.

    Fetch responses carry megabytes of record batches; writing the header first and patching the size
    in afterwards spares the two extra copies that concatenating header and body would cost.
    """
    if obj.__api_key__ == PRODUCE_KEY:
        fast = produce_codec.encode_response(correlation_id, obj, obj.__version__)
        if fast is not None:
            return fast
    out = io.BytesIO()
    out.write(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    if flexible_header:
        out.write(b"\x00")  # empty tagged fields of response header v1
    _writer(type(obj))(out, obj)
    frame = out.getbuffer()
    _SIZE_AND_CORRELATION.pack_into(frame, 0, len(frame) - 4, correlation_id)
    return frame


def _zero(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        return None
    if origin is tuple:
        return ()
    if tp is ErrorCode:
        return ErrorCode.none
    base = getattr(tp, "__supertype__", tp)
    for candidate in (bool, int, float, str, bytes):
        if isinstance(base, type) and issubclass(base, candidate):
            return candidate()
    if isinstance(base, type) and issubclass(base, datetime.timedelta):
        return datetime.timedelta(0)
    if base is uuid.UUID:
        return uuid.UUID(int=0)
    return None


def _epoch_ms_coercer(nullable: bool) -> Callable[[Any], Any]:
    """Milliseconds to the datetime kio encodes; -1 ("none") is None where the field allows it."""

    def coerce(value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return value
        if value < 0 and nullable:
            return None
        return datetime.datetime.fromtimestamp(value / 1000.0, tz=datetime.UTC)

    return coerce


def _coercer(tp: Any, nullable: bool = False) -> Callable[[Any], Any] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        return _coercer(inner[0], nullable=True) if len(inner) == 1 else None
    if tp is ErrorCode:
        return lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))
    base = getattr(tp, "__supertype__", tp)
    if isinstance(base, type) and issubclass(base, datetime.timedelta):
        return lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
    if isinstance(base, type) and issubclass(base, datetime.datetime):
        return _epoch_ms_coercer(nullable)
    if typing.get_origin(tp) is tuple:
        return lambda v: v if isinstance(v, tuple) else tuple(v)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _ClassPlan:
    """How `Shapes.make` fills one dataclass: every field's zero value, and the coercion of those that need one."""

    cls: type
    zeros: dict[str, Any]
    coerced: tuple[tuple[str, Callable[[Any], Any]], ...]  # (field name, coercion) of the fields that have one


@functools.cache
def _plan(cls: type) -> _ClassPlan:
    hints = typing.get_type_hints(cls)
    zeros: dict[str, Any] = {}
    coerced = []
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name, f.type)
        if f.default is not dataclasses.MISSING:
            zeros[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            zeros[f.name] = f.default_factory()
        else:
            zeros[f.name] = _zero(tp)
        coerce = _coercer(tp)
        if coerce is not None:
            coerced.append((f.name, coerce))
    return _ClassPlan(cls, zeros, tuple(coerced))


@functools.cache
def _fields_in_any_version(api_key: int, entity_type: PayloadEntityType, class_name: str) -> frozenset[str]:
    """Every field name `class_name` has in some version of the API: what a builder may mention."""
    names: set[str] = set()
    for version in schema_name_map[api_key_map[api_key]]:
        cls = getattr(payload_module(api_key, version, entity_type), class_name, None)
        if cls is not None:
            names.update(f.name for f in dataclasses.fields(cls))
    return frozenset(names)


class Shapes:
    """Builds the response (or, for clients, request) dataclasses of one (api_key, version)."""

    __slots__ = ("_entity_type", "_module", "_plans", "api_key", "version")

    def __init__(self, api_key: int, version: int, entity_type: PayloadEntityType = EntityType.response) -> None:
        self.api_key = api_key
        self.version = version
        self._entity_type = entity_type
        self._plans: dict[str, _ClassPlan] = {}
        try:
            self._module = payload_module(api_key, version, entity_type)
        except Exception as exc:
            raise UnsupportedApi(f"no schema for api {api_key} v{version}") from exc

    def has(self, class_name: str) -> bool:
        return hasattr(self._module, class_name)

    def make(self, class_name: str, **values: Any) -> Any:
        plan = self._plans.get(class_name)
        if plan is None:
            plan = self._plans[class_name] = _plan(getattr(self._module, class_name))
        zeros = plan.zeros
        kwargs = zeros | values
        if len(kwargs) != len(zeros):  # names this version lacks: dropped, unless no version has them
            _check_names(self.api_key, self._entity_type, class_name, tuple(values))
            for name in values.keys() - zeros.keys():
                del kwargs[name]
        for name, coerce in plan.coerced:
            if name in values:
                value = values[name]
                if value is not None:
                    kwargs[name] = coerce(value)
        return plan.cls(**kwargs)


@functools.cache
def _check_names(api_key: int, entity_type: PayloadEntityType, class_name: str, names: tuple[str, ...]) -> None:
    """Cached per call shape: a handler names the same fields on every request (e.g. `topic_id`, which only
    newer versions have), so the set difference is worked out once."""
    unknown = sorted(set(names) - _fields_in_any_version(api_key, entity_type, class_name))
    if unknown:
        raise UnknownField(f"{class_name} (api {api_key}) has no field {', '.join(unknown)} in any version")


@functools.cache
def shapes(api_key: int, version: int) -> Shapes:
    return Shapes(api_key, version)


@functools.cache
def request_shapes(api_key: int, version: int) -> Shapes:
    """For clients: build requests of any version the same way handlers build responses."""
    return Shapes(api_key, version, EntityType.request)

