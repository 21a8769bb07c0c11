"""The layers of `bus/` (Kafka's modules): which package may import which, read from the code with `ast`.

Every module under bus/ is parsed and every import counted wherever it stands: at the top, inside a function,
under `if TYPE_CHECKING:`, relative or absolute, and `importlib.import_module("bus....")` with a literal name.
An import from a package into one its rules forbid fails the test with the file, the line and the import.

The directions (issue 34):

- `protocol` imports no other `bus` package; `config` none but `protocol`;
- `log`, `network` and `security` nothing above them (`security` may read the controller's metadata image);
- `raft` not `broker`, `controller`, `coordinator`, `client`, `tools`;
- `controller` not `broker`, `coordinator`, `client`, `tools`;
- `coordinator` not `broker`, `client`, `tools`;
- `client` not `broker`, `controller`, `coordinator`, `raft`, `log`, `tools`;
- `tools` not `broker` (but the `bus broker` start command, `bus/tools/broker_cmd.py`) nor `coordinator`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import bus

BUS = Path(bus.__file__).parent

ABOVE_STORAGE = frozenset({"broker", "controller", "coordinator", "raft", "client", "tools"})
# package -> the bus packages it may import, when only a few are allowed
ONLY: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "config": frozenset({"protocol"}),
}
# package -> the bus packages it must not import
NOT: dict[str, frozenset[str]] = {
    "log": ABOVE_STORAGE,
    "network": ABOVE_STORAGE,
    "security": ABOVE_STORAGE,
    "raft": frozenset({"broker", "controller", "coordinator", "client", "tools"}),
    "controller": frozenset({"broker", "coordinator", "client", "tools"}),
    "coordinator": frozenset({"broker", "client", "tools"}),
    "client": frozenset({"broker", "controller", "coordinator", "raft", "log", "tools"}),
    "tools": frozenset({"broker", "coordinator"}),
}
# the exceptions the issue names: (importing package, its file or None for any, the module it may import)
ALLOWED: tuple[tuple[str, str | None, str], ...] = (
    ("security", None, "bus.controller.image"),  # the controller's metadata image (ACLs, SCRAM credentials)
    ("tools", "tools/broker_cmd.py", "bus.broker"),  # `bus broker` starts the broker
)
# the packages at the top, which may import anything: every other package of bus/ has a rule above
TOP = frozenset({"broker"})


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    module: str  # what it names, absolute: "bus.broker.kafka_apis", "bus.controller.image.MetadataImage"


def _package_of(path: Path, root: Path) -> tuple[str, ...]:
    """The dotted package a module sits in: bus/broker/apis/fetch.py -> ("bus", "broker", "apis")."""
    return path.relative_to(root.parent).parent.parts


def imports(path: Path, root: Path) -> list[Import]:
    """Every import of the module at `path` (inside package `root`), at any depth, as absolute names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(path, root)
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found += [Import(path, node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in ("import_module",
                                                                                          "__import__")):
            found.append(Import(path, node.lineno, node.args[0].value))
    return found


def _allowed(package: str, file: str, module: str) -> bool:
    return any(package == pkg and (where is None or where == file) and (module == allowed or
                                                                        module.startswith(allowed + "."))
               for pkg, where, allowed in ALLOWED)


def violations(root: Path) -> list[str]:
    """Each import under `root` (a `bus` package directory) that runs against the layers, as
    "bus/raft/driver.py:38: raft imports bus.broker.network_client (raft may not import broker)"."""
    name = root.name
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) < 2:  # bus/cli.py, bus/__main__.py: above every package
            continue
        package, file = relative.parts[0], relative.as_posix()
        for imp in imports(path, root):
            parts = imp.module.split(".")
            if parts[0] != name or len(parts) < 2 or parts[1] == package:
                continue
            target = parts[1]
            if package in ONLY:
                bad = target not in ONLY[package]
                rule = f"{package} may import only {sorted(ONLY[package]) or 'no other bus package'}"
            else:
                bad = target in NOT.get(package, frozenset())
                rule = f"{package} may not import {target}"
            if bad and not _allowed(package, file, imp.module):
                found.append(f"{name}/{file}:{imp.line}: {package} imports {imp.module} ({rule})")
    return found


