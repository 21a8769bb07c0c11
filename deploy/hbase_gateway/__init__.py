"""Embedded HBase: a Thrift1 gateway that happybase talks to, over a durable sorted store.

No HBase server can run here, so the solution ships this stand-in; in production the same
happybase code points at a real HBase Thrift server instead. Modules, each with one job:

* ``__main__`` - command line, signals, lifecycle
* ``server``   - sockets, threads, Thrift transports/protocols, error mapping
* ``handler``  - each Thrift1 ``Hbase`` method, translated onto the store
* ``store``    - durable cells in SQLite (WAL), admin catalog, compaction
* ``cells``    - HBase's version / TTL visibility rules (pure)
* ``filters``  - HBase's filters and the scan loop that drives them (pure)
* ``filter_language`` - the Thrift filter language's parser (pure)
* ``scanners`` - scanner ids, leases and the scan result pipeline
* ``limits``   - what one client may ask (rows, bytes, scanners, connections)
"""
