"""happybase's own test suite (its sdist's tests/test_api.py) against a gateway process.

The suite is not vendored: the sdist of the installed happybase version is fetched once with
``pip download`` (the package registry, as ``make install`` uses) into the venv, and its
test_api.py is loaded from the archive as published. Two fixes are applied here, not in the
file, as upstream made them in "Fix test" (happybase #264), without which every case fails in
setup: ``assert_raises`` (nose, gone) is pytest.raises, and HAPPYBASE_PORT is read as a string
where Connection needs an int. Every test function of the file runs, in file order, on one
worker (the cases share the suite's table, as under nose).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.processes.gateway import start_gateway

VERSION = importlib.metadata.version("happybase")
CACHE = Path(sys.prefix) / "share" / "happybase-sdist"


def _suite_source() -> str:
    archive = CACHE / f"happybase-{VERSION}.tar.gz"
    if not archive.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", f"happybase=={VERSION}", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, "--quiet", "--dest", str(CACHE)], check=True, timeout=300)
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"happybase-{VERSION}/tests/test_api.py")
        assert member is not None, f"happybase {VERSION}'s sdist has no tests/test_api.py"
        return member.read().decode("utf-8")


SOURCE = _suite_source()
CASES = [
    node.name for node in ast.parse(SOURCE).body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.ModuleType]:
    gateway = start_gateway(tmp_path_factory.mktemp("happybase-suite") / "data")
    saved = {k: os.environ.get(k) for k in ("HAPPYBASE_HOST", "HAPPYBASE_PORT")}
    os.environ.update(HAPPYBASE_HOST="127.0.0.1", HAPPYBASE_PORT=str(gateway.port))
    try:
        module = types.ModuleType("happybase_test_api")
        module.__dict__["assert_raises"] = pytest.raises  # fix #264, part 1
        exec(compile(SOURCE, f"happybase-{VERSION}/tests/test_api.py", "exec"), module.__dict__)
        module.connection_kwargs["port"] = int(module.HAPPYBASE_PORT)  # fix #264, part 2
        module.setup_module()
        yield module
        module.teardown_module()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        gateway.kill()


def test_the_suite_is_there() -> None:
    """Guards the parametrization below against silently collecting nothing."""
    assert len(CASES) >= 25 and "test_atomic_counters" in CASES


@pytest.mark.xdist_group("happybase-suite")
@pytest.mark.parametrize("case", CASES)
def test_happybase_api(suite: types.ModuleType, case: str) -> None:
    getattr(suite, case)()
