"""Read a :class:`~supervisor.resources.ClusterSnapshot` from Ray (the only Ray calls of diagnosis)."""

from __future__ import annotations

from .resources import ClusterSnapshot, NodeResources, PlacementGroupRecord

__all__ = ["read_snapshot"]


def read_snapshot() -> ClusterSnapshot:
    """Nodes (with totals), cluster-wide available resources and every placement group, from the GCS."""
    import ray
    from ray.util import placement_group_table

    nodes = tuple(
        NodeResources(
            node_id=str(n["NodeID"]),
            address=str(n.get("NodeManagerAddress", "")),
            total={k: float(v) for k, v in n.get("Resources", {}).items()},
            alive=bool(n.get("Alive", False)),
        )
        for n in ray.nodes()
    )
    pgs = []
    for pg_id, info in placement_group_table().items():
        bundles = info.get("bundles", {})
        pgs.append(
            PlacementGroupRecord(
                pg_id=str(pg_id),
                name=str(info.get("name", "")),
                state=str(info.get("state", "UNKNOWN")),
                strategy=str(info.get("strategy", "")),
                bundles=tuple(dict(bundles[i]) for i in sorted(bundles)),
                bundle_nodes={int(k): str(v) for k, v in info.get("bundles_to_node_id", {}).items()},
            )
        )
    return ClusterSnapshot(nodes=nodes, available=dict(ray.available_resources()), placement_groups=tuple(pgs))
