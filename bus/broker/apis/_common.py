"""Small pieces several handlers share: the advertised endpoint and topic lookups."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from bus.config.broker import Listener

if TYPE_CHECKING:
    from bus.broker.context import RequestContext

NULL_TOPIC_ID = uuid.UUID(int=0)


def advertised_endpoint(ctx: RequestContext) -> Listener:
    """The address of this broker on the listener the request arrived on (Kafka answers per listener)."""
    config = ctx.broker.config
    candidates = [a for a in config.advertised if a.name == ctx.listener] or config.advertised_client_listeners
    endpoint = candidates[0]
    if endpoint.port == 0:  # bound to an ephemeral port: advertise what the OS gave us
        _host, port = ctx.broker.network.bound.get(endpoint.name, (endpoint.host, 0))
        return Listener(endpoint.name, endpoint.host, port)
    return endpoint


def topic_name_for(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> str | None:
    """Requests name topics by name (old versions) or by id (new ones); resolve either."""
    if topic_id is not None and topic_id != NULL_TOPIC_ID:
        topic = ctx.broker.controller.image.topics_by_id.get(topic_id)
        return topic.name if topic else None
    return name
