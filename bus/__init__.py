"""The data bus: a Kafka-wire-compatible broker, its client and its command-line tools."""
