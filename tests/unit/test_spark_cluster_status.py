"""The wait for a standalone cluster's workers tolerates the master's UI while it starts.

Spark's master UI attaches its pages one by one; until ``/json`` is attached, the root page answers a request for
it in HTML. The wait treated that as fatal, and `make up SPARK=N` and the cluster tests failed once in a CI run
(JSONDecodeError on the master's HTML page). Here an HTTP server answers ``/json/`` as that UI does while starting:
HTML first, then the JSON status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deploy.processes.spark_cluster import SparkCluster


class StartingMasterUI(BaseHTTPRequestHandler):
    """HTML for the first two requests (the root page standing in for ``/json``), then one worker ALIVE."""

    answered = 0

    def do_GET(self) -> None:  # http.server's name for the GET handler
        type(self).answered += 1
        if type(self).answered <= 2:
            body, kind = b"<!DOCTYPE html><html><body>Spark Master</body></html>", "text/html;charset=utf-8"
        else:
            body, kind = json.dumps({"aliveworkers": 1, "status": "ALIVE"}).encode(), "text/json;charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def ui() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StartingMasterUI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_html_from_a_starting_master_ui_is_not_yet_ready_not_fatal(ui: int, tmp_path: Path) -> None:
    cluster = SparkCluster(tmp_path, workers=1, webui_port=ui)
    with pytest.raises(ValueError):  # json's JSONDecodeError
        cluster.status()
    cluster._wait_alive(timeout=10)  # the second HTML answer, then the JSON status
    assert StartingMasterUI.answered == 3
