"""Waiting for an admin call (a confluent-kafka future, or a call of the bus package's own admin client), with Kafka's
error codes turned into what a user can act on.

``Backends.bus_call`` makes every failure a 503 (the bus is unreachable); but some Kafka errors
are the user's: an unknown topic is a 404, a topic that already exists or a group with members a
409, a bad partition count or config a 422; an authorization error is the bus's ACLs refusing the
console's own identity, whoever asked: a 403 naming what it may not do. Those codes are recognised here first;
everything else still goes through ``bus_call``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from bus.client.admin import AdminError
from bus.client.errors import KafkaConnectionError
from bus.client.errors import KafkaError as BusClientError

from ..backends import BUS, Backends, BackendUnavailable
from .errors import Conflict, Forbidden, Invalid, NotFound

T = TypeVar("T")

_NOT_FOUND = {KafkaError.UNKNOWN_TOPIC_OR_PART: "topic", KafkaError.UNKNOWN_TOPIC_ID: "topic",
              KafkaError.GROUP_ID_NOT_FOUND: "group", KafkaError._UNKNOWN_TOPIC: "topic"}
_CONFLICT = {KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.NON_EMPTY_GROUP, KafkaError.UNKNOWN_MEMBER_ID,
             KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.GROUP_SUBSCRIBED_TO_TOPIC,
             KafkaError.TOPIC_DELETION_DISABLED}
_INVALID = {KafkaError.TOPIC_EXCEPTION: "name", KafkaError.INVALID_PARTITIONS: "partitions",
            KafkaError.INVALID_REPLICATION_FACTOR: "replication_factor",
            KafkaError.INVALID_REPLICA_ASSIGNMENT: "replication_factor", KafkaError.INVALID_CONFIG: "config",
            KafkaError.POLICY_VIOLATION: "config"}
_FORBIDDEN = {KafkaError.TOPIC_AUTHORIZATION_FAILED: "use topic {}",
              KafkaError.GROUP_AUTHORIZATION_FAILED: "use group {}",
              KafkaError.CLUSTER_AUTHORIZATION_FAILED: "act on the cluster"}
"""What the ACL that refused guards: the 403's words when the caller does not say what the call does."""


def kafka_error(exc: BaseException | None) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def wait(backends: Backends, future: concurrent.futures.Future[Any], name: str = "", operation: str = "") -> Any:
    """The future's result; Kafka errors a user caused become NotFound / Conflict / Invalid naming ``name``, an
    authorization error Forbidden naming ``operation`` (what the call does, e.g. ``delete topic x``; by default
    the resource the bus guards, e.g. ``use topic x``)."""
    done, _ = concurrent.futures.wait([future], timeout=backends.settings.backend_timeout_s)
    if done:
        error = kafka_error(future.exception())
        if error is not None:
            _refuse(error.code(), error.name(), error.str(), name, operation)
    return backends.bus_call(future)


def _refuse(code: int, error_name: str, text: str, name: str, operation: str) -> None:
    """Raise what a user can act on for Kafka error ``code``; return for a code that is not the user's."""
    if code in _FORBIDDEN:
        raise Forbidden(operation or _FORBIDDEN[code].format(name).rstrip(), error_name)
    if code in _NOT_FOUND:
        raise NotFound(_NOT_FOUND[code], name)
    if code in _CONFLICT:
        raise Conflict(f"{name}: {text}")
    if code in _INVALID:
        raise Invalid(_INVALID[code], f"{name}: {text}")


def call(call: Callable[[], T], name: str = "", operation: str = "") -> T:
    """``call()``, a call of the bus package's admin client (``Backends.group_admin``), its Kafka errors mapped as
    :func:`wait` maps confluent-kafka's (Kafka's codes are the same numbers); any other failure is a 503."""
    try:
        return call()
    except AdminError as exc:
        _refuse(exc.code, exc.name, exc.message, name, operation)
        raise BackendUnavailable(BUS, str(exc)) from None
    except (BusClientError, KafkaConnectionError, OSError) as exc:
        raise BackendUnavailable(BUS, str(exc) or type(exc).__name__) from None


def wait_all(backends: Backends, futures: dict[Any, concurrent.futures.Future[Any]]) -> dict[Any, Any]:
    """Results of a dict of futures (the admin client's per-resource answers), keyed the same way."""
    return {key: wait(backends, future, str(key)) for key, future in futures.items()}
