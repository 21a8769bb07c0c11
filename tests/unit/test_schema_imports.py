"""Lazy kio schema imports run one thread at a time (bus/protocol/schemas.py).

The broker preloads every schema in a thread while its event loop may import one too; on CPython 3.11 two threads
importing a kio version package and its modules at once can fail with `_DeadlockError`, which a broker answered as
UNKNOWN_SERVER_ERROR (CI: a CreateTopics on a fresh cluster; a Metadata and a Fetch in other runs).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter (nothing of kio's imported yet): while another thread holds the import lock, every kind of
# lazy lookup the broker and the clients make waits for it, and completes once it is released.
WAITS_FOR_THE_LOCK = """
import threading, time
from kio.static.constants import EntityType
from bus.protocol import client_codec, messages, schemas

lookups = {
    "request_class": lambda: messages.request_class(3, 8),
    "response_class": lambda: messages.response_class(19, 5),
    "shapes": lambda: messages.shapes(1, 11),
    "fields_in_any_version": lambda: messages._fields_in_any_version(
        60, EntityType.response, "DescribeClusterResponse"),
    "client_response": lambda: schemas.response_schema(2, 4),
}
for name, lookup in lookups.items():
    done = threading.Event()
    with schemas.IMPORT_LOCK:
        thread = threading.Thread(target=lambda: (lookup(), done.set()))
        thread.start()
        time.sleep(0.05)
        assert not done.is_set(), f"{name} imported while another thread held the import lock"
    assert done.wait(10), f"{name} did not complete once the lock was released"
print("ok")
"""


def test_every_lazy_schema_lookup_waits_for_the_import_lock() -> None:
    result = subprocess.run([sys.executable, "-c", WAITS_FOR_THE_LOCK], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_only_the_schemas_module_imports_kio_index() -> None:
    """kio's lazy loaders used anywhere else would import outside the lock."""
    offenders = []
    for path in sorted((ROOT / "bus").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if "kio.index" in names and path != ROOT / "bus/protocol/schemas.py":
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
