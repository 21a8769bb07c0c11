"""``/api/v1/video``: browse and play videos (viewer), ask for an analysis or cancel one (operator, audited),
read tasks and the objects they found (viewer). Live task progress reaches pages over the SSE hub's
``video.status`` topic; these routes are what a page re-reads when it hears of a change.

Footage and what was found in it are personal data: starting to play a video (``video.view``), downloading one
(``video.export``, with a required ``reason``) and reading the objects found (``video.objects``) are audited
before anything is read from the store, and refused (503) when the audit event cannot be published.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from contracts.records import CITY_TZ
from contracts.video import CAMERA_ID, TASK_ID
from web.dependencies import AuditDep, OperatorDep, VideoDep, ViewerDep
from web.models.video import AnalyzeIn, CommandOut, DayOut, ObjectOut, PlayableOut, TaskOut, VideoOut
from web.routers.data_common import (
    Reason,
    answering,
    asked,
    audit_read,
    audited,
    invalid,
    required_reason,
)
from web.services.video_media import RangeNotSatisfiable, TranscodesBusy, media_headers, parse_range

router = APIRouter(prefix="/api/v1/video", tags=["video"])

Camera = Annotated[str, Path(pattern=f"^{CAMERA_ID.pattern}$", max_length=64)]
TaskId = Annotated[str, Path(pattern=f"^{TASK_ID.pattern}$", max_length=64)]
S3Url = Annotated[str, Query(max_length=1100, description="s3://bucket/key in the videos or synopsis bucket")]


@router.get("/cameras", response_model=list[str])
def cameras(_user: ViewerDep, video: VideoDep) -> list[str]:
    """Cameras with recordings in the videos bucket."""
    return video.media.cameras()


@router.get("/cameras/{camera_id}/days", response_model=list[DayOut])
def days(camera_id: Camera, _user: ViewerDep, video: VideoDep) -> list[DayOut]:
    """Days (city time) with recordings of this camera, newest first."""
    return [DayOut(**d) for d in video.media.days(camera_id)]


@router.get("/cameras/{camera_id}/videos", response_model=list[VideoOut])
def videos(camera_id: Camera, _user: ViewerDep, video: VideoDep,
           day: Annotated[dt.date, Query(description="city-time date, YYYY-MM-DD")]) -> list[VideoOut]:
    return [VideoOut(url=f.url, camera_id=f.camera_id, start_time=f.start_time.astimezone(CITY_TZ).isoformat(),
                     size=f.size, name=f.name) for f in video.media.videos(camera_id, day)]


@router.get("/playable", response_model=PlayableOut)
def playable(url: S3Url, user: ViewerDep, video: VideoDep) -> PlayableOut:
    """Where the browser can play a video: ready (itself or its WebM copy), or transcoding (poll again).

    429 with ``Retry-After`` when starting its transcode would pass ``[console] max_transcodes`` running at
    once, or ``max_transcodes_per_user`` of this user's."""
    with answering("query"):
        try:
            return PlayableOut(**video.media.playable(url, user.username))
        except TranscodesBusy as exc:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc),
                                headers={"Retry-After": str(exc.retry_after)}) from None


def _play_start(range_header: str | None) -> bool:
    """Whether a media request starts playing (no Range, or one from byte 0) rather than seeking within a video
    already started: a player's seeks are parts of the same view, not views of their own."""
    if not range_header:
        return True
    first = range_header.partition("=")[2].partition("-")[0].strip()
    return first.isdigit() and int(first) == 0


def _attachment(url: str) -> str:
    """``Content-Disposition`` of a download: the object's base name, as a quoted ASCII filename (anything a
    header cannot carry safely, a quote, a backslash, a control or non-ASCII character, becomes ``_``)."""
    name = url.rstrip("/").rsplit("/", 1)[-1] or "video"
    safe = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)
    return f'attachment; filename="{safe}"'


MEDIA_RESPONSES: dict[int | str, dict[str, Any]] = {206: {"description": "the requested byte range"},
                                                     416: {"description": "range outside"}}
"""What a media route answers besides 200 (its OpenAPI ``responses``): this one and the evidence copy's."""
RangeHeader = Annotated[str | None, Header(alias="Range")]
Download = Annotated[bool, Query(description="as an attachment (an export: needs a reason)")]


