"""``ClassWithInitArgs``: a worker class with the arguments to construct it, created later as actors."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["ClassWithInitArgs", "unwrap_actor_class"]


def unwrap_actor_class(cls: Any) -> type:
    """The user's Python class behind ``cls``, which may be a ``ray.remote`` actor class."""
    inner = getattr(cls, "__ray_actor_class__", None)
    return inner if inner is not None else cls  # type: ignore[no-any-return]


class ClassWithInitArgs:
    """A worker class plus its constructor arguments and Ray actor options.

    ``cls`` may be a plain class (it is wrapped with ``ray.remote`` when actors are created) or a class
    already decorated with ``ray.remote`` (as verl code passes it).

    Args:
        cls: the worker class.
        *args: positional arguments of its constructor, in every rank.
        **kwargs: keyword arguments of its constructor, in every rank.
    """

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self._options: dict[str, Any] = {}
        self._additional_resource: dict[str, Any] = {}
        self._actor_cls: Any = None  # the ray.remote class, made once
        self.fused_worker_used = False

    @property
    def user_cls(self) -> type:
        """The undecorated class, where ``@register`` specs are read from."""
        return unwrap_actor_class(self.cls)

    def update_options(self, options: dict[str, Any]) -> None:
        """Add Ray actor options (``num_cpus``, ``runtime_env``, ``max_concurrency``...) for every rank.

        The group sets ``name``, ``namespace``, ``lifetime``, the placement and the worker environment;
        ``runtime_env`` given here is merged with the environment contract.
        """
        self._options.update(options)

    def set_additional_resource(self, additional_resource: dict[str, Any]) -> None:
        self._additional_resource = dict(additional_resource)

    @property
    def options(self) -> dict[str, Any]:
        return {**self._additional_resource, **self._options}

    def actor_class(self) -> Any:
        """The ``ray.remote`` class to instantiate.

        A class that arrives decorated is used as it is when it is the class the group runs; when
        :attr:`user_cls` differs from it (an integration mixes the supervisor's endpoints in), that
        class is decorated with the given class's own ``ray.remote`` defaults.
        """
        import ray

        if self._actor_cls is None:
            user_cls = self.user_cls
            if getattr(self.cls, "__ray_actor_class__", None) is user_cls:
                self._actor_cls = self.cls
            else:
                defaults = dict(getattr(self.cls, "_default_options", None) or {})
                self._actor_cls = ray.remote(**defaults)(user_cls) if defaults else ray.remote(user_cls)
        return self._actor_cls

    def __call__(self) -> Any:
        """Construct the class locally (no Ray): how colocated roles are built inside one actor."""
        return self.user_cls(*self.args, **self.kwargs)

    def copy(self) -> ClassWithInitArgs:
        clone = copy.copy(self)
        clone._options = dict(self._options)
        clone._actor_cls = None
        return clone
