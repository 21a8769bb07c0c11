"""Failover drills: `python -m dr_mirror.drill --scenario primary-loss|mirror-crash|failback [--report DIR]`.

Self-contained: starts two sites (`sites.py`: a `bus broker`, an HBase gateway and the real
capture ingest job each, on free ports) and the mirror primary -> dr (`python -m dr_mirror` with the
properties `make up` generates); only once both sites are ready (each ingest job has finished a first
micro-batch, the mirror answers) does it start the device fleet (the simulator's traffic generator
`ingest.traffic`: real records and ids) and a consumer group standing in for the group-based loaders, so
a slow Spark start never becomes mirror lag (`setup_s` in the report says how long getting ready took).
A supervisor (`supervisor.py`) restarts an ingest job (from its checkpoint) or a mirror (from
the target's log end) that exits while the drill needs it, at most `--max-restarts` times each, and the
report counts every restart; what a scenario kills on purpose is never restarted. Then the drill injects
the failure and measures. `--no-ingest` runs the same at the bus level (no HBase, no Spark).
- primary-loss: the primary machine room is lost (kill -9 of its broker, gateway and ingest job).
  Devices that hear no acknowledgement for `--failover-after` seconds switch to the DR bootstrap and
  re-send their replay window (the last `--replay` seconds they sent; recognition servers have disks);
  the group resumes on DR from the offsets the mirror translated and committed there. Measured: RPO
  (records the primary acknowledged that the mirror had not copied, and their time span), RTO (failure
  -> first record DR acknowledged; -> first record the group read on DR; -> first new record's row in DR
  HBase), rows in DR HBase against every record acknowledged (the end-to-end loss: zero when the replay
  window covers the mirror's lag), duplicates (replayed records in the DR topics; rows cannot duplicate:
  row keys are deterministic).
- mirror-crash: kill -9 of the mirror, restart after `--outage` seconds. Measured: the lag it built up
  (the RPO had the primary been lost then), the time to catch up, and that DR's topics and HBase hold
  exactly the primary's records afterwards. With `--images` each site also gets an object store, the devices put
  their images into the primary's, the DR image copier (`python -m dr_mirror.images`) is killed -9 with the mirror
  and restarted with it, and the report counts the images missing at the DR site next to the records missing.
- failback: primary-loss, then the primary room returns. Its bus log has diverged past what the mirror
  had copied (those records were re-sent to DR), so its broker starts on an empty log dir and a reverse
  mirror dr -> primary copies the topics back with their offsets (and the group's translated offsets);
  once it has caught up, devices hold their records a moment (DR drained), the reverse mirror stops,
  devices and the group switch back to the primary, its ingest job restarts from a new checkpoint (its
  HBase kept its rows; rewriting them is harmless), and the mirror primary -> dr resumes where DR's log
  ends. Measured: records written during the outage, copy-back time, how long devices held, and that
  the primary's topics and HBase hold every record acknowledged by either site.
Writes `drill.json`, `drill.md` and `drill.png` (`report.py`) to `--report`. Exit status 0 when the drill ran,
whatever it measured.

Modules: `load.py` (the device fleet and the group standing in for the loaders), `scenarios.py` (the drill
and its three scenarios), `sites.py`, `supervisor.py`, `report.py`; `__main__.py` is the command.
"""
