"""``/api/v1/video``: browse and play videos (viewer), ask for an analysis or cancel one (operator, audited),
read tasks and the objects they found (viewer). Live task progress reaches pages over the SSE hub's
``video.status`` topic; these routes are what a page re-reads when it hears of a change.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from contracts.records import CITY_TZ
from contracts.video import CAMERA_ID, TASK_ID
from web.dependencies import AuditDep, OperatorDep, SettingsDep, ViewerDep
from web.models.video import AnalyzeIn, CommandOut, DayOut, ObjectOut, PlayableOut, TaskOut, VideoOut
from web.routers.data_common import answering, audited, invalid
from web.services.video import VideoService
from web.services.video_media import RangeNotSatisfiable, TranscodesBusy, media_headers, parse_range

router = APIRouter(prefix="/api/v1/video", tags=["video"])
_service_lock = threading.Lock()


def get_video(request: Request, settings: SettingsDep) -> VideoService:
    """The app's one VideoService (its bus producer and transcode state live as long as the app)."""
    state = request.app.state
    with _service_lock:
        if getattr(state, "video", None) is None:
            state.video = VideoService(settings, state.backends)
        return state.video


VideoDep = Annotated[VideoService, Depends(get_video)]
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


@router.get("/media", response_class=StreamingResponse,
            responses={206: {"description": "the requested byte range"}, 416: {"description": "range outside"}})
def media(url: S3Url, _user: ViewerDep, video: VideoDep,
          range_: Annotated[str | None, Header(alias="Range")] = None) -> Response:
    """The object's bytes through the console (ranges honoured so a player can seek).

    Served as its own type for video and images only; anything else as an ``application/octet-stream``
    attachment; always ``nosniff`` with a sandboxing content-security policy (see ``media_headers``)."""
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
def objects(task_id: TaskId, _user: ViewerDep, video: VideoDep) -> list[ObjectOut]:
    """What the analysis found, with each object's place in the synopsis and in the original."""
    with answering("path"):
        return [ObjectOut(**o) for o in video.objects(task_id)]


@router.get("/objects", response_model=list[ObjectOut])
def search(_user: ViewerDep, video: VideoDep,
           camera: Annotated[str, Query(pattern=f"^{CAMERA_ID.pattern}$", max_length=64)],
           start: Annotated[dt.datetime, Query(description="ISO-8601 with offset: first seen at or after")],
           end: Annotated[dt.datetime, Query(description="ISO-8601 with offset: first seen before")],
           cls: Annotated[Literal["person", "vehicle", "other"] | None, Query(alias="class")] = None,
           color: Annotated[str | None, Query(max_length=32)] = None,
           limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[ObjectOut]:
    """Objects a camera saw first between start and end, newest first, filtered by class and colour."""
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise invalid("query", name, "needs a UTC offset (e.g. +08:00)")
    if end <= start:
        raise invalid("query", "end", "must be after start")
    return [ObjectOut(**o) for o in video.search(camera, start, end, cls, color or None, limit)]
