"""Topic and broker configs (Kafka's ConfigurationControlManager): AlterConfigs and IncrementalAlterConfigs.

Every change is a committed `config` record (a topic's) or BROKER ConfigRecord (a broker's, or the cluster-wide
default's) that every broker applies; one request's changes go in one entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from bus.config.broker import BROKER_CONFIGS, DYNAMIC_BROKER_KEYS
from bus.config.definitions import ConfigError
from bus.config.topic import validate_topic_configs
from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import TopicImage, broker_config_record


class ConfigurationControlManager:
    def __init__(self, context: ControlContext, topic: Callable[[str], TopicImage]) -> None:
        """`topic`: a topic by name, or UNKNOWN_TOPIC_OR_PARTITION (`TopicControlManager.topic`)."""
        self._context = context
        self._topic = topic

    def alter_topic_configs(
        self, name: str, changes: Mapping[str, str | None], *, replace: bool, validate_only: bool = False
    ) -> None:
        """Set (value) or delete (None) topic configs; `replace` drops keys not named (AlterConfigs)."""
        self._context.check_active()
        topic = self._topic(name)
        try:
            validate_topic_configs(changes)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        final = {} if replace else dict(topic.configs)
        for key, value in changes.items():
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
        if validate_only:
            return
        records = [
            {"type": "config", "name": name, "key": k, "value": None} for k in topic.configs if k not in final
        ]
        records += [
            {"type": "config", "name": name, "key": k, "value": v}
            for k, v in final.items()
            if topic.configs.get(k) != v
        ]
        if records:
            self._context.commit(records)

    def alter_broker_configs(self, resource: str, changes: Mapping[str, str | None], *, replace: bool,
                             validate_only: bool = False) -> None:
        """Set (value) or delete (None) dynamic configs of broker `resource` (an id, or "" for the cluster-wide
        default), committed as BROKER ConfigRecords that every broker applies; `replace` drops keys not named.
        Only DYNAMIC_BROKER_KEYS change at run time: others are refused as Kafka refuses them."""
        self._context.check_active()
        if resource and not resource.isdigit():
            raise ControllerError(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource}")
        # INVALID_REQUEST for a bad value too, as Kafka answers (KAFKA-13609 keeps that code for compatibility).
        static = [key for key in changes if key not in DYNAMIC_BROKER_KEYS]
        if static:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Cannot update these configs dynamically: [{', '.join(sorted(static))}]")
        try:
            for key, value in changes.items():
                if value is not None:
                    BROKER_CONFIGS[key].parse(value)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_request, str(exc)) from None
        current = self._context.working.broker_configs.get(resource, {})
        final = {} if replace else dict(current)
        for key, value in changes.items():
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
        records = [broker_config_record(resource, k, None) for k in current if k not in final]
        records += [broker_config_record(resource, k, v) for k, v in final.items() if current.get(k) != v]
        if records and not validate_only:
            self._context.commit(records)
