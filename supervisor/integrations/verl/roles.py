"""The roles of a supervised colocated group: what verl's ``spawn`` gives the trainer.

verl's trainer puts every role of a resource pool (actor/rollout, critic, reference policy) into one
actor per bundle (``create_colocated_worker_cls``: a ``WorkerDict`` whose methods are the roles'
methods, prefixed ``role_``), creates one group of those actors and calls ``spawn`` for one group per
role. verl's fused variant (``create_colocated_worker_cls_fused``: a ``FusedWorker`` hosting each role
as an attribute) runs a role's method through one entry, ``_fuw_execute("role_fwmn_method", ...)``,
and its ``spawn``/``fuse`` give deep copies of the group, one per role.

verl's spawned groups are copies holding the actor handles of the moment; here each role is a view of
the one supervised group (of either kind), so a replaced actor is the role's actor too, calls go through
the supervised dispatch, and the calls that set every role up (its ``init_model``, and verl's ``reset``
and ``set_loss_fn``) are replayed on a replacement in the order the program made them
(:meth:`SupervisedRayWorkerGroup._init_ran`).
"""

from __future__ import annotations

import inspect
from typing import Any

# The supervised group these classes serve is a :class:`~.group.SupervisedRayWorkerGroup`; it is
# typed ``Any`` here because that module imports this one (and the import graph has no cycle).

__all__ = [
    "ArmingInit", "SupervisedRoleGroup", "ROLE_SETUP_METHODS", "COLOCATED_WORKER", "FUSED_WORKER",
    "TRAINED_ROLES", "UPDATE_METHODS", "colocated_kind", "class_kind", "role_classes", "trained_roles", "CountingUpdate",
]  # fmt: skip

# What verl's colocating helpers build: create_colocated_worker_cls (every role's methods on one class,
# prefixed with the role) and create_colocated_worker_raw_cls / _fused (roles behind `_fuw_execute`).
COLOCATED_WORKER = "WorkerDict"
FUSED_WORKER = "FusedWorker"

# Besides its init method, the calls that set a role up, replayed on a replacement too: verl's trainer
# sets its critic up with ``reset()`` (the engine's initialisation) and ``set_loss_fn(...)``.
ROLE_SETUP_METHODS = ("reset", "set_loss_fn")


# verl's roles whose ranks hold trained state (FSDP or Megatron shards of the weights and the optimizer
# state): the policy update in its actor roles, and the critic. Rollout, reference and reward roles hold
# weights that are loaded or synced, not trained, so re-initialising them loses nothing.
TRAINED_ROLES = frozenset({"actor", "actor_rollout", "actor_rollout_ref", "critic"})
# The calls that train: one completed call is one update of that state (verl's actor, critic and
# engine TrainingWorker).
UPDATE_METHODS = ("update_actor", "update_critic", "train_batch", "train_mini_batch")


def _updates(cls: Any) -> list[str]:
    cls = getattr(cls, "__ray_actor_class__", cls)
    return [m for m in UPDATE_METHODS if callable(getattr(cls, m, None))]


def trained_roles(kind: str | None, roles: dict[str, type] | None, cls: Any, kwargs: dict[str, Any]) -> list[str]:
    """The roles of a verl worker class whose ranks hold trained state (pure; empty: none, or unknown).

    Only a class with an update method trains. A colocated class (``roles``: its role classes) says
    which of its roles do by their names (verl's trainer keys them by role); a plain class by its
    ``role`` argument (verl's ``ActorRolloutRefWorker``), or, taking none, by being an update's
    owner (verl's critic, the engine's ``TrainingWorker``).
    """
    if kind is not None:
        return sorted(r for r, role_cls in (roles or {}).items() if r in TRAINED_ROLES and _updates(role_cls))
    updates = _updates(cls)
    if not updates:
        return []
    cls = getattr(cls, "__ray_actor_class__", cls)
    role = kwargs.get("role")
    if role is None:
        return ["critic" if "update_critic" in updates or "actor" not in cls.__name__.lower() else "actor"]
    return [str(role)] if str(role) in TRAINED_ROLES else []


class CountingUpdate:
    """An update method of a group whose state no snapshot keeps: each completed call is counted, so
    a lost rank can say how much training was lost."""

    def __init__(self, bound: Any, domain: Any) -> None:
        self._bound = bound
        self._domain = domain
        self.__name__ = getattr(bound, "__name__", "update")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self._bound(*args, **kwargs)
        self._domain.note_update()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bound, name)


