"""video: surveillance video in object storage and the synopsis engine (issue 7).

storage (S3 via minio) -> analyze (detect -> track -> classify, per time segment, stitched) ->
synopsis (tube rearrangement) -> render (WebM, thumbnails, index) -> results (bus records, HBase rows).
scene generates synthetic footage with ground truth; evaluate scores tubes against it.
"""
