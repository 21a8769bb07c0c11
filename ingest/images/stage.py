"""Between the simulator's loop and the bus: each capture's image rendered and uploaded on a few threads, and the
record handed back for publishing only when its image exists, or marked when it cannot (issue 28).

The loop never waits for an upload unless ``max_pending`` captures are already in flight: that bound is the
back-pressure that keeps memory flat while the store is slow. Finished captures come back through a queue the loop
drains, so the producer and every counter stay on the loop's thread. Order per device is not kept (a retry may let a
later capture overtake), which the bus's consumers do not need.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from contracts.records import IMAGE_ERROR, encode

from ..traffic import Emitted
from . import keys
from .render import Renderer
from .store import Uploader

UPLOADED = "uploaded"
UPLOAD_FAILED = "upload_failed"
"""``image_error`` of a record whose image could not be stored (after retries, or the store was down)."""
NO_IMAGE = "no_image"
"""``image_error`` of a record whose device sent no image (the ``missing`` image fault)."""
RENDER_FAILED = "render_failed"
"""``image_error`` when drawing the image raised: a simulator bug must not lose the record."""
OUTCOMES = (UPLOADED, UPLOAD_FAILED, NO_IMAGE, RENDER_FAILED)
WORKERS = 3
MAX_PENDING = 64


@dataclass(frozen=True)
class Ready:
    """A capture ready for the bus: its record (re-encoded if marked) and what became of its image."""

    emitted: Emitted
    outcome: str


def marked(emitted: Emitted, reason: str) -> Ready:
    """``emitted`` without an image: ``image_url`` empty and ``image_error`` saying why."""
    record = {**(emitted.record or {}), "image_url": "", IMAGE_ERROR: reason}
    return Ready(replace(emitted, value=encode(record), record=record), reason)


class ImageStage:
    """Renders and uploads images on ``workers`` threads; :meth:`submit` and :meth:`ready` hand back finished
    captures. Used from one thread (the simulator's loop)."""

    def __init__(self, renderer: Renderer, uploader: Uploader, workers: int = WORKERS,
                 max_pending: int = MAX_PENDING) -> None:
        self.renderer = renderer
        self.uploader = uploader
        self.max_pending = max_pending
        self.pending = 0
        self._done: queue.SimpleQueue[Ready] = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="capture-image")

    def submit(self, emitted: Emitted) -> list[Ready]:
        """Start ``emitted``'s image; returns the captures finished meanwhile. Waits while ``max_pending`` are in
        flight. While the store is down the record is marked at once (nothing to render or wait for)."""
        finished = self.ready()
        while self.pending >= self.max_pending:
            finished.append(self._done.get())
            self.pending -= 1
        if self.uploader.down():
            finished.append(marked(emitted, UPLOAD_FAILED))
            return finished
        self.pending += 1
        self._pool.submit(self._work, emitted)
        return finished

    def ready(self) -> list[Ready]:
        """The captures finished so far, without waiting."""
        finished = []
        while True:
            try:
                finished.append(self._done.get_nowait())
            except queue.Empty:
                return finished
            self.pending -= 1

    def drain(self) -> list[Ready]:
        """Wait for every capture in flight (the run is ending)."""
        finished = []
        while self.pending:
            finished.append(self._done.get())
            self.pending -= 1
        return finished

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _work(self, emitted: Emitted) -> None:
        try:
            result = self._image(emitted)
        except Exception:  # any bug in drawing: the record still goes out, marked
            result = marked(emitted, RENDER_FAILED)
        self._done.put(result)

    def _image(self, emitted: Emitted) -> Ready:
        record = emitted.record or {}
        data = self.renderer.jpeg(emitted.kind, record, emitted.camera)
        if data is None:
            return marked(emitted, NO_IMAGE)
        if self.uploader.upload(keys.key_of(record["image_url"]), data):
            return Ready(emitted, UPLOADED)
        return marked(emitted, UPLOAD_FAILED)
