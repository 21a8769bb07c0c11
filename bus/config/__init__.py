"""Kafka-style configuration: `server.properties` files, `--override`, broker and topic config keys."""
