"""The error every controller operation raises: `ControllerError`, the code and message Kafka would answer.

Its own module because every control manager, the `QuorumController` facade and the metadata logs raise it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from bus.protocol.errors import KafkaApiError


class ControllerError(KafkaApiError):
    """An admin operation Kafka would refuse, with the error code and message it would return."""


def not_controller(message: str) -> ControllerError:
    """This node is not (or stopped being) the active controller: retriable, the client asks the active one."""
    return ControllerError(ErrorCode.not_controller, message)
