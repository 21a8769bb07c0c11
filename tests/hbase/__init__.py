"""Tests of the embedded HBase gateway (deploy/hbase_gateway), judged through happybase."""
