"""Where a failed rank's next incarnation runs: its own bundle, a pre-started standby, or a spare bundle.

A pool with ``capacity_factor > 1`` reserves spare bundles beyond its ranks (a separate SPREAD placement
group, so spares sit on other nodes than the ranks when the cluster allows it and survive the loss of a
rank's node). A group with ``standbys = n`` keeps n actors constructed in free bundles: a standby has
paid for process start, imports and its constructor, and only adopts the failed rank's environment and
re-runs the init method when it takes over.

The decisions here are pure (no Ray), so the rules are unit-tested and the supervisor only executes them:

* :func:`plan_replacements`: for each failed rank, in rank order (rank 0 first: it picks the rendezvous):

  1. a ready standby on the node of the rank's own, placed bundle: fastest, and the rank stays put;
     with :attr:`StandbyReach.ANY_NODE`, a ready standby on any node (the rank may move node);
  2. the rank's own bundle, when it is placed (a fresh actor, as without standbys);
  3. any ready standby: the own bundle is gone or being re-placed, so waiting is what a standby saves
     (the rank moves node: drift is reported);
  4. a free spare bundle that is placed (a fresh actor, without waiting for the own bundle);
  5. the own bundle, waiting while Ray re-places it.

* :func:`standby_bundles`: where to start standbys: free, placed bundles, spread over nodes first so one
  node loss does not take every standby with it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .layout import BundleRef

__all__ = ["BundleRef", "ReplacementKind", "Replacement", "StandbyReach", "plan_replacements", "free_bundles", "standby_bundles"]


class ReplacementKind(enum.Enum):
    STANDBY = "standby"  # a pre-started standby takes the rank over
    OWN_BUNDLE = "own_bundle"  # a fresh actor into the rank's bundle (after Ray re-placed it, if it must)
    SPARE_BUNDLE = "spare_bundle"  # a fresh actor into a free bundle that is placed now


class StandbyReach(enum.Enum):
    """Which ready standbys may take over a rank whose own bundle is still placed."""

    # Only one on the rank's node: the rank keeps its node, for groups that depend on it (a
    # tensor-parallel group inside a node, node-local checkpoints). Others wait for a fresh actor.
    SAME_NODE = "same_node"
    # Any ready one: the fastest recovery, for ranks that do not care where they run (data-parallel
    # replicas); a rank that moves node is placement drift and is reported as such.
    ANY_NODE = "any_node"


@dataclass(frozen=True)
class Replacement:
    rank: int
    kind: ReplacementKind
    bundle: BundleRef  # where the rank runs from now on
    handover: bool = False  # the rank's node drains: its old actor serves on until the successor is in
    fork: bool = True  # a fresh actor may fork from its node's zygote (False: a plain start, after its init failed)


def plan_replacements(
    failed: Sequence[int],
    rank_bundles: Mapping[int, BundleRef],
    bundle_nodes: Mapping[BundleRef, str | None],
    standbys: Mapping[BundleRef, str],
    free: Iterable[BundleRef],
    reach: StandbyReach = StandbyReach.SAME_NODE,
) -> list[Replacement]:
    """Decide where each failed rank's replacement runs (see the module docstring for the rules).

    Args:
        failed: the ranks to replace.
        rank_bundles: each rank's bundle now.
        bundle_nodes: node of every bundle that is placed now; absent or None when it is not (its
            node was lost and Ray is re-placing it).
        standbys: ready standbys (constructed, alive): their bundle and node; one whose bundle is not
            placed (its node was just lost) is not used.
        free: bundles of the group holding neither a rank nor a standby.
        reach: whether a standby on another node may take over a rank whose own bundle is placed.
    """
    available = {b: node for b, node in standbys.items() if bundle_nodes.get(b)}  # not on a lost node
    spare = [b for b in sorted(set(free)) if bundle_nodes.get(b)]
    plan: list[Replacement] = []
    for rank in sorted(failed):
        own = rank_bundles[rank]
        own_node = bundle_nodes.get(own)
        same_node = [b for b, node in sorted(available.items()) if own_node and node == own_node]
        if same_node:
            plan.append(Replacement(rank, ReplacementKind.STANDBY, same_node[0]))
            del available[same_node[0]]
        elif own_node and available and reach is StandbyReach.ANY_NODE:
            chosen = min(available)
            plan.append(Replacement(rank, ReplacementKind.STANDBY, chosen))
            del available[chosen]
        elif own_node:
            plan.append(Replacement(rank, ReplacementKind.OWN_BUNDLE, own))
        elif available:
            chosen = min(available)
            plan.append(Replacement(rank, ReplacementKind.STANDBY, chosen))
            del available[chosen]
        elif spare:
            plan.append(Replacement(rank, ReplacementKind.SPARE_BUNDLE, spare.pop(0)))
        else:
            plan.append(Replacement(rank, ReplacementKind.OWN_BUNDLE, own))
    return plan


def free_bundles(all_bundles: Iterable[BundleRef], rank_bundles: Iterable[BundleRef], standby_bundles: Iterable[BundleRef]) -> list[BundleRef]:
    """Bundles of a group that hold neither one of its ranks nor one of its standbys."""
    taken = set(rank_bundles) | set(standby_bundles)
    return sorted(set(all_bundles) - taken)


def standby_bundles(free: Iterable[BundleRef], bundle_nodes: Mapping[BundleRef, str | None], standby_nodes: Iterable[str | None], missing: int) -> list[BundleRef]:
    """Up to ``missing`` free, placed bundles to start standbys in: nodes without a standby first."""
    if missing <= 0:
        return []
    counts: dict[str, int] = {}
    for node in standby_nodes:
        if node:
            counts[node] = counts.get(node, 0) + 1
    chosen: list[BundleRef] = []
    candidates = [b for b in sorted(set(free)) if bundle_nodes.get(b)]
    for _ in range(missing):
        if not candidates:
            break
        best = min(candidates, key=lambda b: (counts.get(bundle_nodes[b] or "", 0), b))
        candidates.remove(best)
        chosen.append(best)
        node = bundle_nodes[best] or ""
        counts[node] = counts.get(node, 0) + 1
    return chosen
