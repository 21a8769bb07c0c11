"""``[hbase]`` as every client reads it (contracts/hbase.py): values no client can use are refused naming the key."""

from __future__ import annotations

import pytest

from contracts.config import Config
from contracts.hbase import HBaseClient, HBaseSettingsError


def test_the_config_and_its_overrides() -> None:
    config = Config({"hbase": {"host": "hbase-1", "port": 9095, "transport": "framed", "protocol": "compact",
                               "timeout_ms": 5000}})
    client = HBaseClient.from_config(config)
    assert client == HBaseClient("hbase-1", 9095, "framed", "compact", 5000)
    assert HBaseClient.from_config(config, host="dr", port=19090).options() == {
        "host": "dr", "port": 19090, "transport": "framed", "protocol": "compact", "timeout": 5000}
    assert HBaseClient.from_config(Config({})) == HBaseClient()  # happybase's own defaults
    assert client.at("dr", 1).where == "HBase Thrift at dr:1 (framed transport, compact protocol)"


@pytest.mark.parametrize(("section", "named"), [
    ({"transport": "zlib"}, "[hbase] transport"),
    ({"protocol": "json"}, "[hbase] protocol"),
    ({"timeout_ms": 0}, "[hbase] timeout_ms"),
    ({"timeout_ms": "30s"}, "[hbase] timeout_ms"),
    ({"port": 70000}, "[hbase] port"),
])
def test_unusable_values_are_refused_naming_the_key(section: dict[str, object], named: str) -> None:
    with pytest.raises(HBaseSettingsError, match=named.replace("[", r"\[").replace("]", r"\]")):
        HBaseClient.from_config(Config({"hbase": section}))
