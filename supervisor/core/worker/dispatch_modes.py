"""Dispatch and execute modes: open enumerations that user code may extend.

verl lets a project add dispatch modes at import time (``register_dispatch_mode``), so the modes
cannot be a closed :class:`enum.Enum`. :class:`OpenEnum` keeps the enum ergonomics (``Dispatch.ONE_TO_ALL``,
identity comparison, ``isinstance``) and adds ``register``. Members pickle by name and re-register on
the receiving side, so a worker process that never imported the registering module still unpickles a
method decorated with a custom mode.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["OpenEnum", "Dispatch", "Execute", "init_predefined_dispatch_mode", "init_predefined_execute_mode"]


class OpenEnum:
    """An enumeration whose members are created by :meth:`register`.

    Subclasses declare their own ``_registry``. Members are unique per name within a subclass.
    """

    _registry: ClassVar[dict[str, OpenEnum]]

    def __init__(self, name: str, value: int) -> None:
        self.name = name
        self.value = value

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry = {}

    @classmethod
    def register(cls, name: str) -> OpenEnum:
        """Return the member called ``name``, creating it if it does not exist yet."""
        if not name.isidentifier():
            raise ValueError(f"{cls.__name__} member name must be an identifier, got {name!r}")
        member = cls._registry.get(name)
        if member is None:
            member = cls(name, len(cls._registry))
            cls._registry[name] = member
            setattr(cls, name, member)
        return member

    @classmethod
    def get(cls, name: str) -> OpenEnum:
        """Return the member called ``name``; KeyError naming the known members otherwise."""
        try:
            return cls._registry[name]
        except KeyError:
            raise KeyError(f"{cls.__name__} has no member {name!r}; known: {sorted(cls._registry)}") from None

    @classmethod
    def members(cls) -> list[OpenEnum]:
        return list(cls._registry.values())

    @classmethod
    def remove(cls, name: str) -> None:
        """Forget a member (for tests that register throw-away modes)."""
        cls._registry.pop(name, None)
        if name in cls.__dict__:
            delattr(cls, name)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (type(self).register, (self.name,))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class Dispatch(OpenEnum):
    """How the arguments of a group call are split across ranks and results gathered back.

    Predefined members: RANK_ZERO, ONE_TO_ALL, ALL_TO_ALL, DP_COMPUTE, DP_COMPUTE_PROTO,
    DP_COMPUTE_PROTO_WITH_FUNC, DP_COMPUTE_METRIC, DIRECT_ROLLOUT_METHOD. Their functions live in
    :mod:`supervisor.core.group.dispatch`.
    """

    RANK_ZERO: ClassVar[Dispatch]
    ONE_TO_ALL: ClassVar[Dispatch]
    ALL_TO_ALL: ClassVar[Dispatch]
    DP_COMPUTE: ClassVar[Dispatch]
    DP_COMPUTE_PROTO: ClassVar[Dispatch]
    DP_COMPUTE_PROTO_WITH_FUNC: ClassVar[Dispatch]
    DP_COMPUTE_METRIC: ClassVar[Dispatch]
    DIRECT_ROLLOUT_METHOD: ClassVar[Dispatch]


class Execute(OpenEnum):
    """Which ranks run a group call: ALL or RANK_ZERO."""

    ALL: ClassVar[Execute]
    RANK_ZERO: ClassVar[Execute]


PREDEFINED_DISPATCH_MODES = (
    "RANK_ZERO",
    "ONE_TO_ALL",
    "ALL_TO_ALL",
    "DP_COMPUTE",
    "DP_COMPUTE_PROTO",
    "DP_COMPUTE_PROTO_WITH_FUNC",
    "DP_COMPUTE_METRIC",
    "DIRECT_ROLLOUT_METHOD",
)
PREDEFINED_EXECUTE_MODES = ("ALL", "RANK_ZERO")


def init_predefined_dispatch_mode() -> None:
    """Register the predefined :class:`Dispatch` members (idempotent; done at import)."""
    for name in PREDEFINED_DISPATCH_MODES:
        Dispatch.register(name)


def init_predefined_execute_mode() -> None:
    """Register the predefined :class:`Execute` members (idempotent; done at import)."""
    for name in PREDEFINED_EXECUTE_MODES:
        Execute.register(name)


init_predefined_dispatch_mode()
init_predefined_execute_mode()
