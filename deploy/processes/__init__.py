"""The one home for starting and stopping the solution's servers.

One module per server, each started the same way for the tests, the benchmarks and the drills: `broker.py`,
`cluster.py`, `gateway.py` (the HBase gateway), `mirror.py`, `dr_images.py` (the DR image copier), `monitor.py`,
`console.py`, `surveillance.py`; and the whole pipelines the tests and benchmarks run: `make_up.py` (`make up`
itself), `ingest.py` (the simulator and the Spark ingest job), `video.py` (the video services and their ingest job).

Every child process (these, and those `make up`, the DR site, the object store's `weed`, the Spark launcher and the
console's drill button start) is spawned and stopped by `contracts/processes.py`, the only `subprocess.Popen` in the
repository; `contracts/ports.py` finds free ports and waits for a listener. Those two live in `contracts`, the
package every part may import, so a Spark job or the console starts a process without importing `deploy`.
"""
