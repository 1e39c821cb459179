"""verl's ``ResourcePoolManager``: named GPU resource pools from a spec, and which role uses which pool.

The trainer-level glue of verl's single controller: ``resource_pool_spec`` maps a pool name to its
``process_on_nodes``; ``mapping`` maps a role to a pool name. :meth:`create_resource_pool` builds every
pool (placement groups are still created lazily, on first use) and checks that the cluster has the GPUs
the spec asks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .pool import ResourcePool

__all__ = ["ResourcePoolManager"]


@dataclass
class ResourcePoolManager:
    """Args:
        resource_pool_spec: ``{pool name: process_on_nodes}`` (GPUs per node).
        mapping: ``{role: pool name}``.
        max_colocate_count: worker groups (processes) that may share each GPU bundle.
        resource_pool_dict: filled by :meth:`create_resource_pool`.
    """

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Any, str]
    max_colocate_count: int = 3
    resource_pool_dict: dict[str, ResourcePool] = field(default_factory=dict)

    def _new_pool(self, name: str, process_on_nodes: list[int]) -> ResourcePool:
        return ResourcePool(
            process_on_nodes=process_on_nodes,
            use_gpu=True,
            max_colocate_count=self.max_colocate_count,
            name_prefix=name,
        )

    def create_resource_pool(self) -> None:
        """Build one GPU pool per spec entry, named after it.

        Raises:
            ValueError: the cluster's available GPUs are fewer than the spec's total.
        """
        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = self._new_pool(name, process_on_nodes)
        self._check_resource_available()

    def get_resource_pool(self, role: Any) -> ResourcePool:
        """The pool ``role`` is mapped to (``KeyError`` for an unmapped role or a pool not created yet)."""
        return self.resource_pool_dict[self.mapping[role]]

    def get_n_gpus(self) -> int:
        """GPUs the spec asks for, over all pools."""
        return sum(sum(process_on_nodes) for process_on_nodes in self.resource_pool_spec.values())

    def _check_resource_available(self) -> None:
        import ray

        needed = self.get_n_gpus()
        available = ray.available_resources()
        # Ascend clusters report their accelerators as NPU.
        accelerators = available.get("GPU", 0) or available.get("NPU", 0)
        if accelerators < needed:
            raise ValueError(
                f"ResourcePoolManager: the resource pool spec needs {needed} GPUs, the cluster has {accelerators} available"
            )
