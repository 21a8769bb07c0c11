"""Capture images: what the simulator's devices see, rendered as JPEGs and put into the ``captures`` bucket.

A capture record's ``image_url`` must name an object that exists (issue 28), so the simulator renders each
capture's image (:mod:`.render`), uploads it under a key derived from the record (:mod:`.keys`, :mod:`.store`)
and publishes the record only once the upload is done or has failed for good (:mod:`.stage`).
"""
