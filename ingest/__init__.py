"""ingest: the capture side of the pipeline (ARCHITECTURE.md, the book's 10.3.1).

The record schemas and their validation (`schema`), the HBase layout of captures (`tables`), and
the city simulator that plays the capture devices and recognisers (`simulate`, built from `city`,
`traffic`, `values`, and `producer` for the bus). The Spark job that loads captures into HBase is
`spark_jobs/ingest_captures.py`.
"""
