"""`bus features describe`: the feature versions the cluster supports and has finalized, like kafka-features.sh.

Prints FeatureCommand's line per feature the broker supports, sorted by name: `Feature: metadata.version
SupportedMinVersion: 1	SupportedMaxVersion: 7	FinalizedVersionLevel: 7	Epoch: 3` (tab-separated; a feature not
finalized shows level 0, an unknown epoch `-`). The levels print as numbers: Kafka spells metadata.version levels
as its own release names (3.7-IV4), which say nothing about this broker. The answer is the ApiVersions response's
features (KIP-584), which is where Java's `Admin.describeFeatures` reads them; a broker that advertises none, as
ours does today (it has no versioned features), gives no lines. Only `describe` exists: with nothing to finalize
there is nothing to upgrade, downgrade or disable.
"""

from __future__ import annotations

import argparse

from bus.tools._common import add_connection_args, admin_client, run_guarded


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Describe the cluster's feature versions (kafka-features).",
                       description="This tool manages feature flags in Kafka.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client.")
    actions = p.add_subparsers(dest="action", metavar="{describe}", required=True)
    actions.add_parser("describe", help="Describes the current active feature flags.")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("features", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        features = admin.describe_features()
    epoch = "-" if features.finalized_epoch is None else str(features.finalized_epoch)
    for name in sorted(features.supported):
        supported = features.supported[name]
        print(f"Feature: {name}\tSupportedMinVersion: {supported.min_version}\t"
              f"SupportedMaxVersion: {supported.max_version}\tFinalizedVersionLevel: {features.finalized.get(name, 0)}"
              f"\tEpoch: {epoch}")
    return 0
