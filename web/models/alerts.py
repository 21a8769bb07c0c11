"""``/api/v1/alerts`` and ``/api/v1/silences``: Alertmanager API v2's shapes plus the console's acknowledgement."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from monitoring.matchers import Matcher


class AlertStatus(BaseModel):
    state: Literal["active", "suppressed", "resolved"]
    silencedBy: list[str]
    inhibitedBy: list[str]


class Ack(BaseModel):
    by: str
    at: str
    """RFC 3339, UTC."""


class AlertOut(BaseModel):
    fingerprint: str
    status: AlertStatus
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str
    ack: Ack | None
    """Who acknowledged this incident, or null."""


class MatcherModel(BaseModel):
    """Alertmanager's matcher object; a regular expression is anchored (``^(?:re)$``)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$", max_length=100)]
    value: Annotated[str, Field(max_length=1000)]
    isRegex: bool = False
    isEqual: bool = True

    def matcher(self) -> Matcher:
        return Matcher(self.name, self.value, self.isRegex, self.isEqual)

    def text(self) -> str:
        """As Alertmanager writes it (``device_ip="10.0.0.1"``, ``alertname=~"Device.*"``): the audit's target."""
        op = ("=~" if self.isEqual else "!~") if self.isRegex else ("=" if self.isEqual else "!=")
        return f'{self.name}{op}"{self.value}"'


def _regex(matcher: MatcherModel) -> MatcherModel:
    if matcher.isRegex:
        try:
            re.compile(matcher.value)
        except re.error as exc:
            raise ValueError(f"value is not a regular expression: {exc}") from None
    return matcher


class SilenceIn(BaseModel):
    """A new silence; ``createdBy`` is the caller, never taken from the body."""

    model_config = ConfigDict(extra="forbid")

    matchers: Annotated[list[Annotated[MatcherModel, AfterValidator(_regex)]], Field(min_length=1, max_length=20)]
    startsAt: AwareDatetime | None = None
    """Default: now."""
    endsAt: AwareDatetime
    comment: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]


class SilenceStatus(BaseModel):
    state: Literal["active", "pending", "expired"]


class SilenceOut(BaseModel):
    id: str
    matchers: list[MatcherModel]
    startsAt: str
    endsAt: str
    createdBy: str
    comment: str
    status: SilenceStatus
