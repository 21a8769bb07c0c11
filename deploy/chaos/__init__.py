"""Jepsen-style fault runs against the bus on hosts made of network namespaces (``python -m deploy.chaos``).

The nemesis (:mod:`.nemesis`) deals seeded faults to the broker hosts (:mod:`.hosted`) while the workload's clients
(:mod:`.workload`) record what they were told; the checker (:mod:`.checker`) holds that against the final log.
"""
