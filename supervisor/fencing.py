"""Who may destroy cluster state: the seam every actor kill and placement-group removal goes through.

The library kills actors (a hung rank's replacement, a failed start's clean-up, a group's teardown)
and removes placement groups (a pool's teardown). On its own it does so directly (:data:`UNFENCED`).
Under the daemon the same calls go through the daemon's owner fence
(:class:`supervisor.daemon.fence.OwnerFence`), which performs each one only while this process still
holds the supervisor's owner generation, atomically with the check: a daemon that was paused and
taken over touches nothing, whatever it does next.

A pool carries its fence (``ResourcePool.fence``); groups built on a pool inherit it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .errors import SupersededError
from .observability.log import get_logger

__all__ = ["Fence", "Unfenced", "UNFENCED", "SupersededError"]

log = get_logger("fencing")


class Fence(Protocol):
    """Destructive actions, performed only while the caller owns what they destroy.

    Implementations end actors and placement groups that are gone already without complaint, and
    raise :class:`~supervisor.errors.SupersededError` (never anything else) when the caller no longer
    owns them.
    """

    def kill_actors(self, actors: Sequence[Any]) -> None: ...

    def remove_placement_groups(self, pgs: Sequence[Any]) -> None: ...

    def check(self) -> None:
        """Raise :class:`~supervisor.errors.SupersededError` unless the caller still owns the job: before
        an act that changes trained state (a stateful group's call, a snapshot, a restore)."""
        ...


class Unfenced:
    """Destroys directly: the library used without a daemon, where the caller's process is the owner."""

    def kill_actors(self, actors: Sequence[Any]) -> None:
        import ray

        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as exc:  # already dead, or the cluster is gone
                log.debug("actor_kill_failed", actor=str(actor), error=str(exc))

    def check(self) -> None:
        """The caller always owns what it made."""

    def remove_placement_groups(self, pgs: Sequence[Any]) -> None:
        from ray.util import remove_placement_group

        for pg in pgs:
            try:
                remove_placement_group(pg)
            except Exception as exc:  # the GCS may already be gone or the group removed
                log.debug("placement_group_remove_failed", error=str(exc))


UNFENCED: Fence = Unfenced()
