"""The service identities of a secured solution: each principal's SCRAM credential, client properties and ACLs.

``python -m deploy.acls --show [--data-dir DATA] [--role active|standby]`` prints the ACL table of
`contracts/bus_acls.py` at a site in that role (the primary is active, the DR site standby) with the topic names of the
solution config (``DATA/solution.toml`` when `make up` wrote one), one binding per line, the principal as
``User:<name>``. `make up` calls :func:`ensure_principals` and :func:`apply` on every start, for each site's bus:
a principal's password is made once, random, and kept only in ``DATA/secrets/<principal>.properties`` (the DR site's
in ``DATA/secrets/dr/``; owner-only), which is the file the service reads and an operator hands to any Kafka tool
(``--command-config``). Applying is idempotent and exact: missing credentials and ACLs are created, and an ACL of a
service principal that the table no longer names is deleted, so the brokers hold the table and nothing else.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from bus.client.admin import AdminClient, UserScramCredentialUpsertion
from contracts import bus_client
from contracts.bus_acls import ADMIN, MATRIX, Role, all_bindings, placed
from contracts.config import Config
from contracts.config import load as load_config
from contracts.topics import Topics
from deploy.pki import write_private
from dr_mirror import site_acls

MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 8192
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def client_properties(bootstrap: str, truststore: Path, user: str, password: str) -> dict[str, str]:
    """A principal's Kafka client properties on a SASL_SSL bus (what `contracts.bus_client` reads back)."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": f'{_SCRAM_LOGIN} required username="{user}" password="{password}";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore.resolve())}


def ensure_principals(directory: Path, bootstrap: str, truststore: Path, admin_password: str) -> dict[str, str]:
    """Every principal's properties file in ``directory`` (``admin``'s with ``admin_password``, the others' with a
    password made on the first start and read back ever after; ``bootstrap`` rewritten each time, as the ports may
    change); principal -> password."""
    passwords: dict[str, str] = {}
    for principal in bus_client.PRINCIPALS:
        path = bus_client.properties_file(directory, principal)
        if principal == ADMIN:
            password = admin_password
        elif path.exists():
            password = bus_client.to_librdkafka(bus_client.read_properties(path))["sasl.password"]
        else:
            password = secrets.token_urlsafe(24)
        text = "".join(f"{k}={v}\n" for k, v in client_properties(bootstrap, truststore, principal, password).items())
        write_private(path, text)
        passwords[principal] = password
    return passwords


def apply(admin_settings: Mapping[str, str], topics: Topics, passwords: Mapping[str, str],
          role: Role = Role.ACTIVE, site: str | None = None) -> tuple[int, int]:
    """Upsert each service principal's SCRAM credential and apply the table of ``site`` in ``role``
    (`dr_mirror/site_acls.py`), as the super user ``admin`` (``admin_settings`` in Java keys); (created, deleted)."""
    with AdminClient(dict(admin_settings)) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, MECHANISM, ITERATIONS, password)
             for user, password in passwords.items() if user in MATRIX])
        return site_acls.sync(admin, topics, role, site)


def show(config: Config, role: Role = Role.ACTIVE, site: str | None = None) -> str:
    """The table as `--show` prints it."""
    lines = [binding.line() for binding in all_bindings(Topics.from_config(config), role, site)]
    return "\n".join([f"# {len(lines)} ACLs at the {placed(role, site)} site, {role.value} (ALLOW from any host); "
                      f"User:{ADMIN} is a super user", *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.acls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", required=True, help="print the ACL table, one binding a line")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="make up's data directory: its solution.toml names the topics (default: --config's)")
    parser.add_argument("--config", type=Path, default=None, help="the solution config (default: contracts')")
    parser.add_argument("--role", type=Role, choices=list(Role), default=Role.ACTIVE,
                        help="the site's role: active (the primary under make up) or standby (the DR site)")
    parser.add_argument("--site", choices=("primary", "dr"), default=None,
                        help="which site's table (default: the primary when active, the DR site when standby)")
    args = parser.parse_args(argv)
    path = args.config
    if path is None and args.data_dir is not None and (args.data_dir / "solution.toml").exists():
        path = args.data_dir / "solution.toml"
    try:
        table = show(load_config(path), args.role, args.site)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
