"""Read a :class:`~supervisor.placement.resources.ClusterSnapshot` from Ray (the only Ray calls of diagnosis)."""

from __future__ import annotations

from .resources import ClusterSnapshot, NodeResources, PlacementGroupRecord

__all__ = ["read_snapshot", "read_detached_dead_creator"]


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


def read_detached_dead_creator() -> set[str]:
    """Ids of live placement groups that are detached and whose creating job is dead: nobody removes
    them unless a person (or the supervisor that made them) does.

    Ray's public table leaves these flags out, so this reads the GCS rows directly; on any surprise
    (another Ray version) it answers with an empty set rather than guess.
    """
    try:
        from ray._private import state
        from ray.core.generated import gcs_pb2

        accessor = state.state._connect_and_get_accessor()
        out = set()
        for raw in accessor.get_placement_group_table():
            row = gcs_pb2.PlacementGroupTableData.FromString(raw)
            if row.is_detached and row.creator_job_dead and row.state != gcs_pb2.PlacementGroupTableData.REMOVED:
                out.add(row.placement_group_id.hex())
        return out
    except Exception:
        return set()
