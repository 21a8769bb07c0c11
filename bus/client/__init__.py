"""The native Python client: producer, consumer and admin, configured with the Java client's names."""
