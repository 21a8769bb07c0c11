"""A librdkafka mock cluster in its own process: prints its bootstrap address, lives until stdin closes.

`test.mock.num.brokers` makes a client start an in-process mock Kafka cluster listening on real
sockets; its brokers' addresses come back in the client's metadata. Any other client (here: the
mirror) can then connect to it, which proves the mirror depends on nothing of our broker.
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer


def main() -> None:
    client = Producer({"bootstrap.servers": "", "test.mock.num.brokers": 1})
    broker = next(iter(client.list_topics(timeout=10).brokers.values()))
    print(f"{broker.host}:{broker.port}", flush=True)
    sys.stdin.read()  # until the test closes the pipe
    client.flush(1)


if __name__ == "__main__":
    main()
