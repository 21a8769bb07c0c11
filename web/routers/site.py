"""``GET /api/v1/site``: which site this console runs at, whether it acts, and where the active site's console is.

Open pages ask it every few seconds (`static/js/common.js`): a console that stops acting (a switchover) shows its
banner and sends the operator's page to the active site's console (`web/site.py`, `web/standby.py`). Any logged-in
user may ask: it names sites and URLs, no personal data.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from web.dependencies import ViewerDep
from web.site import ConsoleSite

router = APIRouter(prefix="/api/v1", tags=["site"])


class SiteOut(BaseModel):
    site: Literal["primary", "dr"] | None
    """This console's site; None: a solution without a DR site."""
    active: Literal["primary", "dr"]
    """The site that runs the business."""
    switching_to: Literal["primary", "dr"] | None
    acting: bool
    """Whether this console acts (read-only otherwise)."""
    active_console: str | None
    """Where to send operators: the active site's console, while this one stands by."""
    banner: str | None
    """Why this console is read-only (None while it acts)."""


@router.get("/site", response_model=SiteOut)
def site(request: Request, _user: ViewerDep) -> SiteOut:
    console_site: ConsoleSite = request.app.state.site
    state = console_site.state()
    return SiteOut(site=state.site, active=state.active, switching_to=state.switching_to,  # type: ignore[arg-type]
                   acting=state.acting, active_console=state.active_console, banner=state.banner())
