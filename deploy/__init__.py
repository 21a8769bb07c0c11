"""deploy: how the solution is started: `make up` (`up.py`), the embedded servers, a cluster, the DR site."""
