"""What a viewer may not read: face feature vectors (a biometric template) and raw command-topic messages.

Small helpers the data routers call, so the routers themselves stay about their data: a viewer's capture
records, raw messages and live events lose ``feature``, and a
viewer asking for the raw messages of a command topic (``Topics.COMMANDS``: video commands, watch and
statistic commands) gets 403. Operators and admins see everything.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from sse_starlette import ServerSentEvent

from web.auth import Role
from web.dependencies import SettingsDep, ViewerDep

FEATURE_FIELDS = ("feature",)


def is_viewer(user: Any) -> bool:
    return user.role == Role.VIEWER


def record_for(user: Any, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without feature vectors when ``user`` is a viewer (a copy; the record is not changed)."""
    if not is_viewer(user):
        return record
    return {k: v for k, v in record.items() if k not in FEATURE_FIELDS}


def message_for(user: Any, message: dict[str, Any]) -> dict[str, Any]:
    """A raw bus message (``web.services.messages``) whose JSON value loses its feature vectors for a viewer."""
    value = message.get("value")
    if not is_viewer(user) or not isinstance(value, dict) or value.get("encoding") != "utf-8":
        return message
    text = value.get("data")
    if not isinstance(text, str) or not any(f'"{name}"' in text for name in FEATURE_FIELDS):
        return message
    try:
        record = json.loads(text)
    except ValueError:  # truncated or not JSON: not shown at all rather than shown with the vector
        return {**message, "value": {**value, "data": "", "truncated": True}}
    if isinstance(record, dict):
        record = {k: v for k, v in record.items() if k not in FEATURE_FIELDS}
    return {**message, "value": {**value, "data": json.dumps(record, ensure_ascii=False)}}


def refuse_control_topics_to_viewers(request: Request, user: ViewerDep, settings: SettingsDep) -> None:
    """A dependency for routes with a ``{name}`` topic: 403 for a viewer when it is a control topic."""
    name = request.path_params.get("name")
    if is_viewer(user) and name in settings.topics.commands():
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"{name} is a control topic: requires role {Role.OPERATOR.value}")


NoControlTopicsForViewers = Annotated[None, Depends(refuse_control_topics_to_viewers)]


async def without_features(events: AsyncIterator[ServerSentEvent]) -> AsyncIterator[ServerSentEvent]:
    """The events with any ``feature`` (a face's embedding, e.g. a face watch on ``control.watchlist``) removed."""
    try:
        async for event in events:
            if isinstance(event.data, str) and '"feature"' in event.data:
                with contextlib.suppress(ValueError):
                    record = json.loads(event.data)
                    if isinstance(record, dict):
                        record.pop("feature", None)
                        event = ServerSentEvent(json.dumps(record, ensure_ascii=False, separators=(",", ":")),
                                                event=event.event)
            yield event
    finally:
        await events.aclose()  # type: ignore[attr-defined]
