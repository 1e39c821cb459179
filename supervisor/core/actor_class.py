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
        *args, **kwargs: passed to its constructor in every rank.
    """

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self._options: dict[str, Any] = {}
        self._additional_resource: dict[str, Any] = {}
        self._actor_classes: dict[tuple[tuple[str, int], ...], Any] = {}
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

    def actor_class(self, concurrency_groups: dict[str, int] | None = None) -> Any:
        """The ``ray.remote`` class to instantiate, with ``concurrency_groups`` added.

        Ray accepts concurrency groups only in ``ray.remote(...)``, not in ``.options()``, so a class that
        arrives already decorated is re-decorated from its Python class with its own defaults plus ours.
        """
        import ray

        key = tuple(sorted((concurrency_groups or {}).items()))
        cached = self._actor_classes.get(key)
        if cached is not None:
            return cached
        if not concurrency_groups and hasattr(self.cls, "__ray_actor_class__"):
            actor_cls = self.cls
        else:
            defaults = dict(getattr(self.cls, "_default_options", None) or {})
            if concurrency_groups:
                defaults["concurrency_groups"] = {**(defaults.get("concurrency_groups") or {}), **concurrency_groups}
            actor_cls = ray.remote(**defaults)(self.user_cls) if defaults else ray.remote(self.user_cls)
        self._actor_classes[key] = actor_cls
        return actor_cls

    def __call__(self) -> Any:
        """Construct the class locally (no Ray): how colocated roles are built inside one actor."""
        return self.user_cls(*self.args, **self.kwargs)

    def copy(self) -> ClassWithInitArgs:
        clone = copy.copy(self)
        clone._options = dict(self._options)
        clone._actor_classes = {}
        return clone
