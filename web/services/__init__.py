"""The console's read and command logic over its backends, free of HTTP.

Plain functions and small classes over a happybase connection, the deployment map and the Kafka admin
client; the routers in ``web/routers`` translate their answers and errors into HTTP. Keeping them free
of FastAPI lets the tests drive them straight against a real gateway and broker.
"""
