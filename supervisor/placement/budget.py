"""Resource budgets, checked before anything is created (pure).

Most stuck RLHF jobs are bookkeeping mistakes, not bugs: colocated groups whose GPU fractions add up to
more than a bundle (Ray then waits forever for a bundle that can never hold them), several pools that
together ask for more than the cluster has, and CPUs oversubscribed by per-worker data processes that
Ray does not account for. These functions turn each into a message with the arithmetic:

* :func:`bundle_misfits`: per pool, the colocated groups' per-worker CPUs and GPUs against one bundle
  ("rollout 0.5 + critic 0.5 + ref 0.5 GPU = 1.5 > 1 GPU per bundle");
* :func:`cluster_misfits`: all pools together against the cluster's total;
* :func:`cpu_oversubscription`: per node, reserved CPUs plus data processes against the node's CPUs
  (a warning: the job runs, slower).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["WorkerBudget", "NodeLoad", "bundle_misfits", "cluster_misfits", "cpu_oversubscription"]

# Float sums of fractions like 1/3 must not fail a budget that fits exactly.
_EPSILON = 1e-9


def _num(x: float) -> str:
    return f"{x:g}" if abs(x - round(x, 3)) < _EPSILON else f"{x:.3g}"


@dataclass(frozen=True)
class WorkerBudget:
    """What one worker of a group takes from its bundle, and what it uses beyond that.

    Attributes:
        group, pool: names in the spec.
        cpus: CPUs reserved for the worker in its bundle (Ray's ``num_cpus``).
        gpus: GPUs (a fraction when colocated) reserved in its bundle.
        data_processes: processes the worker starts itself (data loaders...), each using about one
            CPU that Ray does not account for.
    """

    group: str
    pool: str
    cpus: float
    gpus: float
    data_processes: int = 0

    @property
    def cpu_load(self) -> float:
        return self.cpus + self.data_processes


def bundle_misfits(bundles: Mapping[str, Mapping[str, float]], workers: list[WorkerBudget]) -> list[tuple[str, str]]:
    """Pools whose colocated groups do not fit one bundle: ``(pool, arithmetic)`` per pool and resource.

    Args:
        bundles: ``{pool: bundle resources}`` (e.g. ``{"CPU": 2, "GPU": 1}``).
        workers: one entry per group (every rank of a group asks the same).
    """
    by_pool: dict[str, list[WorkerBudget]] = defaultdict(list)
    for w in workers:
        by_pool[w.pool].append(w)
    problems = []
    for pool, members in by_pool.items():
        bundle = bundles[pool]
        for resource, attr in (("GPU", "gpus"), ("CPU", "cpus")):
            asks = [(w.group, getattr(w, attr)) for w in members if getattr(w, attr) > 0]
            total = sum(a for _, a in asks)
            have = float(bundle.get(resource, 0))
            if total > have + _EPSILON:
                terms = " + ".join(f"{g} {_num(a)}" for g, a in asks)
                problems.append((pool, f"{terms} {resource} = {_num(total)} > {_num(have)} {resource} per bundle"))
    return problems


def cluster_misfits(pool_totals: Mapping[str, Mapping[str, float]], cluster_total: Mapping[str, float]) -> list[str]:
    """Resources that all pools together ask for beyond the cluster's total, one message each."""
    needed: dict[str, float] = defaultdict(float)
    for totals in pool_totals.values():
        for resource, amount in totals.items():
            needed[resource] += amount
    problems = []
    for resource, amount in sorted(needed.items()):
        have = float(cluster_total.get(resource, 0))
        if amount > have + _EPSILON:
            terms = " + ".join(f"{pool} {_num(t[resource])}" for pool, t in pool_totals.items() if t.get(resource))
            problems.append(f"pools {terms} {resource} = {_num(amount)} > {_num(have)} {resource} in the cluster")
    return problems


@dataclass(frozen=True)
class NodeLoad:
    node_id: str
    cpus: float  # the node's CPUs
    reserved: float  # CPUs reserved by the workers on it
    data_processes: int  # their own processes on top

    @property
    def load(self) -> float:
        return self.reserved + self.data_processes

    @property
    def oversubscribed(self) -> bool:
        return self.load > self.cpus + _EPSILON

    def describe(self) -> str:
        return (
            f"node {self.node_id[:12]}: workers need {_num(self.load)} CPUs ({_num(self.reserved)} reserved + "
            f"{self.data_processes} data processes) of {_num(self.cpus)}"
        )


def cpu_oversubscription(placements: list[tuple[str, WorkerBudget]], node_cpus: Mapping[str, float]) -> list[NodeLoad]:
    """Nodes whose workers need more CPUs than the node has.

    Args:
        placements: ``(node id, budget)`` for every running worker.
        node_cpus: ``{node id: CPUs}``.
    """
    reserved: dict[str, float] = defaultdict(float)
    extra: dict[str, int] = defaultdict(int)
    for node, w in placements:
        reserved[node] += w.cpus
        extra[node] += w.data_processes
    loads = [NodeLoad(node, float(node_cpus.get(node, 0)), reserved[node], extra[node]) for node in sorted(reserved)]
    return [load for load in loads if load.oversubscribed]
