"""Fixtures for the media tests (uploads, camera simulator): one real SeaweedFS per module, and the
``python -m video ...`` command lines run as real processes against it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.object_store import ObjectStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with ObjectStore(tmp_path_factory.mktemp("s3"), port=0) as running:
        yield running


def store_flags(store: ObjectStore) -> list[str]:
    return ["--endpoint", store.url, "--s3-credentials", str(store.credentials_file("cameras"))]


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
