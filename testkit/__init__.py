"""Instruments shared by the tests and the benchmarks; not part of the product.

Hostile and raw Kafka clients (`hostile.py`, `raw_kafka.py`), topic and record helpers (`clients.py`), a test PKI
(`tls.py`), the console's search data (`web_data.py`, `search.py`, `faces.py`), the surveillance and monitoring
scenes (`surveillance.py`, `city.py`), the mirror's bus helpers (`mirror.py`) and `polling.py`'s deadline wait.
Starting and stopping the solution's processes is `deploy/processes/`'s job, and pytest fixtures stay in tests/.
Nothing in the product imports this package; tests/ and benchmarks/ do.
"""
