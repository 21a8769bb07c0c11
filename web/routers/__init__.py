"""One router per API resource (and ``pages`` for the HTML pages)."""
