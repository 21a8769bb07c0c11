"""web: the operator console (docs/architecture.md "The operator console").

One FastAPI app serves the pages and the JSON API under ``/api/v1``. The layout is FastAPI's
"bigger applications" one: ``settings`` (loaded once), ``backends`` (the shared clients of HBase,
the bus and object storage), ``dependencies`` (what routes ask for: the current user and its role,
a backend, the app's services; the one module that reads ``app.state``), one router per resource in
``routers/``, Pydantic models per resource in ``models/``.
"""
