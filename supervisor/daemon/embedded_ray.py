"""The embedded local Ray a daemon starts when its spec names no cluster (for laptops, CI, examples).

It declares the spec's CPUs, GPUs and custom resources per node, and runs ``local_nodes`` raylets on
this machine so multi-node placement, node loss and drift can be tried without a cluster. It lives
and dies with the daemon: a daemon that is killed takes it along, so crash re-adoption needs a real
cluster (``ray start --head`` and ``address``).

Nothing of it is reachable from another machine, or usable by another user of this one:

* every process it starts (GCS, raylets and their object managers, agents, workers) and this driver
  listen on 127.0.0.1 only, whatever the caller's environment and however early Ray was imported;
* it runs with Ray's token authentication on, with a fresh token that only this user can read, in
  the daemon's runtime directory (:class:`supervisor.daemon.auth.RuntimeDir`), removed when it stops.
"""

from __future__ import annotations

import os
from typing import Any

from ..observability.log import get_logger
from .auth import RuntimeDir, restore_env, saved_env, use_token
from .loopback import LOOPBACK_IP, pin_to_loopback
from .spec import RaySpec

__all__ = ["EmbeddedRay"]

log = get_logger("embedded_ray")


class EmbeddedRay:
    """A local Ray cluster owned by this process. Use :meth:`start`, then :meth:`stop` (idempotent).

    Args:
        name: the supervisor's name (names its runtime directory).
        spec: the spec's ``[ray]`` section.
        python_path: directories the workers import user code from.
    """

    def __init__(self, name: str, spec: RaySpec, python_path: list[str]) -> None:
        self.name = name
        self.spec = spec
        self.python_path = python_path
        self._cluster: Any = None
        self._runtime: RuntimeDir | None = None
        self._saved_auth_env: dict[str, str | None] = {}
        self.address: str | None = None

    @property
    def token_path(self) -> str | None:
        """The file holding the cluster's token (for Ray's own tools: ``RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=...``)."""
        return str(self._runtime.token_path) if self._runtime is not None else None

    def start(self, **init_kwargs: Any) -> str:
        """Start the nodes and connect this process as a driver; returns the GCS address."""
        import ray

        from .local_cluster import LocalCluster

        # Every Ray process started from here inherits this environment: loopback, the token, and
        # PYTHONPATH so that the spec's modules import in actors.
        pin_to_loopback()
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*self.python_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        node_args = {"num_cpus": self.spec.num_cpus, "num_gpus": self.spec.num_gpus, "resources": dict(self.spec.resources)}
        try:
            self._runtime = RuntimeDir.create(self.name)
            self._saved_auth_env = saved_env()
            use_token(self._runtime.token_path)
            self._cluster = LocalCluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
            for _ in range(self.spec.local_nodes - 1):
                self._cluster.add_node(**node_args)
            self._cluster.wait_for_nodes()
            ray.init(address=self._cluster.address, _node_ip_address=LOOPBACK_IP, **init_kwargs)
            self._runtime.publish(self._cluster.address)
        except BaseException:
            self.stop()
            raise
        self.address = self._cluster.address
        log.info(
            "embedded_ray_started", address=self.address, nodes=self.spec.local_nodes, auth_token_path=self.token_path, **node_args
        )
        return self.address

    def stop(self) -> None:
        import ray

        cluster, self._cluster = self._cluster, None
        runtime, self._runtime = self._runtime, None
        try:
            if cluster is not None:
                ray.shutdown()
                cluster.shutdown()
                log.info("embedded_ray_stopped", address=self.address)
        finally:
            if runtime is not None:
                # After the cluster: its processes read the token file when they start. This process
                # must not point Ray at a file that is gone (Ray aborts on an unreadable token file).
                runtime.remove()
                restore_env(self._saved_auth_env)