def test_bus_imports_follow_the_layers() -> None:
    assert violations(BUS) == []


def test_every_bus_package_has_a_rule() -> None:
    """A new package is placed in the layers (or at the top) before it can be imported from below unnoticed."""
    packages = {p.name for p in BUS.iterdir() if (p / "__init__.py").exists()}
    assert packages - ONLY.keys() - NOT.keys() - TOP == set()
    assert (ONLY.keys() | NOT.keys() | TOP) - packages == set(), "a rule names a package bus/ no longer has"


def test_the_reader_sees_every_module() -> None:
    """Not vacuous: the known imports across the layers are found (at the top and inside a function)."""
    seen = {(imp.file.relative_to(BUS).as_posix(), imp.module) for path in BUS.rglob("*.py")
            for imp in imports(path, BUS)}
    assert ("raft/driver.py", "bus.network.network_client.NodeConnection") in seen
    assert any(file == "tools/broker_cmd.py" and module.startswith("bus.broker.") for file, module in seen)


# -- the checker itself, on a made-up tree -------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "bus"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == root.parent:
                break
            (parent / "__init__.py").touch()
        path.write_text(text)
    return root


@pytest.mark.parametrize(("source", "expected"), [
    ("from bus.broker.network_client import NodeConnection\n", "bus.broker.network_client.NodeConnection"),
    ("import bus.broker.kafka_apis\n", "bus.broker.kafka_apis"),
    ("from bus import broker\n", "bus.broker"),
    ("from ..broker import kafka_apis\n", "bus.broker.kafka_apis"),
    ("def f():\n    from bus.broker import kafka_apis\n", "bus.broker.kafka_apis"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from bus.controller.controller import QuorumController\n", "bus.controller.controller.QuorumController"),
    ("import importlib\nm = importlib.import_module('bus.coordinator.group')\n", "bus.coordinator.group"),
])
def test_a_back_arrow_fails_naming_file_and_import(tmp_path: Path, source: str, expected: str) -> None:
    root = _tree(tmp_path, {"raft/driver.py": source, "broker/kafka_apis.py": "", "broker/network_client.py": ""})
    found = violations(root)
    assert len(found) == 1, found
    assert found[0].startswith("bus/raft/driver.py:") and f"imports {expected} " in found[0]


def test_the_rules_and_their_exceptions(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "protocol/a.py": "from bus.config import broker\n",  # protocol: no other package
        "config/a.py": "from bus.protocol import header\nfrom bus.security import acls\n",  # config: protocol only
        "security/a.py": "from bus.controller.image import MetadataImage\n",  # the named exception
        "security/b.py": "from bus.controller.controller import QuorumController\n",
        "network/a.py": "from bus.security.authenticator import SaslAuthenticator\nfrom bus.raft import wire\n",
        "tools/broker_cmd.py": "from bus.broker.broker import Broker\n",  # the named exception
        "tools/topics_cmd.py": "from bus.broker.broker import Broker\nfrom bus.client import admin\n",
        "client/a.py": "from bus.log import log\n",
        "controller/a.py": "from bus.raft.driver import RaftDriver\nfrom bus.network import errors\n",
        "broker/a.py": "from bus.coordinator import group\nfrom bus.tools import _common\n",  # the top: anything
    })
    found = sorted(violations(root))
    assert [line.split(": ")[0] + " " + line.split(" imports ")[1].split(" ")[0] for line in found] == [
        "bus/client/a.py:1 bus.log.log",
        "bus/config/a.py:2 bus.security.acls",
        "bus/network/a.py:2 bus.raft.wire",
        "bus/protocol/a.py:1 bus.config.broker",
        "bus/security/b.py:1 bus.controller.controller.QuorumController",
        "bus/tools/topics_cmd.py:1 bus.broker.broker.Broker",
    ]
