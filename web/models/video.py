"""``/api/v1/video``: videos by camera and day, analysis commands, tasks, the objects found."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DayOut(BaseModel):
    day: str
    """City-time date (YYYY-MM-DD)."""
    videos: int


class VideoOut(BaseModel):
    url: str
    """``s3://videos/CAMERA/YYYY/MM/DD/HHMMSS_name``: what an analysis command names."""
    camera_id: str
    start_time: str
    """When the recording began (ISO-8601, city time)."""
    size: int
    name: str


class PlayableOut(BaseModel):
    state: Literal["ready", "transcoding", "failed"]
    media_url: str | None = None
    """The s3:// URL to play through ``/api/v1/video/media`` (the original or its WebM copy)."""
    error: str | None = None


class AnalyzeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    video_url: Annotated[str, Field(max_length=1100, description="s3://videos/CAMERA/YYYY/MM/DD/HHMMSS_name")]
    camera_id: Annotated[str | None, Field(max_length=64, description="default: the key's camera")] = None
    options: dict[str, Any] = Field(default_factory=dict, description="classes: [...], window: [from_s, to_s]")


class CommandOut(BaseModel):
    """The command as published on ``video.commands``."""

    task_id: str
    action: Literal["analyze", "cancel"]
    video_url: str
    camera_id: str
    requested_by: str
    requested_at: str
    options: dict[str, Any]


class TaskOut(BaseModel):
    """A ``video_task`` row: the fields every task has, plus whatever its state added (timings, counts, URLs)."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    status: str
    video_url: str = ""
    camera_id: str = ""
    progress: float | None = None
    error: str = ""


class ObjectOut(BaseModel):
    """A ``video.results`` record plus where it starts in the original video (``offset_s``, for seeking)."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str
    video_url: str
    camera_id: str
    object_id: int
    cls: str = Field(alias="class", serialization_alias="class")
    color: str
    first_seen: str
    last_seen: str
    track: list[list[float]]
    """``[seconds since first_seen, x, y, w, h]`` samples, in original-frame pixels."""
    thumbnail_url: str
    synopsis_url: str
    synopsis_time: float
    offset_s: float
    duration_s: float
