"""Kafka-style command-line tools, one module per `bus` sub-command."""
