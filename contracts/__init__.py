"""contracts: what the parts of the solution agree on (docs/architecture.md), in one place.

Topic names (`topics`), capture record schemas and their validation (`records`), the deployment map
(`deployment_map`), HBase table layouts (`tables`) and the solution config loader (`config`). Every
other package imports this one; it imports none of them, so a contract changes in one edit and no
part can drift from another.
"""
