"""What a request handler gets besides the request: who asked, at which version, and the broker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.protocol.messages import Shapes

if TYPE_CHECKING:
    from bus.broker.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    listener: str
    peer: str
    shapes: Shapes

    def make(self, class_name: str, **values: Any) -> Any:
        """Build a response dataclass of this request's version (see `bus.protocol.messages`)."""
        return self.shapes.make(class_name, **values)
