"""Keeping a process, and every Ray process it starts, on 127.0.0.1.

Ray picks each process's node address once: from ``node_ip_address`` when it is given, else from
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, which ``ray._private.ray_constants`` reads when Ray is first
imported. A raylet, GCS or core worker whose node address is loopback listens on loopback only; any
other address makes it listen on every interface. Setting the variable after ``import ray`` therefore
does nothing for the process that set it, and a spec module, a test or a user's script may well have
imported Ray first. :func:`pin_to_loopback` covers both cases: the variable for the processes started
from here on (each reads it at its own import), and Ray's already-evaluated flag for this one.
"""

from __future__ import annotations

import ipaddress
import os
import sys

__all__ = ["LOOPBACK_IP", "LOOPBACK_ENV", "is_loopback_host", "exposure_warning", "pin_to_loopback"]

LOOPBACK_IP = "127.0.0.1"
# Ray's name for it: off (0), every Ray address of a process is 127.0.0.1.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (brackets allowed)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, tls: bool) -> str | None:
    """What is wrong with serving plain HTTP on ``host`` (None when it is loopback, or TLS is on)."""
    if tls or is_loopback_host(host):
        return None
    return f"metrics on {host} without TLS: anyone who can reach it reads the job's metrics; set metrics.tls_cert and tls_key, or host = 127.0.0.1"


def pin_to_loopback() -> None:
    """Make this process and every process it starts from now on use 127.0.0.1 as their Ray address.

    Call it before starting or joining a cluster that lives on loopback (an embedded Ray, a test
    cluster, ``ray start --node-ip-address 127.0.0.1``). Nodes started from this process must still be
    given ``node_ip_address=LOOPBACK_IP``, and ``ray.init`` ``_node_ip_address=LOOPBACK_IP``: those are
    what the GCS, raylets and this driver bind to.
    """
    os.environ[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        # Read at call time by ray._private.services.get_node_ip_address (ray.init resolves a loopback
        # GCS address through it, and would otherwise dial the machine's external address).
        constants.ENABLE_RAY_CLUSTER = False
