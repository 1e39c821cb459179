"""``verl.utils.ray_utils`` (``parallel_put``, which verl's single controller uses)."""

from supervisor.core.group.object_store import parallel_put as parallel_put

__all__ = ["parallel_put"]
