"""Colocation: several roles (actor, critic, reference...) in one actor process per rank.

:func:`create_colocated_worker_cls` builds a Worker class that constructs every role's class inside
itself and exposes each role's registered methods as ``{role}_{method}``. A group of that class is
split into one group per role with :meth:`~supervisor.core.group.WorkerGroup.spawn`.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import ConfigError
from .actor_class import ClassWithInitArgs, unwrap_actor_class
from .binding import registered_methods
from .decorator import MAGIC_ATTR
from .modes import Dispatch
from .worker import Worker

__all__ = ["create_colocated_worker_cls"]


def _delegate(role: str, method_name: str, is_async: bool) -> Any:
    if is_async:

        async def async_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.worker_dict[role], method_name)(*args, **kwargs)

        return async_call

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker_dict[role], method_name)(*args, **kwargs)

    return call


def create_colocated_worker_cls(class_dict: dict[str, ClassWithInitArgs]) -> ClassWithInitArgs:
    """A class whose single actor per rank hosts every role of ``class_dict``.

    Args:
        class_dict: ``{role: ClassWithInitArgs}``; every class must derive from :class:`Worker`.

    Returns:
        A :class:`ClassWithInitArgs` for a group; its methods are ``{role}_{method}``.

    Raises:
        ConfigError: empty dict, a role name that is not an identifier, or a class not derived from Worker.
    """
    if not class_dict:
        raise ConfigError("create_colocated_worker_cls needs at least one role")
    roles: dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]] = {}
    for role, cwia in class_dict.items():
        if not role.isidentifier():
            raise ConfigError(f"role name {role!r} must be an identifier (it prefixes method names)")
        user_cls = unwrap_actor_class(cwia.cls)
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise ConfigError(f"role {role!r}: {user_cls!r} must derive from supervisor.Worker to be colocated")
        roles[role] = (user_cls, cwia.args, cwia.kwargs)

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
