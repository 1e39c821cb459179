"""Colocation: several roles (actor, critic, reference...) in one actor process per rank.

:func:`create_colocated_worker_cls` builds a Worker class that constructs every role's class inside
itself and exposes each role's registered methods as ``{role}_{method}``. A group of that class is
split into one group per role with :meth:`~supervisor.core.group.group.WorkerGroup.spawn`.

The fused variant (verl's): :func:`create_colocated_worker_raw_cls` builds a plain Worker class that
constructs every role as an attribute (``self.actor``, ``self.critic``; a user class may derive from it
and add methods that use several roles in-process). A group of it, marked ``fused_worker_used``, reaches
a role's methods through the sub-groups :meth:`~supervisor.core.group.group.WorkerGroup.fuse` attaches
(``group.actor.add(...)``); each call runs ``_fuw_execute("{role}_fwmn_{method}", ...)`` on the actors.
"""

from __future__ import annotations

import inspect
from typing import Any

from ...errors import ConfigError
from ..worker.dispatch_modes import Dispatch
from ..worker.registration import MAGIC_ATTR
from ..worker.worker_base import FUSED_EXECUTE_METHOD, FUSED_METHOD_SEPARATOR, Worker
from .actor_class import ClassWithInitArgs, unwrap_actor_class
from .binding import registered_methods

__all__ = ["FUSED_METHOD_SEPARATOR", "create_colocated_worker_cls", "create_colocated_worker_cls_fused", "create_colocated_worker_raw_cls"]


def _delegate(role: str, method_name: str, is_async: bool) -> Any:
    if is_async:

        async def async_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.worker_dict[role], method_name)(*args, **kwargs)

        return async_call

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker_dict[role], method_name)(*args, **kwargs)

    return call


def _role_classes(class_dict: dict[str, ClassWithInitArgs], what: str) -> dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]]:
    if not class_dict:
        raise ConfigError(f"{what} needs at least one role")
    roles: dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]] = {}
    for role, cwia in class_dict.items():
        if not role.isidentifier():
            raise ConfigError(f"role name {role!r} must be an identifier (it prefixes method names)")
        user_cls = unwrap_actor_class(cwia.cls)
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise ConfigError(f"role {role!r}: {user_cls!r} must derive from supervisor.Worker to be colocated")
        roles[role] = (user_cls, cwia.args, cwia.kwargs)
    return roles


def create_colocated_worker_raw_cls(class_dict: dict[str, ClassWithInitArgs]) -> type:
    """verl's fused worker: a :class:`Worker` class (not yet ``ray.remote``) hosting every role.

    An instance holds each role's worker as the attribute named by the role and in ``fused_worker_dict``
    (which every role's worker also receives, so roles can reach each other). ``_fuw_execute(
    "{role}_fwmn_{method}", *args, **kwargs)`` calls a role's method. The class attribute
    ``raw_cls_dict`` maps each role to its class; ``is_fused_worker`` is True.

    Raises:
        ConfigError: empty dict, a role name that is not an identifier, or a class not derived from Worker.
    """
    roles = _role_classes(class_dict, "create_colocated_worker_raw_cls")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        Worker.__init__(self, *args, **kwargs)
        for role, (cls, role_args, role_kwargs) in roles.items():
            self.fused_worker_dict[role] = cls(*role_args, **role_kwargs)
            setattr(self, role, self.fused_worker_dict[role])
        for worker in self.fused_worker_dict.values():
            setattr(worker, Worker.fused_worker_attr_name, self.fused_worker_dict)

    def _fuw_execute(self: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
        role, sep, name = method_name.partition(FUSED_METHOD_SEPARATOR)
        assert sep, f"_fuw_execute: {method_name!r} is not of the form '{{role}}{FUSED_METHOD_SEPARATOR}{{method}}'"
        target = self.fused_worker_dict.get(role)
        assert target is not None, (
            f"_fuw_execute: {method_name!r} is for role {role!r}, this fused worker hosts {sorted(self.fused_worker_dict)}"
        )
        return getattr(target, name)(*args, **kwargs)

    name = "_".join(["FusedWorker", *roles])
    namespace = {
        "__init__": __init__,
        FUSED_EXECUTE_METHOD: _fuw_execute,
        "__module__": __name__,
        "is_fused_worker": True,
        "raw_cls_dict": {role: cls for role, (cls, _, _) in roles.items()},
    }
    return type(name, (Worker,), namespace)


def create_colocated_worker_cls_fused(class_dict: dict[str, ClassWithInitArgs]) -> ClassWithInitArgs:
    """:func:`create_colocated_worker_raw_cls` as a ``ray.remote`` class with ``fused_worker_used`` set:
    a group of it gets one sub-group per role from ``spawn``/``fuse``."""
    import ray

    cwia = ClassWithInitArgs(ray.remote(create_colocated_worker_raw_cls(class_dict)))
    cwia.fused_worker_used = True
    return cwia


def create_colocated_worker_cls(class_dict: dict[str, ClassWithInitArgs]) -> ClassWithInitArgs:
    """A class whose single actor per rank hosts every role of ``class_dict``.

    Args:
        class_dict: ``{role: ClassWithInitArgs}``; every class must derive from :class:`Worker`.

    Returns:
        A :class:`ClassWithInitArgs` for a group; its methods are ``{role}_{method}``.

    Raises:
        ConfigError: empty dict, a role name that is not an identifier, or a class not derived from Worker.
    """
    roles = _role_classes(class_dict, "create_colocated_worker_cls")

    def __init__(self: Any) -> None:
        Worker.__init__(self)
        # Each role is constructed in this process; the environment contract is shared by all of them.
        self.worker_dict = {role: cls(*args, **kwargs) for role, (cls, args, kwargs) in roles.items()}

    namespace: dict[str, Any] = {"__init__": __init__, "__module__": __name__}
    for role, (user_cls, _, _) in roles.items():
        for method_name, spec in registered_methods(user_cls).items():
            func = _delegate(role, method_name, inspect.iscoroutinefunction(getattr(user_cls, method_name)))
            setattr(func, MAGIC_ATTR, spec.as_dict())
            func.__name__ = f"{role}_{method_name}"
            namespace[f"{role}_{method_name}"] = func
            # vLLM's executor calls rollout methods by their plain name on the actor.
            if spec.dispatch_mode is Dispatch.DIRECT_ROLLOUT_METHOD and "rollout" in role:
                if method_name in namespace:
                    raise ConfigError(f"direct rollout method {method_name!r} of role {role!r} clashes with another role")
                namespace[method_name] = func
    colocated = type("WorkerDict", (Worker,), namespace)
    return ClassWithInitArgs(colocated)
