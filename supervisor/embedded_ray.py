"""The embedded local Ray a daemon starts when its spec names no cluster (for laptops, CI, examples).

It binds 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), declares the spec's CPUs, GPUs and
custom resources per node, and runs ``local_nodes`` raylets on this machine so multi-node placement,
node loss and drift can be tried without a cluster. It lives and dies with the daemon: a daemon that is
killed takes it along, so crash re-adoption needs a real cluster (``ray start --head`` and ``address``).
"""

from __future__ import annotations

import os
from typing import Any

from .log import get_logger
from .spec import RaySpec

__all__ = ["EmbeddedRay"]

log = get_logger("embedded_ray")


class EmbeddedRay:
    """A local Ray cluster owned by this process. Use :meth:`start`, then :meth:`stop` (idempotent)."""

    def __init__(self, spec: RaySpec, python_path: list[str]) -> None:
        self.spec = spec
        self.python_path = python_path
        self._cluster: Any = None
        self.address: str | None = None

    def start(self, **init_kwargs: Any) -> str:
        """Start the nodes and connect this process as a driver; returns the GCS address."""
        import ray
        from ray.cluster_utils import Cluster

        # Set before any Ray process starts: it keeps every Ray address on loopback. Workers inherit
        # this process's environment, so PYTHONPATH makes the spec's modules importable in actors.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*self.python_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        node_args = {"num_cpus": self.spec.num_cpus, "num_gpus": self.spec.num_gpus, "resources": dict(self.spec.resources)}
        self._cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
        try:
            for _ in range(self.spec.local_nodes - 1):
                self._cluster.add_node(**node_args)
            self._cluster.wait_for_nodes()
            ray.init(address=self._cluster.address, **init_kwargs)
        except BaseException:
            self.stop()
            raise
        self.address = self._cluster.address
        log.info("embedded_ray_started", address=self.address, nodes=self.spec.local_nodes, **node_args)
        return self.address

    def stop(self) -> None:
        import ray

        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        ray.shutdown()
        cluster.shutdown()
        log.info("embedded_ray_stopped", address=self.address)
