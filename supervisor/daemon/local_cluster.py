"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``), on loopback, with agent ports that
cannot collide.

Each node's runtime-env agent and dashboard agent pick their ports themselves when none is given: they
bind port 0 with ``SO_REUSEADDR`` and start listening a moment later. Two nodes starting side by side
on one host can be handed the same port in that moment (seen here: node 2's runtime-env agent on the
head's agent gRPC port). Node 2's raylet then talks HTTP to a gRPC server ("on_read bad version"),
gives up after 30 s and takes its node down while actors are being placed on it. Giving every node
its own ports, from a range the kernel never hands out for port 0, closes that window.
"""

from __future__ import annotations

import random
import socket
import threading
from typing import Any

from ray.cluster_utils import Cluster

from .loopback import LOOPBACK_IP

__all__ = ["LocalCluster", "AGENT_PORT_KEYS", "AGENT_PORT_RANGE"]

# The node ports Ray lets its agents self-assign (the raylets' and GCS's own ports are bound and
# listening in one step, so they are left to Ray).
AGENT_PORT_KEYS = ("runtime_env_agent_port", "metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port")
# Above Ray's default worker ports (10002-19999), below Linux's default ephemeral range (32768-60999);
# a machine whose ephemeral range reaches lower gets the part of this range outside it.
AGENT_PORT_RANGE = range(20000, 32000)
_EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"

_lock = threading.Lock()
_handed_out: set[int] = set()  # never the same port twice from one process, even after a node stopped


def _free_ports(count: int) -> list[int]:
    """``count`` ports of :data:`AGENT_PORT_RANGE` nothing listens on and the kernel does not hand out
    for port 0. Raises RuntimeError when too few are left (a busy machine, a narrowed range)."""
    ephemeral = _ephemeral_ports()
    candidates = [p for p in AGENT_PORT_RANGE if p not in ephemeral]
    ports: list[int] = []
    with _lock:
        for port in random.sample(candidates, len(candidates)):
            if len(ports) == count:
                break
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                ports.append(port)
    if len(ports) < count:
        raise RuntimeError(f"only {len(ports)} of {count} free agent ports in {AGENT_PORT_RANGE.start}-{AGENT_PORT_RANGE.stop - 1}")
    return ports


def _ephemeral_ports() -> range:
    try:
        with open(_EPHEMERAL_RANGE_FILE) as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))  # every interface: a listener on any address makes it unusable
        except OSError:
            return False
    return True


class LocalCluster(Cluster):
    """``ray.cluster_utils.Cluster`` whose nodes (the head included) listen on 127.0.0.1 and get agent
    ports of their own unless the caller gives them."""

    def add_node(self, wait: bool = True, **node_args: Any) -> Any:
        node_args.setdefault("node_ip_address", LOOPBACK_IP)
        missing = [key for key in AGENT_PORT_KEYS if not node_args.get(key)]
        node_args.update(zip(missing, _free_ports(len(missing)), strict=True))
        return super().add_node(wait=wait, **node_args)
