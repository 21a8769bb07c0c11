"""What the executors' packed environment leaves out: only libraries no job's package imports."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from spark_jobs import packaging


def imported_roots(package: Path) -> set[str]:
    """The top-level module names every file of a package imports (at any depth: jobs import lazily)."""
    roots: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
    return roots


def test_no_job_package_imports_an_excluded_requirement() -> None:
    used = set().union(*(imported_roots(packaging.ROOT / name) for name in packaging.PACKAGES))
    for requirement, (modules, why) in packaging.EXCLUDED.items():
        if requirement == "pyspark":
            continue  # the cluster's own PySpark serves the jobs' imports of it
        assert not used & set(modules), f"{requirement} is excluded ({why}) but a job's package imports it"


def test_requirements_are_the_project_dependencies_minus_the_excluded(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["kio>=0.6", "Faiss_CPU>=1.9", "uvicorn[standard]>=0.30",'
                         ' "pillow>=10", "pyspark[sql]>=4.2"]\n')
    assert packaging.requirements(pyproject) == ["kio>=0.6", "pillow>=10"]


def test_every_excluded_requirement_is_a_project_dependency() -> None:
    """A stale entry would hide a rename: the renamed requirement would be packed again unnoticed."""
    pyproject = tomllib.loads((packaging.ROOT / "pyproject.toml").read_text())
    assert set(packaging.EXCLUDED) <= {packaging._name(spec) for spec in pyproject["project"]["dependencies"]}
