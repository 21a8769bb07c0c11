"""SaslAuthenticate on the controller listener: the same exchange as on a client listener
(`bus.broker.apis.sasl_authenticate`), so a node dialling a SASL controller listener logs in before its first KRaft
RPC, as Kafka's controllers serve it."""

from bus.broker.apis.sasl_authenticate import API_KEY, MAX_VERSION, MIN_VERSION, handle

__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "handle"]
