"""``@register``: declare how a worker method is called through its group.

The decorator only attaches a :class:`MethodSpec` to the function; the worker runs the method
unchanged (apart from resolving :class:`~supervisor.core.protocol.DataProtoFuture` arguments). The group
reads the spec when it binds methods (:mod:`supervisor.core.group.binding`).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .dispatch_modes import Dispatch, Execute

__all__ = ["MAGIC_ATTR", "MethodSpec", "register", "get_method_spec", "Dispatch", "Execute"]

# verl stores the registration under this attribute; keeping the name lets code that inspects it
# (and classes decorated by verl's own decorator) interoperate.
MAGIC_ATTR = "attrs_3141562937"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class MethodSpec:
    """How a registered method is dispatched, executed and collected.

    Attributes:
        dispatch_mode: a :class:`Dispatch` member, or a dict with ``dispatch_fn`` and ``collect_fn``.
        execute_mode: which ranks run the method.
        blocking: whether the bound group method waits for the results (else returns ObjectRefs).
        idempotent: running the method twice on the same input is harmless (rollout generation,
            log-prob computation); a supervised group then re-runs a dead rank's shard by default.
        on_rank_failure: ``"retry"`` or ``"raise"``: what a supervised blocking call does when a rank
            dies while it runs (None: the group's setting, else retry when idempotent).
        read_only: the method does not write the DataProtos it is given: their tensors arrive as
            views of Ray's read-only shared memory, with no copy (writing to them is undefined).
        mutates_state: the method changes the rank's trained state (an optimiser step): a group
            whose recovery replays logs each completed call and runs it again after a restore.
    """

    dispatch_mode: Any
    execute_mode: Execute
    blocking: bool = True
    idempotent: bool = False
    on_rank_failure: str | None = None
    read_only: bool = False
    mutates_state: bool = False

    def as_dict(self) -> dict[str, Any]:
        # verl's three keys always; our extensions only when set, so a verl-style registration stores
        # exactly what verl stores.
        attrs: dict[str, Any] = {"dispatch_mode": self.dispatch_mode, "execute_mode": self.execute_mode, "blocking": self.blocking}
        if self.idempotent:
            attrs["idempotent"] = True
        if self.on_rank_failure is not None:
            attrs["on_rank_failure"] = self.on_rank_failure
        if self.read_only:
            attrs["read_only"] = True
        if self.mutates_state:
            attrs["mutates_state"] = True
        return attrs


def check_dispatch_mode(dispatch_mode: Any) -> None:
    """Raise a ValueError unless ``dispatch_mode`` is a Dispatch member or a {dispatch_fn, collect_fn} dict."""
    if isinstance(dispatch_mode, Dispatch):
        return
    if isinstance(dispatch_mode, dict):
        missing = [k for k in ("dispatch_fn", "collect_fn") if k not in dispatch_mode]
        if missing:
            raise ValueError(f"custom dispatch_mode dict is missing {missing}; it needs dispatch_fn and collect_fn")
        for key in ("dispatch_fn", "collect_fn"):
            if not callable(dispatch_mode[key]):
                raise ValueError(f"custom dispatch_mode[{key!r}] must be callable, got {type(dispatch_mode[key]).__name__}")
        return
    raise ValueError(f"dispatch_mode must be a Dispatch member or a dict, got {dispatch_mode!r}")


def check_execute_mode(execute_mode: Any) -> None:
    """Raise a ValueError unless ``execute_mode`` is an Execute member."""
    if not isinstance(execute_mode, Execute):
        raise ValueError(f"execute_mode must be an Execute member, got {execute_mode!r}")


def _materialize_futures(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # A DataProtoFuture can only arrive by unpickling, which imports supervisor.core.protocol; when that module
    # is not loaded there is nothing to resolve, and light workers never pay for importing torch.
    protocol = sys.modules.get("supervisor.core.protocol")
    if protocol is None:
        return args, kwargs
    future_type = protocol.DataProtoFuture
    args = tuple(a.get() if isinstance(a, future_type) else a for a in args)
    kwargs = {k: (v.get() if isinstance(v, future_type) else v) for k, v in kwargs.items()}
    return args, kwargs


async def _materialize_futures_async(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    protocol = sys.modules.get("supervisor.core.protocol")
    if protocol is None:
        return args, kwargs
    future_type = protocol.DataProtoFuture
    args = tuple([(await a.get_async()) if isinstance(a, future_type) else a for a in args])
    kwargs = {k: ((await v.get_async()) if isinstance(v, future_type) else v) for k, v in kwargs.items()}
    return args, kwargs


def register(
    dispatch_mode: Any = Dispatch.ALL_TO_ALL,
    execute_mode: Execute = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
    idempotent: bool = False,
    on_rank_failure: str | None = None,
    read_only: bool = False,
    mutates_state: bool = False,
) -> Callable[[F], F]:
    """Mark a worker method as callable through its :class:`~supervisor.core.group.group.WorkerGroup`.

    Works on plain and ``async def`` methods.

    Args:
        dispatch_mode: how arguments are split across ranks (a :class:`Dispatch` member or a
            ``{"dispatch_fn": ..., "collect_fn": ...}`` dict).
        execute_mode: which ranks run the method.
        blocking: the group call waits for and returns results; when False it returns ObjectRefs
            (or a DataProtoFuture for DataProto-collecting modes).
        materialize_futures: resolve DataProtoFuture arguments inside the worker before the call.
        idempotent: the method may safely run twice on the same shard (see :class:`MethodSpec`).
        on_rank_failure: ``"retry"`` or ``"raise"`` for calls in flight when a rank dies.
        read_only: the method only reads its DataProto arguments: each rank gets its shard as
            zero-copy views of the object store instead of a writable copy (see :class:`MethodSpec`).
        mutates_state: the method changes the rank's trained state (see :class:`MethodSpec`).

    Raises:
        ValueError: ``dispatch_mode`` or ``execute_mode`` is not valid.
    """
    check_dispatch_mode(dispatch_mode)
    check_execute_mode(execute_mode)
    if on_rank_failure not in (None, "retry", "raise"):
        raise ValueError(f"on_rank_failure must be 'retry', 'raise' or None, got {on_rank_failure!r}")
    spec = MethodSpec(
        dispatch_mode=dispatch_mode,
        execute_mode=execute_mode,
        blocking=blocking,
        idempotent=idempotent,
        on_rank_failure=on_rank_failure,
        read_only=read_only,
        mutates_state=mutates_state,
    )

    def decorator(func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_inner(*args: Any, **kwargs: Any) -> Any:
                if materialize_futures:
                    args, kwargs = await _materialize_futures_async(args, kwargs)
                return await func(*args, **kwargs)

            wrapper: Any = async_inner
        else:

            @functools.wraps(func)
            def inner(*args: Any, **kwargs: Any) -> Any:
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                return func(*args, **kwargs)

            wrapper = inner
        setattr(wrapper, MAGIC_ATTR, spec.as_dict())
        return wrapper  # type: ignore[no-any-return]

    return decorator


def get_method_spec(method: Any) -> MethodSpec | None:
    """Return the registration of ``method``, or None when it was not decorated with :func:`register`."""
    attrs = getattr(method, MAGIC_ATTR, None)
    if not isinstance(attrs, dict) or "dispatch_mode" not in attrs:
        return None
    return MethodSpec(
        dispatch_mode=attrs["dispatch_mode"],
        execute_mode=attrs.get("execute_mode", Execute.ALL),
        blocking=attrs.get("blocking", True),
        idempotent=attrs.get("idempotent", False),
        on_rank_failure=attrs.get("on_rank_failure"),
        read_only=attrs.get("read_only", False),
        mutates_state=attrs.get("mutates_state", False),
    )
