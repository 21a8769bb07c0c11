"""The network layer (Kafka's network module): below the broker and the raft driver, above the wire protocol.

- `socket_server`, `connection`, `request_queue`: the listeners, one client connection, the broker-wide request bounds.
- `listener_security`: how each listener secures the connections it accepts; `metrics`: their authentication counts.
- `network_client`, `node_security`: connections this node opens to other nodes, and how they are secured.
- `interfaces`: what the network needs of the layer above (`RequestHandler`, which the broker's KafkaApis is).
- `errors`: the exceptions that end a connection.
"""
