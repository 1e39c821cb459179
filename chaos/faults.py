"""Fault injection and the observations the scenarios share (each needs a Ray connection)."""

from __future__ import annotations

import enum
import os
import signal
import subprocess
from typing import Any

from .harness import BIN, ENV, Daemon, actor_pid

__all__ = [
    "KillMethod", "kill_actor", "rank_restarts", "rank_nodes", "group_sizes", "stop_daemon", "actor_ids", "cli", "placement_group_ids",
    "rank_rendezvous",
]  # fmt: skip


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
    """Actor id of every named actor of the supervisor (ranks, standbys, the KV store, the owner fence),
    but the zygotes' keepers: a restarted daemon starts zygotes of its own (docs/concepts/standbys.md, *Zygotes*), and
    workers forked from the old ones run on."""
    import ray

    from supervisor.core.worker.zygote import keeper_prefix
    from supervisor.daemon.ownership import find_owned

    out = {}
    for name in find_owned(record.name).actors:
        if name.startswith(keeper_prefix(f"{record.name}.")):
            continue
        try:
            out[name] = ray.get_actor(name, namespace=record.namespace)._actor_id.hex()
        except ValueError:  # gone meanwhile
            pass
    return out


def cli(address: str, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
    """``supervisor ARGS --address ADDRESS``, as an operator runs it."""
    return subprocess.run(
        [str(BIN / "supervisor"), *args, "--address", address], env=ENV, capture_output=True, text=True, timeout=timeout_s
    )


def stop_daemon(daemon: Daemon, address: str, timeout_s: float = 120.0) -> int:
    """``supervisor stop NAME``; returns the daemon's exit code."""
    cli(address, "stop", daemon.name, timeout_s=60)
    return daemon.wait_exit(timeout_s)


def placement_group_ids(name: str) -> dict[str, str]:
    """``{placement-group name: id}`` of the supervisor's live placement groups."""
    from supervisor.daemon.ownership import find_owned

    return find_owned(name).placement_groups


def rank_rendezvous(record: Any, group: str) -> list[str | None]:
    """The rendezvous each rank of ``group`` last ran its init on (None: init never ran on it)."""
    import ray

    from .harness import TRAINED_GROUPS, rank_actor

    # The trained workers report it with their state, the language models with their model.
    method = "state_info" if group in {g.name for g in TRAINED_GROUPS} else "model_info"
    infos = [getattr(rank_actor(record, group, rank)[1], method).remote() for rank in range(len(record.groups[group].actor_names))]
    return [info["init_rendezvous"] for info in ray.get(infos, timeout=60)]
