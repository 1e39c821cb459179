"""Fault injection and the observations the scenarios share (each needs a Ray connection)."""

from __future__ import annotations

import enum
import os
import signal
import subprocess
from typing import Any

from .harness import BIN, ENV, Daemon, actor_pid

__all__ = ["KillMethod", "kill_actor", "rank_restarts", "rank_nodes", "group_sizes", "stop_daemon", "actor_ids"]


class KillMethod(enum.Enum):
    SIGKILL = "sigkill"  # the actor's process, as the OOM killer does
    RAY_KILL = "ray.kill"  # through Ray (``ray.kill(handle, no_restart=True)``)


def kill_actor(handle: Any, method: KillMethod) -> None:
    import ray

    if method is KillMethod.SIGKILL:
        os.kill(actor_pid(handle), signal.SIGKILL)  # every node of the local cluster is this machine
    else:
        ray.kill(handle, no_restart=True)


def group_sizes(record: Any) -> dict[str, int]:
    return {name: len(g.actor_names) for name, g in sorted(record.groups.items())}


def rank_restarts(record: Any) -> dict[tuple[str, int], int]:
    return {(name, r.rank): r.restarts for name, g in record.groups.items() for r in g.ranks}


def rank_nodes(record: Any) -> dict[tuple[str, int], tuple[str | None, str | None, str]]:
    """``{(group, rank): (node now, node of its bundle at creation, worker state)}``."""
    return {(name, r.rank): (r.node_id, r.original_node, r.state) for name, g in record.groups.items() for r in g.ranks}


def actor_ids(record: Any) -> dict[str, str]:
    """Actor id of every named actor of the supervisor (ranks, standbys, the KV store, the owner fence)."""
    import ray

    from supervisor.daemon.ownership import find_owned

    out = {}
    for name in find_owned(record.name).actors:
        try:
            out[name] = ray.get_actor(name, namespace=record.namespace)._actor_id.hex()
        except ValueError:  # gone meanwhile
            pass
    return out


def stop_daemon(daemon: Daemon, address: str, timeout_s: float = 120.0) -> int:
    """``supervisor stop NAME``; returns the daemon's exit code."""
    subprocess.run([str(BIN / "supervisor"), "stop", daemon.name, "--address", address], env=ENV, capture_output=True, timeout=60)
    return daemon.wait_exit(timeout_s)
