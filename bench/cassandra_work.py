"""What Cassandra did during a benchmark run, counted by Cassandra itself: its virtual tables
``system_views.local_write_latency`` / ``local_read_latency`` (per table: how many writes
and reads it served) and ``system_views.thread_pools`` (requests, mutations, reads, Paxos
work by stage). ``snapshot()`` before and after; ``per_delivery()`` divides the difference.

The CPU meter says how much Cassandra spent; this says on what (which table, how many
requests), so that a profile of the store's work per trigger needs no guess.
"""

from __future__ import annotations

from typing import Any

from cassandra.cluster import Cluster

Counts = dict[str, int]


def snapshot(hosts: tuple[str, ...] = ("127.0.0.1",)) -> Counts:
    """``'write:<ks>.<table>'``, ``'read:<ks>.<table>'`` and ``'pool:<name>'`` → count so
    far (the node's own counters since it started; one node, or summed over ``hosts``)."""
    out: Counts = {}
    for host in hosts:
        cluster = Cluster([host], protocol_version=4)
        try:
            s = cluster.connect()
            for kind, table in (("write", "local_write_latency"), ("read", "local_read_latency")):
                for r in s.execute(f"SELECT keyspace_name, table_name, count "
                                   f"FROM system_views.{table}"):
                    # system.paxos (Paxos state) and system.batches count; the schema's
                    # and other housekeeping keyspaces (system_*) do not.
                    if r.count and not r.keyspace_name.startswith("system_"):
                        key = f"{kind}:{r.keyspace_name}.{r.table_name}"
                        out[key] = out.get(key, 0) + int(r.count)
            for r in s.execute("SELECT name, completed_tasks FROM system_views.thread_pools"):
                key = f"pool:{r.name}"
                out[key] = out.get(key, 0) + int(r.completed_tasks or 0)
        finally:
            cluster.shutdown()
    return out


def per_delivery(before: Counts, after: Counts, deliveries: int) -> dict[str, Any]:
    """What changed, per delivery (rounded), biggest first; empty without deliveries."""
    if deliveries <= 0:
        return {}
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: round(v / deliveries, 3)
            for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v > 0}
