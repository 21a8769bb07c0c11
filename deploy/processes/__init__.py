"""The one home for starting and stopping the solution's processes.

`child.py` is where a process is spawned (`subprocess.Popen`) and stopped (SIGTERM, then SIGKILL after a grace
period); `ports.py` finds free ports and waits for a listener. The modules beside them start one kind of server each
(`broker.py`, `cluster.py`, `gateway.py` the HBase gateway, `mirror.py`, `monitor.py`, `console.py`,
`surveillance.py`) the same way for the tests, the benchmarks and the drills; `make_up.py` runs `make up` itself,
`ingest.py` the simulator and the Spark ingest job, `video.py` the video pipeline's services and its ingest job.
`make up`, the DR site, the object store's `weed` and the Spark jobs (`spark_jobs/launch.py`) spawn and stop their
children through `child.py` too.

`child.py`, `ports.py` and the single-server starters form a leaf: of the solution's own code they import
`bus.client` only (the admin client `cluster.py` asks about the quorum), beside the standard library and the client
libraries their servers are reached with (psutil, happybase, httpx), so any layer may use them. `make_up.py`,
`ingest.py` and `video.py` start whole pipelines and sit above them: they also import `contracts`, `spark_jobs.launch`,
`video` and `deploy.object_store`, and only the tests and the benchmarks use them.
"""
