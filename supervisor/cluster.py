"""Connecting to a Ray cluster, failing fast and clearly when it is not there."""

from __future__ import annotations

import socket
from typing import Any

from .errors import ClusterUnavailableError

__all__ = ["probe_address", "connect"]


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
    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("log_to_driver", False)
    try:
        return ray.init(address=address, **init_kwargs)
    except (ConnectionError, RuntimeError) as exc:
        raise ClusterUnavailableError(f"cannot connect to Ray at {address}: {exc}") from None
