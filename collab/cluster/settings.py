"""The cluster's settings, as fields of ``collab.config.Settings``: the Redis bus between nodes
on one PostgreSQL store. Declarations only; ``collab.cluster.node`` reads them."""

from __future__ import annotations

from dataclasses import dataclass

from ..setting_fields import Group

CLUSTER = Group("cluster", "several nodes on one PostgreSQL --store, relaying edits through Redis")


@dataclass(frozen=True)
class ClusterFields:
    __slots__ = ()

    # redis://host:port relays committed updates and presence between nodes (needs a
    # PostgreSQL store); see collab.cluster.node.
    bus: str = CLUSTER.setting(
        "",
        "URL",
        "redis://host:port/0 (needs a postgresql:// --store); with a password in it"
        " (redis://:pw@host), prefer TETHER_BUS",
    )
    node_id: str = CLUSTER.setting(
        "", "NAME", "this node's name on the bus and in /health (default: host-pid)"
    )
    # Updates and presence waiting to be published while Redis is slow; beyond it they are
    # dropped (counted) and reconciliation from PostgreSQL delivers the updates.
    bus_queue_bytes: int = CLUSTER.setting(
        16 * 1024 * 1024,
        "SIZE",
        "waiting to be published to Redis; beyond it, dropped",
        positive=True,
    )
    bus_stream_length: int = CLUSTER.setting(
        10_000, "N", "entries kept per document's Redis stream (approximate)", positive=True
    )
    # Every loaded document's head is compared with PostgreSQL this often: what the bus lost
    # (Redis down, a node killed between COMMIT and XADD) is backfilled within it.
    bus_reconcile_interval: float = CLUSTER.setting(
        1.0,
        "SECONDS",
        "loaded documents are checked against PostgreSQL this often",
        positive=True,
    )
    bus_presence_ttl: float = CLUSTER.setting(
        30.0,
        "SECONDS",
        "another node's editor's presence lasts this long without news",
        positive=True,
    )
