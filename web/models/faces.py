"""``/api/v1/captures/faces``: a similar-face search's request and answer.

The request checks what a model can (types, ranges, lengths, the feature's shape and norm) so a mistake is a 422
naming its field before anything is audited or read; what needs the app (the configured maximum span, the map's
districts and checkpoints, whether a capture exists) the route checks.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from contracts.audit import REASON_MAX
from contracts.records import decode_feature, is_checkpoint_id
from web.models.captures import Location
from web.services.face_index import unit_vector

MAX_LIMIT = 1000


def _feature(value: str | None) -> str | None:
    if value is not None:
        try:
            unit_vector(decode_feature(value))
        except ValueError as exc:  # binascii.Error is a ValueError: not base64
            raise ValueError(f"not a face feature (base64 of 128 float32 of norm 1): {exc}") from None
    return value


def _checkpoint(value: str | None) -> str | None:
    if value is not None and not is_checkpoint_id(value):
        raise ValueError("not a checkpoint id (district#crossroad#direction#index, e.g. 330102#1#0#0)")
    return value


class FaceSearchIn(BaseModel):
    """Faces like a capture's (``capture``: a face capture's record id) or like a ``feature``, in ``[from, to)``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    capture: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    feature: Annotated[str | None, StringConstraints(max_length=2000), AfterValidator(_feature)] = None
    """Base64 of 128 little-endian float32, L2-normalised (the record schema's ``feature``)."""
    start: Annotated[AwareDatetime, Field(alias="from")]
    end: Annotated[AwareDatetime, Field(alias="to")]
    district: Annotated[str, StringConstraints(pattern=r"^\d{6}$")] | None = None
    checkpoint: Annotated[str | None, StringConstraints(max_length=40), AfterValidator(_checkpoint)] = None
    min_score: Annotated[float, Field(ge=0, le=1)] | None = None
    """Cosine similarity a face must reach; ``[console] face_search_min_score`` when not given."""
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = 100
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=REASON_MAX)]
    """Why (a case number): required, kept in the audit trail with the search."""

    def query_vector(self) -> np.ndarray:
        """The feature as the index's unit row (only when ``feature`` was given; it is valid by then)."""
        return unit_vector(decode_feature(self.feature or ""))


class FaceHit(BaseModel):
    record_id: str
    score: float
    """Cosine similarity with the query, rounded to 6 decimals (the query capture itself: 1.0)."""
    capture_time: str
    """ISO-8601 in the city's offset."""
    checkpoint_id: str
    location: Location | None
    """Null when the map is missing or does not know the checkpoint."""


class FaceSearchOut(BaseModel):
    items: list[FaceHit]
    """Best score first (ties: older first); the page draws them on the map in time order."""
    matched: int
    """How many faces reached ``min_score`` in the range and place (``items`` holds the best ``limit``)."""
    min_score: float
    searched_faces: int
    """Faces in the index when the search ran (every searchable day, not only the range's)."""


class FaceIndexStatus(BaseModel):
    ready: bool
    faces: int
    days: int
    scanned: int
    """HBase rows read by the build so far."""
    elapsed_s: float
    build_seconds: float | None
    set_aside: int
    """Bus records the follower set aside (malformed or foreign) since the console started."""
    error: str | None
    """Why the last build attempt failed (it is retried), or null."""
