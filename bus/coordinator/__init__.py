"""Coordinators (Kafka's GroupCoordinator; the transaction coordinator lives beside it)."""