class ArmingInit:
    """A group's init method: runs the program's call, then tells the group it ran (same arguments),
    so the supervisor re-runs it on replacements and looks again whether a process group formed."""

    def __init__(self, owner: Any, bound: Any, method: str) -> None:
        self._owner = owner
        self._bound = bound
        self._method = method  # the name on the actor (``role_init_model`` for a role)
        self.__name__ = getattr(bound, "__name__", method)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self._bound(*args, **kwargs)
        self._owner._init_ran(self._method, args, kwargs)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bound, name)


class SupervisedRoleGroup:
    """One role of a supervised colocated group: the role's methods without their prefix, called on
    the group's supervised actors; everything else (``world_size``, ``workers``, ``execute_all``, the
    rollout's direct methods...) is the group's own."""

    def __init__(self, parent: Any, role: str) -> None:
        self._parent = parent
        self.sub_cls_name = role
        self.name_prefix = parent.name_prefix
        self.ray_cls_with_init = parent.ray_cls_with_init
        self.fused_worker_used = parent.fused_worker_used
        self.wg_dict = None
        self.profile_steps = parent.profile_steps
        self.worker_nsight_options = parent.worker_nsight_options
        self.device_name = parent.device_name
        self._dispatch_info: dict[str, list[int]] = {}  # verl's trainer caches a role's meshes here

    @property
    def role(self) -> str:
        return self.sub_cls_name

    @property
    def parent(self) -> Any:
        """The supervised group of all roles."""
        return self._parent

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this view lacks.
        if name.startswith("__") or "_parent" not in self.__dict__:
            raise AttributeError(name)
        parent = self._parent
        method = parent.role_method(self.sub_cls_name, name)
        if method in parent.group.method_names:
            bound = getattr(parent.group, method)
            if name in parent.role_setup_methods:
                return ArmingInit(parent, bound, method)
            return parent.counting(name, bound)
        return getattr(parent, name)

    def teardown(self) -> None:
        """The roles share their actors: tearing one down tears down the group (as killing verl's)."""
        self._parent.teardown()

    def __repr__(self) -> str:
        return f"<SupervisedRoleGroup {self.sub_cls_name} of {self._parent!r}>"


def class_kind(cls: Any) -> str | None:
    """:data:`COLOCATED_WORKER`, :data:`FUSED_WORKER`, or None for a plain worker class."""
    cls = getattr(cls, "__ray_actor_class__", cls)  # ray.remote(...) wraps the class
    # A raw fused class is renamed FusedWorker_<roles> by verl and keeps its roles in raw_cls_dict.
    if isinstance(getattr(cls, "raw_cls_dict", None), dict):
        return FUSED_WORKER
    if str(getattr(cls, "__qualname__", "")).startswith("create_colocated_worker_cls."):
        return COLOCATED_WORKER
    return None


def colocated_kind(ray_cls_with_init: Any) -> str | None:
    """The kind (:func:`class_kind`) of a verl ``RayClassWithInitArgs``'s class; None for no class."""
    if ray_cls_with_init is None:
        return None
    if getattr(ray_cls_with_init, "fused_worker_used", False):
        return FUSED_WORKER
    return class_kind(getattr(ray_cls_with_init, "cls", None))


def role_classes(kind: str | None, cls: Any) -> dict[str, type] | None:
    """``{role: class}`` of a WorkerDict or fused worker class; None when it does not show them."""
    if kind == FUSED_WORKER:
        raw = getattr(getattr(cls, "__ray_actor_class__", cls), "raw_cls_dict", None)
        return {str(k): getattr(v, "__ray_actor_class__", v) for k, v in raw.items()} if isinstance(raw, dict) else None
    if kind == COLOCATED_WORKER:
        return _worker_dict_roles(cls)
    return None


def _worker_dict_roles(worker_dict_cls: Any) -> dict[str, type] | None:
    """``{role: class}`` of a verl ``WorkerDict`` class, read from what ``create_colocated_worker_cls``
    closed over; None when verl keeps it elsewhere (then only the roles ``spawn`` names are known)."""
    cls = getattr(worker_dict_cls, "__ray_actor_class__", worker_dict_cls)
    init = inspect.unwrap(cls.__dict__.get("__init__", None) or (lambda: None))
    names, cells = getattr(init, "__code__", None), getattr(init, "__closure__", None)
    if names is None or not cells:
        return None
    free = dict(zip(names.co_freevars, cells, strict=False))
    cell = free.get("cls_dict")
    try:
        roles = cell.cell_contents if cell is not None else None
    except ValueError:  # an empty cell
        return None
    if not isinstance(roles, dict):
        return None
    return {str(k): getattr(v, "__ray_actor_class__", v) for k, v in roles.items()}
