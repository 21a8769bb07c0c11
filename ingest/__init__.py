"""ingest: the capture side of the pipeline (docs/architecture.md, the book's 10.3.1).

The city simulator that plays the capture devices and recognisers (`simulate`, built from `city`,
`traffic`, `values`, and `producer` for the bus). What it produces is defined in `contracts/`
(records, topics, the deployment map). The Spark job that loads captures into HBase is
`spark_jobs/ingest_captures.py`.
"""
