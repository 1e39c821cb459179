"""Connecting to a Ray cluster, failing fast and clearly when it is not there."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from ..errors import ClusterUnavailableError
from ..observability.log import get_logger
from .auth import TokenChoice, TokenSource, check_access, choose_token, present, requires_token, withdraw
from .loopback import LOOPBACK_IP, is_loopback_host, pin_to_loopback

__all__ = ["probe_address", "connect", "resolve_address"]

log = get_logger("cluster")


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


def connect(address: str, auth_token_path: Path | None = None, **init_kwargs: Any) -> Any:
    """``ray.init(address=...)`` after a fast reachability and token check; returns Ray's context.

    A cluster on loopback keeps this driver on loopback too, whatever the environment and whenever
    Ray was imported. The token presented is Ray's own variables' when set, else ``auth_token_path``,
    else the token of an embedded Ray on this machine at ``address`` (:func:`supervisor.daemon.auth.choose_token`).

    Raises:
        ClusterUnavailableError: the address is unreachable or Ray refuses the connection.
        ClusterAuthError: the cluster requires a token and refused this one (or its absence).
    """
    probe_address(address)
    if is_loopback_host(address.rpartition(":")[0]):
        # Else Ray resolves the loopback address to the machine's external one, dials the GCS there,
        # and this driver listens on every interface.
        pin_to_loopback()
        init_kwargs.setdefault("_node_ip_address", LOOPBACK_IP)
    withdraw()  # what an earlier connection of this process presented is not the user's choice
    choice = choose_token(address, auth_token_path)
    if choice.sends and choice.source is not TokenSource.EMBEDDED and not requires_token(address):
        log.debug("auth_token_not_sent", address=address, token=choice.describe(), reason="the cluster runs without authentication")
        choice = TokenChoice(TokenSource.NONE)
    present(choice)
    import ray

    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("log_to_driver", False)
    try:
        check_access(address, choice)
        return ray.init(address=address, **init_kwargs)
    except (ConnectionError, RuntimeError) as exc:
        withdraw()
        if isinstance(exc, ClusterUnavailableError):
            raise
        raise ClusterUnavailableError(f"cannot connect to Ray at {address}: {exc}") from None
    except BaseException:
        withdraw()
        raise


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
