"""``verl.single_controller.base.worker_group``, with verl's constructor signatures."""

from __future__ import annotations

from supervisor.core.group.actor_class import ClassWithInitArgs as ClassWithInitArgs
from supervisor.core.group.group import WorkerGroup as WorkerGroup
from supervisor.placement.pool import ResourcePool as _ResourcePool

__all__ = ["ResourcePool", "ClassWithInitArgs", "WorkerGroup"]


class ResourcePool(_ResourcePool):
    """verl's ``ResourcePool(process_on_nodes=None, max_colocate_count=10, n_gpus_per_node=8)`` (GPU bundles)."""

    def __init__(self, process_on_nodes: list[int] | None = None, max_colocate_count: int = 10, n_gpus_per_node: int = 8) -> None:
        super().__init__(
            process_on_nodes=process_on_nodes,
            use_gpu=True,
            max_colocate_count=max_colocate_count,
            n_gpus_per_node=n_gpus_per_node,
        )
