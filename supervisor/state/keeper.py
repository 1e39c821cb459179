"""Snapshot keepers: one small actor per node that holds shards of snapshots in its memory.

A Ray object dies with its owner, so a snapshot that must outlive its rank cannot be an object the
rank owns. A keeper receives each shard as a call argument and keeps what it deserialized: the
shard's arrays (a :class:`~supervisor.core.state_tree.WireState`), read in place from its node's
object store, where the keeper's use keeps them however the owner fares. So a shard survives the
rank's process (the copy on the rank's node) and the rank's node (the copy on another node). Keepers are detached and named per node (``<prefix>state-keeper-<node>``), so
a daemon restarted after a crash finds them, and what they hold, again: their inventory is the
source of truth of which snapshots exist.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ..fencing import Fence
from ..observability.log import get_logger
from .planning import CopyMedium, ShardCopy

__all__ = ["StateKeeper", "KeeperSet", "keeper_name"]

log = get_logger("state")

KEEPER_CONCURRENCY = 4  # a large fetch must not hold up another group's store


def keeper_name(prefix: str, node_id: str) -> str:
    return f"{prefix}state-keeper-{node_id[:16]}"


class StateKeeper:
    """Holds shards ``(group, step, rank) -> (state, digest, nbytes)``; threaded, so under a lock."""

    def __init__(self) -> None:
        self._shards: dict[tuple[str, int, int], tuple[Any, str, int]] = {}
        self._lock = threading.Lock()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def store(self, group: str, step: int, rank: int, state: Any, digest: str, nbytes: int) -> None:
        with self._lock:
            self._shards[(group, step, rank)] = (state, digest, nbytes)

    def fetch(self, group: str, step: int, rank: int) -> Any:
        with self._lock:
            found = self._shards.get((group, step, rank))
        if found is None:
            raise KeyError(f"no shard of group {group!r} at step {step} for rank {rank} here")
        return found[0]

    def inventory(self) -> list[tuple[str, int, int, str, int]]:
        """``(group, step, rank, digest, nbytes)`` of every shard held."""
        with self._lock:
            return [(g, s, r, d, n) for (g, s, r), (_, d, n) in self._shards.items()]

    def free(self, group: str, steps: Iterable[int]) -> int:
        """Drop the group's shards of ``steps``; the bytes freed."""
        wanted = set(steps)
        with self._lock:
            gone = [k for k in self._shards if k[0] == group and k[1] in wanted]
            return sum(self._shards.pop(k)[2] for k in gone)


class KeeperSet:
    """The keepers of one supervisor (or one library-level domain): found by name, started where
    missing, one per alive node."""

    def __init__(self, prefix: str, namespace: str, fence: Fence) -> None:
        self.prefix, self.namespace, self.fence = prefix, namespace, fence
        self._handles: dict[str, Any] = {}
        self._forgotten: list[Any] = []  # keepers that did not answer an inventory (ended at kill all the same)
        self._lock = threading.Lock()

    def ensure(self, nodes: Iterable[str]) -> dict[str, Any]:
        """A keeper on each of ``nodes`` (an existing one adopted by name); the handles by node."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            for node in nodes:
                if node in self._handles:
                    continue
                options = dict(
                    name=keeper_name(self.prefix, node), namespace=self.namespace, lifetime="detached", get_if_exists=True,
                    num_cpus=0, max_restarts=0, max_concurrency=KEEPER_CONCURRENCY,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                )  # fmt: skip
                self._handles[node] = ray.remote(StateKeeper).options(**options).remote()
            return dict(self._handles)

    def forget(self, node: str) -> None:
        with self._lock:
            handle = self._handles.pop(node, None)
            if handle is not None:  # silent, maybe only slow (a loaded node): ended with the others
                self._forgotten.append(handle)

    def handles(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._handles)

    def inventory(self, timeout_s: float = 10.0) -> tuple[dict[str, list[ShardCopy]], set[str]]:
        """Every shard every reachable keeper holds, by group; and the nodes whose keeper answered.
        A keeper that does not answer (its node is gone) holds nothing usable and is forgotten."""
        import ray

        handles = self.handles()
        refs = {node: h.inventory.remote() for node, h in handles.items()}
        by_group: dict[str, list[ShardCopy]] = {}
        answered: set[str] = set()
        for node, ref in refs.items():
            try:
                shards = ray.get(ref, timeout=timeout_s)
            except Exception as exc:
                log.info("state_keeper_lost", node=node, error=type(exc).__name__)
                self.forget(node)
                continue
            answered.add(node)
            for group, step, rank, digest, nbytes in shards:
                by_group.setdefault(group, []).append(ShardCopy(step, rank, CopyMedium.MEMORY, node, nbytes, digest))
        return by_group, answered

    def free(self, group: str, steps: list[int]) -> None:
        import ray

        refs = [h.free.remote(group, steps) for h in self.handles().values()]
        for ref in refs:
            try:
                ray.get(ref, timeout=10.0)
            except Exception:  # a lost keeper frees its memory with its process
                pass

    def kill(self) -> None:
        """End every keeper (through the owner fence) and what it holds."""
        with self._lock:
            handles, self._handles = [*self._handles.values(), *self._forgotten], {}
            self._forgotten = []
        if handles:
            self.fence.kill_actors(handles)