@router.get("/media", response_class=StreamingResponse, responses=MEDIA_RESPONSES)
def media(url: S3Url, user: ViewerDep, audit: AuditDep, video: VideoDep, range_: RangeHeader = None,
          download: Download = False, reason: Reason = None) -> Response:
    """The object's bytes through the console (ranges honoured so a player can seek).

    Served as its own type for video and images only; anything else as an ``application/octet-stream``
    attachment; always ``nosniff`` with a sandboxing content-security policy (see ``media_headers``).
    ``download=true`` makes it an attachment named after the object: an export, which needs a ``reason``.

    Audited before the store is asked: every export (``video.export``), and a view (``video.view``) when it
    starts playing, not at each of the player's later ranged requests."""
    with answering("query"):
        video.media.parse(url)  # a URL outside the console's buckets is a 422, not an audited read
    if download:
        audit_read(audit, user, "video.export", url, asked(download=True, range=range_),
                   required_reason(reason, "to export a video"))
    elif _play_start(range_):
        audit_read(audit, user, "video.view", url, asked(range=range_), reason)
    with answering("query"):
        info = video.media.stat(url)
        size = info.size or 0
        try:
            byte_range = parse_range(range_, size)
        except RangeNotSatisfiable as exc:
            return Response(str(exc), status.HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE, media_type="text/plain",
                            headers={"Content-Range": f"bytes */{size}", **media_headers(None)[1]})
        body = video.media.read(url, byte_range)
    media_type, safety = media_headers(info.content_type)
    headers = {"Accept-Ranges": "bytes", "Cache-Control": "private, max-age=300", "ETag": f'"{info.etag}"', **safety}
    if download:
        headers["Content-Disposition"] = _attachment(url)
    if byte_range is None:
        headers["Content-Length"] = str(size)
        return StreamingResponse(body, media_type=media_type, headers=headers)
    headers["Content-Length"] = str(byte_range.length)
    headers["Content-Range"] = f"bytes {byte_range.start}-{byte_range.end}/{size}"
    return StreamingResponse(body, status.HTTP_206_PARTIAL_CONTENT, media_type=media_type, headers=headers)


@router.post("/tasks", response_model=CommandOut, status_code=status.HTTP_202_ACCEPTED)
def analyze(body: AnalyzeIn, user: OperatorDep, audit: AuditDep, video: VideoDep) -> CommandOut:
    """Ask for an analysis: validated like the job validates it, then published on video.commands (202: queued)."""
    detail = body.model_dump(mode="json")
    with answering("body"), audited(audit, user, "video.analyze", body.video_url, detail):
        return CommandOut(**video.analyze(body.video_url, body.camera_id, body.options, user.username))


@router.post("/tasks/{task_id}/cancel", response_model=CommandOut, status_code=status.HTTP_202_ACCEPTED)
def cancel(task_id: TaskId, user: OperatorDep, audit: AuditDep, video: VideoDep) -> CommandOut:
    """Stop a queued or running task (422 once it has ended)."""
    with answering("path"), audited(audit, user, "video.cancel", task_id, {}):
        return CommandOut(**video.cancel(task_id, user.username))


@router.post("/tasks/{task_id}/rerun", response_model=CommandOut, status_code=status.HTTP_202_ACCEPTED)
def rerun(task_id: TaskId, user: OperatorDep, audit: AuditDep, video: VideoDep) -> CommandOut:
    """Analyse a failed or cancelled task's video again, with its options, as a new task (422 for any other
    state). Asking twice names the same new task, which runs once."""
    with answering("path"), audited(audit, user, "video.rerun", task_id, {}):
        return CommandOut(**video.rerun(task_id, user.username))


@router.get("/tasks", response_model=list[TaskOut])
def tasks(_user: ViewerDep, video: VideoDep,
          limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[TaskOut]:
    """Tasks, newest request first."""
    return [TaskOut(**t) for t in video.tasks(limit)]


@router.get("/tasks/{task_id}", response_model=TaskOut)
def task(task_id: TaskId, _user: ViewerDep, video: VideoDep) -> TaskOut:
    with answering("path"):
        return TaskOut(**video.task(task_id))


@router.get("/tasks/{task_id}/objects", response_model=list[ObjectOut])
def objects(task_id: TaskId, user: ViewerDep, audit: AuditDep, video: VideoDep,
            reason: Reason = None) -> list[ObjectOut]:
    """What the analysis found, with each object's place in the synopsis and in the original."""
    audit_read(audit, user, "video.objects", task_id, {}, reason)
    with answering("path"):
        return [ObjectOut(**o) for o in video.objects(task_id)]


@router.get("/objects", response_model=list[ObjectOut])
def search(user: ViewerDep, audit: AuditDep, video: VideoDep,
           camera: Annotated[str, Query(pattern=f"^{CAMERA_ID.pattern}$", max_length=64)],
           start: Annotated[dt.datetime, Query(description="ISO-8601 with offset: first seen at or after")],
           end: Annotated[dt.datetime, Query(description="ISO-8601 with offset: first seen before")],
           cls: Annotated[Literal["person", "vehicle", "other"] | None, Query(alias="class")] = None,
           color: Annotated[str | None, Query(max_length=32)] = None,
           limit: Annotated[int, Query(ge=1, le=500)] = 100, reason: Reason = None) -> list[ObjectOut]:
    """Objects a camera saw first between start and end, newest first, filtered by class and colour (the same
    personal data as a task's objects, so audited as ``video.objects`` too, with the camera as its target)."""
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise invalid("query", name, "needs a UTC offset (e.g. +08:00)")
    if end <= start:
        raise invalid("query", "end", "must be after start")
    audit_read(audit, user, "video.objects", camera,
               asked(camera=camera, start=start, end=end, **{"class": cls}, color=color, limit=limit), reason)
    return [ObjectOut(**o) for o in video.search(camera, start, end, cls, color or None, limit)]
