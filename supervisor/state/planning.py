"""Pure decisions about snapshots: where a shard's copies go, which steps are complete, what to free,
which step a rollback goes to and where each shard comes from. No Ray, no clock.

A snapshot of a group at step ``s`` is the state every rank had at the boundary *before* step ``s``
ran. It is *complete* when every rank the kind needs (all ranks when sharded, rank 0 when
replicated: its state is every rank's) has a copy somewhere that still exists.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .kinds import StateKind

__all__ = [
    "CopyMedium", "ShardCopy", "GroupCopies", "RollbackTarget",
    "copy_nodes", "snapshot_ranks", "complete_steps", "latest_complete", "steps_to_free",
    "plan_rollback", "choose_peer", "held_bytes",
]  # fmt: skip


class CopyMedium(enum.StrEnum):
    MEMORY = "memory"  # a keeper actor's memory on ``node``
    DISK = "disk"  # torch.distributed.checkpoint under the group's disk_dir


@dataclass(frozen=True, order=True)
class ShardCopy:
    """One copy of one rank's state at one step."""

    step: int
    rank: int
    medium: CopyMedium
    node: str  # the keeper's node ("" on disk)
    nbytes: int
    digest: str


@dataclass(frozen=True)
class GroupCopies:
    """What a rollback planner knows of one group: which ranks a snapshot needs, and every copy."""

    kind: StateKind
    world_size: int
    copies: tuple[ShardCopy, ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return snapshot_ranks(self.kind, self.world_size)


@dataclass(frozen=True)
class RollbackTarget:
    """The step every group goes back to, and for each group and snapshot rank the copy to load."""

    step: int
    sources: Mapping[str, Mapping[int, ShardCopy]]

    @property
    def medium(self) -> CopyMedium:
        """DISK when any shard comes from disk (the rollback says so)."""
        media = {c.medium for by_rank in self.sources.values() for c in by_rank.values()}
        return CopyMedium.DISK if CopyMedium.DISK in media else CopyMedium.MEMORY


def snapshot_ranks(kind: StateKind, world_size: int) -> tuple[int, ...]:
    """The ranks whose state a snapshot holds: every rank's shard, or one replica (rank 0's)."""
    if kind is StateKind.SHARDED:
        return tuple(range(world_size))
    if kind is StateKind.REPLICATED:
        return (0,) if world_size else ()
    return ()


def copy_nodes(shard_node: str | None, keeper_nodes: Iterable[str]) -> tuple[str, ...]:
    """Where the two copies of a shard go: one on the shard's own node (fast; survives the rank's
    process), one on another node (survives the node). Never both on the shard's node; the other
    node is the next one after it in id order, so a node's shards spread over the cluster.
    With a single node there is a single copy."""
    nodes = sorted(set(keeper_nodes))
    if not nodes:
        return ()
    if shard_node in nodes:
        at = nodes.index(shard_node)
        others = nodes[at + 1 :] + nodes[:at]
        return (shard_node, others[0]) if others else (shard_node,)
    return tuple(nodes[:2])


def _usable(copy: ShardCopy, alive_nodes: frozenset[str]) -> bool:
    return copy.medium is CopyMedium.DISK or copy.node in alive_nodes


def complete_steps(group: GroupCopies, alive_nodes: Iterable[str], medium: CopyMedium | None = None) -> list[int]:
    """Steps, oldest first, at which every snapshot rank has a usable copy (of ``medium``, or any)."""
    alive = frozenset(alive_nodes)
    have: dict[int, set[int]] = {}
    for c in group.copies:
        if (medium is None or c.medium is medium) and _usable(c, alive):
            have.setdefault(c.step, set()).add(c.rank)
    need = set(group.ranks)
    return sorted(step for step, ranks in have.items() if need and need <= ranks)


def latest_complete(group: GroupCopies, alive_nodes: Iterable[str]) -> int | None:
    steps = complete_steps(group, alive_nodes)
    return steps[-1] if steps else None


def steps_to_free(group: GroupCopies, alive_nodes: Iterable[str], keep: int) -> list[int]:
    """In-memory steps to free: everything older than the ``keep`` newest complete ones. Incomplete
    steps newer than the newest complete one are in progress and stay."""
    complete = complete_steps(group, alive_nodes, CopyMedium.MEMORY)
    if not complete:
        return []
    kept = complete[-keep:] if keep > 0 else []
    oldest_kept = kept[0] if kept else complete[-1] + 1
    memory_steps = {c.step for c in group.copies if c.medium is CopyMedium.MEMORY}
    return sorted(s for s in memory_steps if s < oldest_kept)


def held_bytes(group: GroupCopies, steps: Iterable[int] | None = None) -> int:
    """Bytes the group's in-memory copies take (of ``steps`` only, when given)."""
    wanted = None if steps is None else set(steps)
    return sum(c.nbytes for c in group.copies if c.medium is CopyMedium.MEMORY and (wanted is None or c.step in wanted))


def plan_rollback(
    groups: Mapping[str, GroupCopies], alive_nodes: Iterable[str], not_after: int | None = None
) -> RollbackTarget | None:
    """The newest step (at most ``not_after``) that every group can restore on every snapshot rank,
    and where each shard comes from: a memory copy on a live node (the lowest node id, so plans are
    repeatable) before one on disk. None: no step is restorable by every group."""
    alive = frozenset(alive_nodes)
    if not groups:
        return None
    common: set[int] | None = None
    for copies in groups.values():
        steps = set(complete_steps(copies, alive))
        common = steps if common is None else common & steps
    candidates = sorted(s for s in (common or set()) if not_after is None or s <= not_after)
    if not candidates:
        return None
    step = candidates[-1]
    sources: dict[str, dict[int, ShardCopy]] = {}
    for name, copies in groups.items():
        by_rank: dict[int, ShardCopy] = {}
        for c in sorted(copies.copies, key=lambda c: (c.medium is not CopyMedium.MEMORY, c.node)):
            if c.step == step and c.rank in copies.ranks and c.rank not in by_rank and _usable(c, alive):
                by_rank[c.rank] = c
        sources[name] = by_rank
    return RollbackTarget(step, sources)


def choose_peer(survivors: Mapping[int, str | None], target_nodes: Sequence[str | None]) -> int | None:
    """The live rank a replacement copies its state from: one on another node than the replacements
    where there is one (their node may be the one in trouble, and the copy then crosses no shared
    link), else any; the lowest rank among equals. None: no survivor."""
    if not survivors:
        return None
    busy = {n for n in target_nodes if n is not None}
    return min(survivors, key=lambda r: (survivors[r] in busy, r))
