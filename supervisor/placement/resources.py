"""Why placement groups are not ready: pure arithmetic over a snapshot of the cluster.

Two questions, answered without Ray calls so they are unit-tested and cheap to repeat every few
seconds while a pool waits:

* :func:`find_infeasibility`: can this demand *ever* be met by the cluster as it is (no autoscaler)?
  A bundle bigger than every node, a STRICT_PACK group bigger than every node, more GPUs than the
  cluster has: these fail at once instead of waiting out a timeout.
* :func:`diagnose`: while waiting, what is missing and who holds it: bundles requested vs placed, per
  resource what the pool asks for against the cluster's total and available, pending bundles, and the
  other placement groups that hold the resources (by name, so the user can remove them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "NodeResources",
    "PlacementGroupRecord",
    "ClusterSnapshot",
    "PoolDemand",
    "ResourceDiagnosis",
    "find_infeasibility",
    "diagnose",
    "format_resources",
]

# Placement-group states in which a group holds (or is about to hold) cluster resources.
_HOLDING_STATES = frozenset({"CREATED", "PREPARED", "RESCHEDULING"})


def _add(total: dict[str, float], extra: Mapping[str, float]) -> dict[str, float]:
    for key, value in extra.items():
        total[key] = total.get(key, 0.0) + float(value)
    return total


def _sum(bundles: Iterable[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        _add(total, bundle)
    return total


def _fits(need: Mapping[str, float], have: Mapping[str, float]) -> bool:
    return all(have.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0)


def format_resources(resources: Mapping[str, float]) -> str:
    """``{"CPU": 4.0, "GPU": 1.0}`` → ``"CPU 4, GPU 1"`` (stable order: CPU, GPU, then others)."""
    order = sorted(resources, key=lambda k: (k not in ("CPU", "GPU"), k != "CPU", k))
    return ", ".join(f"{k} {resources[k]:g}" for k in order) or "nothing"


@dataclass(frozen=True)
class NodeResources:
    """A node's total resources (what Ray could ever schedule there)."""

    node_id: str
    address: str
    total: Mapping[str, float]
    alive: bool = True


