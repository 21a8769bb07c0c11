"""The Thrift1 IDL the gateway serves: the very ``Hbase.thrift`` shipped inside happybase.

Serving the client's own copy means the wire contract cannot drift from what happybase sends.
It is located without importing happybase (whose import would load the client side too), and
registered under happybase's module name so one process never holds two copies of the types.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import thriftpy2

MODULE_NAME = "Hbase_thrift"  # the name happybase loads it under


def idl_path() -> Path:
    spec = importlib.util.find_spec("happybase")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("happybase is not installed: it ships the Hbase.thrift IDL the gateway serves")
    return Path(next(iter(spec.submodule_search_locations))) / "Hbase.thrift"


def load() -> ModuleType:
    module = sys.modules.get(MODULE_NAME)
    if module is None:
        module = thriftpy2.load(str(idl_path()), module_name=MODULE_NAME)
    return module


Hbase = load()
