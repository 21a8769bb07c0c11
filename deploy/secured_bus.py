"""One site's bus as `make up` runs it: `deploy/cluster.py`'s combined broker+controller nodes, secured, with the
service identities and the ACL table applied.

Both sites are made the same way. The primary's bus lives in ``DATA/bus-cluster`` with its secrets in
``DATA/secrets``; the DR site's in ``DATA/dr/bus-cluster`` with ``DATA/secrets/dr``. Each runs SASL_SSL with SCRAM on
every listener, TLS, the StandardAuthorizer with no access without an ACL (`deploy/cluster_security.py`), and each
has its own ``broker`` / ``admin`` passwords and its own principals' passwords, so a credential taken at one site
opens nothing at the other. The DR site shares the primary's CA: a client trusts one ``ca.pem`` for both. The ACL
table (`contracts/bus_acls.py`) is the same at both sites, with the primary's topic names, in each site's role:
the primary active, the DR site standby (the mirror writes there, the DR site's loaders read there).
"""

from __future__ import annotations

from pathlib import Path

from contracts import bus_client
from contracts.bus_acls import ADMIN, Role
from contracts.topics import Topics
from deploy import acls, cluster
from deploy.cluster_security import ADMIN_USER, ClusterSecurity

START_S = 60.0
"""How long the quorum, then each broker's registration, may take (deploy.cluster's --start-timeout)."""
STOP_S = 30.0
"""How long a node's controlled shutdown may take before it is killed (its --stop-timeout)."""
SECURED_MARKER = "secured"
"""A file in the bus's directory: it was made secured (an older make up made it PLAINTEXT)."""


class SecuredBus:
    """A site's bus: ``nodes`` (from :func:`deploy.cluster.plan`) in ``directory`` (one cluster id kept there, as
    `python -m deploy.cluster` keeps it), secured with ``security``; ``name`` labels its status lines."""

    def __init__(self, name: str, directory: Path, nodes: list[cluster.Node], security: ClusterSecurity,
                 site: str, metrics_port: int = 0) -> None:
        if (directory / "cluster.id").exists() and not (directory / SECURED_MARKER).exists():
            raise SystemExit(f"{directory} holds a bus made without security by an earlier make up: remove it (its "
                             f"topics are lost) or use another --data-dir")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SECURED_MARKER).touch()
        self.name, self.dir, self.nodes, self.security = name, directory, nodes, security
        self.site, self.metrics_port = site, metrics_port
        self.id = cluster.cluster_id(directory)
        self.bootstrap = ",".join(node.bootstrap for node in nodes)
        self.processes = cluster.NodeProcesses(directory, security)
        self.admin = security.client_properties() | {"bootstrap.servers": self.bootstrap}
        """The super user's client settings (Java keys), to wait for the nodes and apply the ACLs."""

    def start(self) -> None:
        for node in self.nodes:
            metrics = {"bus.metrics.listener": f"{node.host}:{self.metrics_port}"} \
                if self.metrics_port and node is self.nodes[0] else {}
            self.processes.launch(node, self.nodes, self.id, cluster.replication_defaults(len(self.nodes)) | metrics)

    def ready(self) -> list[str]:
        """Wait for the quorum and for every broker to be registered (the monitor and the surveillance service
        create topics at start, with up to three replicas), then the status lines; TimeoutError if they do not come."""
        leader = cluster.wait_for_quorum(self.bootstrap, len(self.nodes), START_S, self.admin)
        for node in self.nodes:
            cluster.wait_for_broker(self.bootstrap, node.node_id, START_S, self.admin)
        metrics = f"  (metrics http://{self.nodes[0].host}:{self.metrics_port}/metrics)" if self.metrics_port else ""
        return [f"  {self.name:<14} {len(self.nodes)} node(s) (broker+controller), quorum leader {leader}, "
                f"cluster id {self.id}  (logs {self.dir}/node-*.log){metrics}",
                *(f"  {'':<14}{cluster.describe(node)}" for node in self.nodes),
                f"  {'':<14} Kafka bootstrap.servers={self.bootstrap}  SASL_SSL, SCRAM-SHA-512, CA "
                f"{self.security.truststore}; as the super user: --command-config "
                f"{bus_client.properties_file(self.security.directory, ADMIN)}"]

    def grant(self, topics: Topics, role: Role) -> str:
        """Every principal's credential and client properties, and the ACL table of this site in ``role`` applied;
        the status line."""
        passwords = acls.ensure_principals(self.security.directory, self.bootstrap, self.security.truststore,
                                           self.security.passwords[ADMIN_USER])
        created, deleted = acls.apply(self.admin, topics, passwords, role, self.site)
        return (f"  {'':<14} {len(passwords)} principals, a properties file each in {self.security.directory} "
                f"(0600); ACLs of the {self.site} site, {role.value}: {created} created, {deleted} removed  (python "
                f"-m deploy.acls --show --role {role.value} --site {self.site} --data-dir "
                f"{self.security.directory.parent})")

    def stop(self) -> None:
        self.processes.stop(STOP_S)
