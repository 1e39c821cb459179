"""Connecting to a Ray cluster, failing fast and clearly when it is not there."""

from __future__ import annotations

import os
import socket
from typing import Any

from .errors import ClusterUnavailableError

__all__ = ["probe_address", "connect", "resolve_address"]


def probe_address(address: str, timeout_s: float = 3.0) -> None:
    """Check that a ``host:port`` Ray address accepts TCP connections.

    ``ray.init`` retries an unreachable GCS for a minute or more; this answers in seconds.
    Addresses that are not ``host:port`` (``auto``, ``local``, ``ray://...``) are not probed.

    Raises:
        ClusterUnavailableError: nothing listens at the address.
    """
    if address in ("auto", "local") or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as exc:
        raise ClusterUnavailableError(f"no Ray cluster at {address}: {exc}") from None


def connect(address: str, **init_kwargs: Any) -> Any:
    """``ray.init(address=...)`` after a fast reachability probe; returns Ray's context.

    Raises:
        ClusterUnavailableError: the address is unreachable or Ray refuses the connection.
    """
    import ray

    probe_address(address)
    if address.rpartition(":")[0].strip("[]") in ("127.0.0.1", "localhost", "::1"):
        # A cluster on loopback: keep this driver's own addresses there too (else Ray advertises the
        # machine's external IP and the GCS may be dialled on it).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("log_to_driver", False)
    try:
        return ray.init(address=address, **init_kwargs)
    except (ConnectionError, RuntimeError) as exc:
        raise ClusterUnavailableError(f"cannot connect to Ray at {address}: {exc}") from None


def resolve_address(address: str | None) -> str:
    """The cluster a command talks to: ``address``, else ``$RAY_ADDRESS``, else the cluster last started
    on this machine (Ray's ``ray_current_cluster`` file, which ``ray start`` and an embedded Ray write).

    Raises:
        ClusterUnavailableError: none of them names a cluster.
    """
    if address:
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    from ray._private.utils import read_ray_address

    found = read_ray_address()
    if not found:
        raise ClusterUnavailableError("no Ray cluster to talk to: give --address or set RAY_ADDRESS (none was started on this machine)")
    return found
