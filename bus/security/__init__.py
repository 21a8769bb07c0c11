"""Security at the network edge, sans-IO: TLS contexts, SASL servers and clients, principals.

Nothing here reads or writes a socket: the broker's connection code feeds SASL tokens in and sends what
comes out, and hands the `ssl.SSLContext`s built here to asyncio. Keys, defaults, messages and mapping
rules follow Apache Kafka, so a Kafka `server.properties` and Kafka clients work unchanged.
"""