@dataclass(frozen=True)
class PlacementGroupRecord:
    """One row of Ray's placement-group table, reduced to what diagnosis needs."""

    pg_id: str
    name: str
    state: str
    strategy: str
    bundles: tuple[Mapping[str, float], ...]
    bundle_nodes: Mapping[int, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or f"(unnamed {self.pg_id[:12]})"

    @property
    def holds(self) -> dict[str, float]:
        return _sum(self.bundles) if self.state in _HOLDING_STATES else {}


@dataclass(frozen=True)
class ClusterSnapshot:
    """Nodes, available resources and placement groups, read at one moment."""

    nodes: tuple[NodeResources, ...]
    available: Mapping[str, float]
    placement_groups: tuple[PlacementGroupRecord, ...] = ()

    @property
    def alive_nodes(self) -> list[NodeResources]:
        return [n for n in self.nodes if n.alive]

    @property
    def total(self) -> dict[str, float]:
        return _sum(n.total for n in self.alive_nodes)


@dataclass(frozen=True)
class PoolDemand:
    """What a pool asks for: one entry per placement group (its name and its bundles)."""

    pool: str
    strategy: str
    placement_groups: tuple[tuple[str, tuple[Mapping[str, float], ...]], ...]

    @property
    def bundle_count(self) -> int:
        return sum(len(b) for _, b in self.placement_groups)

    @property
    def total(self) -> dict[str, float]:
        return _sum(b for _, bundles in self.placement_groups for b in bundles)

    @property
    def resource_kinds(self) -> set[str]:
        return {k for _, bundles in self.placement_groups for b in bundles for k, v in b.items() if v > 0}


def _largest(nodes: list[NodeResources], keys: Iterable[str]) -> dict[str, float]:
    return {k: max((n.total.get(k, 0.0) for n in nodes), default=0.0) for k in keys}


def find_infeasibility(demand: PoolDemand, snapshot: ClusterSnapshot) -> str | None:
    """Explain why ``demand`` can never be placed on the current nodes, or return None.

    Assumes no autoscaler: the nodes that exist are all there will be.
    """
    nodes = snapshot.alive_nodes
    if not nodes:
        return "the cluster has no alive nodes"
    strategy = demand.strategy.upper()
    for name, bundles in demand.placement_groups:
        for index, bundle in enumerate(bundles):
            if not any(_fits(bundle, n.total) for n in nodes):
                return (
                    f"bundle {index} of {name} needs {format_resources(bundle)} but no node has that much "
                    f"(largest node: {format_resources(_largest(nodes, bundle))})"
                )
        need = _sum(bundles)
        if strategy == "STRICT_PACK" and not any(_fits(need, n.total) for n in nodes):
            return (
                f"{name} is STRICT_PACK: its {len(bundles)} bundles need {format_resources(need)} on one node, "
                f"but the largest node has {format_resources(_largest(nodes, need))}"
            )
        if strategy == "STRICT_SPREAD":
            hosts = sum(1 for n in nodes if _fits(bundles[0], n.total))
            if hosts < len(bundles):
                return f"{name} is STRICT_SPREAD over {len(bundles)} nodes but only {hosts} node(s) can hold one bundle"
    total = snapshot.total
    short = {k: (v, total.get(k, 0.0)) for k, v in demand.total.items() if v > total.get(k, 0.0) + 1e-9}
    if short:
        parts = "; ".join(f"{k}: asks {need:g}, cluster has {have:g}" for k, (need, have) in sorted(short.items()))
        return f"pool {demand.pool} asks for more than the whole cluster has ({parts})"
    return None


@dataclass(frozen=True)
class ResourceLine:
    """One resource kind: what the pool asks for, what the cluster has in total and free now."""

    resource: str
    requested: float
    total: float
    available: float


@dataclass(frozen=True)
class ResourceDiagnosis:
    """What a waiting pool is missing, ready to log (:meth:`as_fields`) or show (:meth:`summary`)."""

    pool: str
    bundles_requested: int
    bundles_placed: int
    resources: tuple[ResourceLine, ...]
    pending: tuple[str, ...]
    blockers: tuple[str, ...]

    def summary(self) -> str:
        res = "; ".join(
            f"{r.resource} asks {r.requested:g} (cluster total {r.total:g}, available {r.available:g})" for r in self.resources
        )
        text = f"pool {self.pool}: {self.bundles_placed}/{self.bundles_requested} bundles placed; {res}"
        if self.pending:
            text += f"; pending: {', '.join(self.pending)}"
        text += f"; held by other placement groups: {', '.join(self.blockers)}" if self.blockers else "; no other placement group holds these resources"
        return text

    def as_fields(self) -> dict[str, object]:
        return {
            "bundles_requested": self.bundles_requested,
            "bundles_placed": self.bundles_placed,
            "resources": {r.resource: {"requested": r.requested, "total": r.total, "available": r.available} for r in self.resources},
            "pending": list(self.pending),
            "blocking_placement_groups": list(self.blockers),
        }


def diagnose(demand: PoolDemand, snapshot: ClusterSnapshot, own_pg_ids: Iterable[str] = ()) -> ResourceDiagnosis:
    """Describe what ``demand`` is waiting for, given the cluster and which placement groups are its own."""
    own = set(own_pg_ids)
    by_name = {pg.name: pg for pg in snapshot.placement_groups if pg.pg_id in own}
    placed = 0
    pending: list[str] = []
    for name, bundles in demand.placement_groups:
        pg = by_name.get(name)
        if pg is not None and pg.state == "CREATED":
            placed += len(bundles)
        else:
            pending.append(f"{name} ({len(bundles)} x {format_resources(bundles[0]) if bundles else 'nothing'})")
    total, kinds = snapshot.total, demand.resource_kinds
    lines = tuple(
        ResourceLine(k, demand.total.get(k, 0.0), total.get(k, 0.0), float(snapshot.available.get(k, 0.0)))
        for k in sorted(kinds, key=lambda k: (k not in ("CPU", "GPU"), k != "CPU", k))
    )
    blockers: list[str] = []
    for pg in snapshot.placement_groups:
        if pg.pg_id in own:
            continue
        held = {k: v for k, v in pg.holds.items() if k in kinds and v > 0}
        if held:
            blockers.append(f"{pg.label} [{pg.state}] holds {format_resources(held)}")
    return ResourceDiagnosis(
        pool=demand.pool,
        bundles_requested=demand.bundle_count,
        bundles_placed=placed,
        resources=lines,
        pending=tuple(pending),
        blockers=tuple(blockers),
    )
