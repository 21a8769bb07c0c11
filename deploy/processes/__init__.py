"""The one home for starting and stopping the solution's processes.

`child.py` is where a process is spawned (`subprocess.Popen`) and stopped (SIGTERM, then SIGKILL after a grace
period); `ports.py` finds free ports and waits for a listener. The modules beside them start one kind of server each
(`broker.py`, `cluster.py`, `gateway.py` the HBase gateway, `mirror.py`, `monitor.py`, `console.py`,
`surveillance.py`) the same way for the tests, the benchmarks and the drills; `make up`, the DR site, the object
store's `weed` and the Spark jobs (`spark_jobs/launch.py`) spawn and stop their children through `child.py` too.

A leaf package: of the solution's own code it imports `bus.client` only (the admin client `cluster.py` asks about
the quorum), beside the standard library and the client libraries its servers are reached with (psutil, happybase,
httpx), so any layer may use it.
"""
