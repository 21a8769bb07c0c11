"""Kafka wire formats kept sans-IO: bytes in, bytes out, so the broker, tools and tests share one codec."""
