"""``python -m deploy.retention --show``: the time to live of every table that keeps personal data, as the HBase
shell's ``alter`` statements that give an existing table the TTL ``[retention]`` asks for, and each bucket's
lifecycle rule as MinIO's ``mc ilm`` adds it.

The solution's parts create their tables with these TTLs; a table created before (or on a real HBase whose tables
an administrator made) keeps its own until altered, which Thrift1 cannot do. ``--data-dir`` reads the config
``make up`` wrote there (``DATA/solution.toml``) when no ``--config`` is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from contracts import config as solution_config
from contracts.retention import Retention
from contracts.tables import Families, captures, console, surveillance


def _statements(layouts: Mapping[str, Families], ttl_s: int) -> Iterator[str]:
    for table, families in layouts.items():
        for family in families:
            yield f"alter '{table}', NAME => '{family}', TTL => {ttl_s}"


def statements(retention: Retention) -> list[str]:
    """One ``alter`` per family of each table with personal data, in the HBase shell's syntax."""
    return [*_statements(captures.TABLES, retention.captures_ttl_s),
            *_statements(surveillance.TABLES, retention.hits_ttl_s),
            *_statements({console.AUDIT_TABLE: console.TABLES[console.AUDIT_TABLE]}, retention.audit_ttl_s)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.retention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    solution_config.add_config_flag(parser)
    parser.add_argument("--data-dir", type=Path, default=None, help="make up's data directory (its solution.toml)")
    parser.add_argument("--show", action="store_true", required=True, help="print the alter statements")
    args = parser.parse_args(argv)
    path = args.config
    if path is None and args.data_dir is not None:
        path = args.data_dir / "solution.toml"
    try:
        retention = Retention.from_config(solution_config.load(path))
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    print(f"# captures {retention.captures_days:g} days, hits {retention.hits_days:g} days, "
          f"audit {retention.audit_days:g} days")
    for statement in statements(retention):
        print(statement)
    print("# object storage: a lifecycle rule per bucket (S3 PutBucketLifecycleConfiguration; the embedded store gets "
          "them at start)")
    for bucket, days in retention.bucket_days().items():
        print(f"mc ilm rule add --expire-days {days} <alias>/{bucket}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
