"""`controller.quorum.*` in server.properties: parsing, Kafka's defaults, and the combinations Kafka refuses."""

from __future__ import annotations

import pytest

from bus.broker.broker_quorum import quorum_config
from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError

VOTERS = "1@127.0.0.1:9093,2@localhost:9094,3@[::1]:9095"


def test_voters_and_timings_reach_the_quorum_config() -> None:
    config = load_broker_config({"controller.quorum.voters": VOTERS, "controller.quorum.fetch.timeout.ms": "3000"})
    assert config.quorum_voters == {1: ("127.0.0.1", 9093), 2: ("localhost", 9094), 3: ("::1", 9095)}
    quorum = quorum_config(config)
    assert quorum.voters == frozenset({1, 2, 3})
    # Kafka's QuorumConfig defaults, but for the fetch timeout set above.
    assert (quorum.election_timeout_ms, quorum.fetch_timeout_ms, quorum.election_backoff_max_ms,
            quorum.request_timeout_ms, quorum.retry_backoff_ms) == (1000, 3000, 1000, 2000, 20)


def test_no_voters_means_no_quorum() -> None:
    assert load_broker_config({}).quorum_voters == {}


@pytest.mark.parametrize(("props", "fragment"), [
    ({"controller.quorum.voters": "1@127.0.0.1"}, "expected id@host:port"),
    ({"controller.quorum.voters": "x@127.0.0.1:9093"}, "expected id@host:port"),
    ({"controller.quorum.voters": "1@:9093"}, "expected id@host:port"),
    ({"controller.quorum.voters": "1@h:99999"}, "expected id@host:port"),
    ({"controller.quorum.voters": "1@h:1,1@h:2"}, "voter 1 is listed twice"),
    ({"controller.quorum.voters": "2@h:1,3@h:2"}, "node id 1 must be included in the set of voters"),
    ({"controller.quorum.voters": "1@h:1", "process.roles": "broker"}, "must not be included"),
    ({"controller.quorum.election.timeout.ms": "0"}, "controller.quorum.election.timeout.ms"),
    ({"controller.quorum.request.timeout.ms": "soon"}, "controller.quorum.request.timeout.ms"),
])
def test_bad_quorum_settings_are_refused_with_the_key_named(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_broker_config(props)
