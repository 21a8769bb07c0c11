"""dr_mirror: continuous mirroring of the data topics to the DR cluster (the book's 10.3.6).

A MirrorMaker 2 work-alike that copies record batches byte for byte (same codec, same partition),
keeps target offsets equal to the source's where the source has no gaps, records an exact per-batch
offset sync where it has, and translates consumer-group offsets through those syncs.

Layout: `settings` (mm2.properties and the book-era flags), `batches` (sans-IO batch selection and
header rewriting), `formats` (MM2's offset-sync and checkpoint records), `offset_map` (per-partition
offset translation), `wire` (Fetch/Produce/InitProducerId over our client connection), `worker` (the
data plane), `topics` (topic, partition and config sync), `checkpoints` (group offsets), `metrics`,
`cli` (`python -m dr_mirror`).
"""
