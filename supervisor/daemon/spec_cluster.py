"""The Ray a spec names, for the process that owns the supervisor (the daemon, or a run's parent).

The cluster is the address given (``--address``, ``$RAY_ADDRESS``) or the spec's ``[ray] address``;
with none, an embedded local Ray on loopback that lives as long as this object (and its token with it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..observability.log import get_logger
from .cluster import connect

if TYPE_CHECKING:
    from .embedded_ray import EmbeddedRay
    from .spec import SupervisorSpec

__all__ = ["SpecCluster"]

log = get_logger("cluster")


class SpecCluster:
    """Connects this process to the spec's Ray, or starts an embedded one; :meth:`disconnect` undoes it.

    Attributes:
        address: the cluster's address (an embedded Ray's once started).
        embedded: the embedded Ray, when this process started one.
    """

    def __init__(self, spec: SupervisorSpec, address: str | None) -> None:
        self.spec = spec
        self.address = address or spec.ray.address
        self.embedded: EmbeddedRay | None = None

    def connect(self, runtime_env: dict[str, Any] | None = None) -> str:
        """Connect (``runtime_env``: the job's, for an address; an embedded Ray puts the spec's
        python_path on its workers itself). Returns the address.

        Raises:
            ClusterUnavailableError, ClusterAuthError: see :func:`.cluster.connect`.
        """
        spec = self.spec
        init_kwargs: dict[str, Any] = {"namespace": spec.namespace, "log_to_driver": False, "logging_level": "WARNING"}
        if self.address:
            if runtime_env is not None:
                init_kwargs["runtime_env"] = runtime_env
            connect(self.address, spec.path(spec.ray.auth_token_path), **init_kwargs)
            return self.address
        from .embedded_ray import EmbeddedRay

        if spec.ray.auth_token_path:
            log.warning("auth_token_path_unused", reason="no cluster address: the embedded Ray makes a token of its own")
        self.embedded = EmbeddedRay(spec.name, spec.ray, spec.python_path())
        self.address = self.embedded.start(**init_kwargs)
        return self.address

    def disconnect(self) -> None:
        """Stop the embedded Ray, or leave the cluster. Idempotent."""
        import ray

        if self.embedded is not None:
            self.embedded.stop()
        elif ray.is_initialized():
            ray.shutdown()
