"""What a supervisor owns in the cluster, found by name, and its removal.

A supervisor named ``N`` owns exactly the placement groups whose names start with ``N.`` (pool
prefixes are ``N.<pool>``; supervisor names contain no dot, so no other supervisor's names match) and
the named actors in the Ray namespace ``supervisor.N``. Finding them by name rather than from the state
record alone means nothing is missed when a daemon died between creating something and recording it.
Teardown, ``supervisor gc`` and a restarted daemon's reconciliation all find what to remove with
:func:`find_owned`, and remove it through the owner fence (:mod:`.fence`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import first_line
from ..observability.log import get_logger

__all__ = ["Owned", "find_owned", "remove_owned", "kill_named", "remove_placement_group_ids", "namespace_of", "pool_prefix_of", "HEAD_RESOURCE", "start_head_actor"]

log = get_logger("ownership")

HEAD_RESOURCE = "node:__internal_head__"
"""Every Ray head node has this resource: a tiny demand of it pins the supervisor's own actors (the
KV store, the owner fence) to the head, whose loss ends the cluster anyway."""


def start_head_actor(cls: type, name: str, namespace: str, max_concurrency: int, *args: Any, concurrency_groups: dict[str, int] | None = None) -> Any:
    """Start one of the supervisor's own actors (the KV store, the owner fence), or get it when a
    concurrent creator won: detached, named, 0 CPUs, on the head node, never restarted (a restarted
    one would come back empty). ``concurrency_groups``: Ray's, beside the default group of
    ``max_concurrency`` threads."""
    import ray

    # get_if_exists: two creators racing (two daemons, a retry) end up with the same actor.
    options = dict(name=name, namespace=namespace, lifetime="detached", get_if_exists=True, num_cpus=0, max_restarts=0)
    remote_cls = ray.remote(concurrency_groups=concurrency_groups)(cls) if concurrency_groups else ray.remote(cls)  # not an .options() key
    return remote_cls.options(**options, resources={HEAD_RESOURCE: 0.001}, max_concurrency=max_concurrency).remote(*args)


def namespace_of(supervisor: str) -> str:
    """Ray namespace of a supervisor's actors."""
    return f"supervisor.{supervisor}"


def pool_prefix_of(supervisor: str, pool: str) -> str:
    """Name prefix of a supervisor's pool (its placement groups are ``<prefix>:pg...``)."""
    return f"{supervisor}.{pool}"


@dataclass
class Owned:
    """Live resources of one supervisor: placement groups ``{name: id}`` and actor names."""

    placement_groups: dict[str, str] = field(default_factory=dict)
    actors: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.placement_groups or self.actors)


def find_owned(supervisor: str) -> Owned:
    """Every live placement group and named actor of ``supervisor`` (needs a Ray connection)."""
    import ray
    from ray.util import placement_group_table

    prefix = pool_prefix_of(supervisor, "")
    pgs = {
        str(info["name"]): pg_id
        for pg_id, info in placement_group_table().items()
        if info.get("state") != "REMOVED" and str(info.get("name", "")).startswith(prefix)
    }
    namespace = namespace_of(supervisor)
    actors = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == namespace)
    return Owned(pgs, actors)


def kill_named(supervisor: str, names: list[str]) -> None:
    """Kill the supervisor's named actors ``names`` and delete their heartbeats (idempotent; no fence:
    see :func:`remove_owned`)."""
    import ray

    from ..core.worker.actor_heartbeat import clear_beats_once_ended

    namespace = namespace_of(supervisor)
    killed: list[str] = []
    for name in names:
        try:
            handle = ray.get_actor(name, namespace=namespace)
        except ValueError:
            continue  # gone already
        ray.kill(handle, no_restart=True)
        killed.append(handle._actor_id.hex())
    try:
        clear_beats_once_ended(killed)
    except Exception as exc:  # a leftover beat is a few bytes that `supervisor gc` removes later
        log.debug("heartbeats_not_cleared", supervisor=supervisor, error=first_line(exc))


def remove_placement_group_ids(pg_ids: list[str]) -> None:
    """Remove placement groups by id (idempotent; no fence: see :func:`remove_owned`)."""
    import ray
    from ray.util.placement_group import PlacementGroup

    from ..fencing import UNFENCED

    UNFENCED.remove_placement_groups([PlacementGroup(ray.PlacementGroupID(bytes.fromhex(i))) for i in pg_ids])


def remove_owned(supervisor: str, owned: Owned) -> None:
    """Kill the named actors and remove the placement groups in ``owned`` (both idempotent), without
    asking the owner fence: for test harnesses cleaning up after themselves. Daemons and ``gc`` remove
    through :meth:`supervisor.daemon.fence.OwnerFence.remove_owned`."""
    kill_named(supervisor, owned.actors)
    remove_placement_group_ids(list(owned.placement_groups.values()))
    if owned:
        log.info("owned_resources_removed", supervisor=supervisor, placement_groups=sorted(owned.placement_groups), actors=owned.actors)
