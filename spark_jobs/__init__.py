"""spark_jobs: the Spark jobs (`spark-submit`): the capture ingest into HBase and the video ingest and synopsis jobs."""
