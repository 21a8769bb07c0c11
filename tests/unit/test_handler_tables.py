"""Each broker's handler table is its own: replacing a handler on one (as test_broker_limits does to make a
handler raise) must not change what another broker in the same process serves. It did: the table was the
process-wide cached dict, and a later test in the same worker got UNKNOWN_SERVER_ERROR for every Metadata."""

from __future__ import annotations

from pathlib import Path

from bus.broker.apis import handlers
from bus.broker.broker import Broker
from bus.config.broker import load_broker_config


def test_replacing_a_handler_on_one_broker_leaves_the_others_and_the_cached_table_alone(tmp_path: Path) -> None:
    brokers = []
    for name in ("one", "two"):
        config = load_broker_config({"log.dirs": str(tmp_path / name), "node.id": "1", "log.cleaner.enable": "false",
                                     "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
        brokers.append(Broker(config))
    try:
        first, second = brokers
        original = second.apis.handlers[3]
        first.apis.handlers[3] = first.apis.handlers[18]
        assert second.apis.handlers[3] is original
        assert handlers()[3] is original
    finally:
        for broker in brokers:
            broker.logs.close()
            broker.metadata_log.close()
