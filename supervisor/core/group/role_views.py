"""Role views of a colocated or fused group: one group per role, attached to the same actors.

verl's ``spawn`` and ``fuse``: a colocated class (``create_colocated_worker_cls``) registers each role's
methods as ``role_method`` on one actor; a fused one (``create_colocated_worker_raw_cls``) reaches
each role through ``_fuw_execute``. A view is an attached copy of the group (``copy``, which the
group makes) with the role's methods under their own names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...errors import ConfigError
from .actor_class import ClassWithInitArgs

# The group (a WorkerGroup, which imports this module: named loosely here to keep the import graph acyclic).
WorkerGroup = Any

__all__ = ["colocated_role_views", "fused_role_views"]

Copy = Callable[[ClassWithInitArgs | None], WorkerGroup]


def colocated_role_views(group: WorkerGroup, prefix_set: Iterable[str], copy: Copy) -> dict[str, WorkerGroup]:
    """``{role: view}``: each view calls ``role_method`` on the colocated actors as ``method``."""
    out: dict[str, WorkerGroup] = {}
    for role in prefix_set:
        view = copy(group.cls_with_init)
        prefix = role + "_"
        for method_name in list(view.method_names):
            if method_name.startswith(prefix):
                setattr(view, method_name[len(prefix) :], getattr(view, method_name))
        view.sub_cls_name = role
        out[role] = view
    return out


def fused_role_views(group: WorkerGroup, prefix_set: Iterable[str], copy: Copy) -> dict[str, WorkerGroup]:
    """``{role: view}`` of a fused group; each view has its role's methods.

    Raises:
        ConfigError: the group's class is not a fused worker class, or has no such role.
    """
    raw_cls_dict = getattr(group.cls_with_init.user_cls if group.cls_with_init else None, "raw_cls_dict", None)
    if raw_cls_dict is None:
        raise ConfigError(f"group {group.name_prefix} is not a fused worker group (create_colocated_worker_raw_cls)")
    out: dict[str, WorkerGroup] = {}
    for role in prefix_set:
        if role not in raw_cls_dict:
            raise ConfigError(f"fused worker group {group.name_prefix} has no role {role!r} (roles: {sorted(raw_cls_dict)})")
        view = copy(ClassWithInitArgs(raw_cls_dict[role]))
        view.fused_worker_used = True
        view.sub_cls_name = role
        out[role] = view
    return out
