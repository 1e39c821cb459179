"""Turn the ``@register``-ed methods of a worker class into methods of its group.

A bound method runs: dispatch (split the caller's arguments per rank) → execute (one Ray call per
rank, or rank 0 only) → wait when blocking → collect (reduce the per-rank outputs) → strip padding that
dispatch added. Every call's duration (to the return of a blocking call; to the submission of a
non-blocking one) and failures are recorded in ``supervisor_dispatch_duration_seconds`` and
``supervisor_dispatch_failures_total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import DispatchError, GroupFailedError
from ..observability.metrics import DispatchFailure, observe_dispatch
from .decorator import MethodSpec, get_method_spec
from .dispatch import PADDING_SIZE_KEY, resolve_dispatch_fns
from .modes import Dispatch, Execute

__all__ = ["BoundGroupMethod", "registered_methods", "bind_registered_methods"]


SpecReader = Callable[[Any], MethodSpec | None]


def registered_methods(user_cls: type, read_spec: SpecReader = get_method_spec) -> dict[str, MethodSpec]:
    """``{name: spec}`` of every method of ``user_cls`` decorated with ``@register`` (inherited ones too).

    Args:
        read_spec: reads a method's registration (default: ours; verl's integration reads verl's).
    """
    out: dict[str, MethodSpec] = {}
    for name in dir(user_cls):
        try:
            attr = getattr(user_cls, name)
        except Exception:  # properties and descriptors that need an instance
            continue
        if not callable(attr):
            continue
        spec = read_spec(attr)
        if spec is not None:
            out[name] = spec
    return out


def _strip_padding(output: Any, pad_size: int) -> Any:
    from .protocol_family import family_of

    family = family_of(output)
    if family is not None and isinstance(output, family.data_proto):
        return family.unpad(output, pad_size)
    if family is not None and output.dispatch_fn is None:  # a future: unpad once it is resolved
        from functools import partial

        output.dispatch_fn = partial(family.unpad, pad_size=pad_size)
        return output
    # Per-rank lists (DP_COMPUTE_METRIC) hold one entry per rank, not per row: nothing to strip.
    return output


class BoundGroupMethod:
    """A registered worker method, callable on the group.

    Attributes:
        method_name: name of the worker method.
        spec: its registration.
    """

    def __init__(self, group: Any, method_name: str, spec: MethodSpec, remote_name: str | None = None) -> None:
        self.group = group
        self.method_name = method_name
        self.spec = spec
        self.remote_name = remote_name or method_name
        self.__name__ = method_name
        self._dispatch_fn, self._collect_fn = resolve_dispatch_fns(spec.dispatch_mode)
        # RANK_ZERO dispatch means "call rank 0 with these arguments", whatever the execute mode says.
        self._rank_zero = spec.execute_mode is Execute.RANK_ZERO or spec.dispatch_mode is Dispatch.RANK_ZERO
        self._execute: Callable[..., Any] = group.execute_rank_zero if self._rank_zero else group.execute_all

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        failure: DispatchFailure | None = None
        try:
            return self._call(args, kwargs)
        except BaseException as exc:
            failure = _dispatch_failure(exc)
            raise
        finally:
            observe_dispatch(self.group.name, self.method_name, time.perf_counter() - started, failure)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            args, kwargs = self._dispatch_fn(self.group, *args, **kwargs)
        except DispatchError as exc:
            raise DispatchError(f"{self.group.name_prefix}.{self.method_name}: {exc}") from None
        pad_size = kwargs.pop(PADDING_SIZE_KEY, 0)
        supervisor = self.group.supervisor
        if supervisor is not None and self.spec.blocking:
            output = self._run_supervised(supervisor, args, kwargs)
        else:
            output = self._execute(self.remote_name, *args, **kwargs)
            if self.spec.blocking:
                import ray

                output = ray.get(output)
        output = self._collect_fn(self.group, output)
        if pad_size:
            output = _strip_padding(output, pad_size)
        return output

    def _run_supervised(self, supervisor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from ..supervision.supervised_call import resolve_in_flight_policy, run_supervised

        config = supervisor.config
        policy = resolve_in_flight_policy(self.spec, config.in_flight)
        if self._rank_zero:
            result = run_supervised(self.group, supervisor, self.remote_name, {0: (args, kwargs)}, policy, config.call_timeout_s)
            return result[0]
        per_rank = dict(enumerate(self.group.rank_arguments(args, kwargs)))
        return run_supervised(self.group, supervisor, self.remote_name, per_rank, policy, config.call_timeout_s)

    def __repr__(self) -> str:
        return f"<bound group method {self.group.name_prefix}.{self.method_name} ({self.spec.dispatch_mode})>"


def _dispatch_failure(exc: BaseException) -> DispatchFailure:
    from ..supervision.supervised_call import WorkerFailedError

    if isinstance(exc, GroupFailedError):
        return DispatchFailure.GROUP_FAILED
    if isinstance(exc, WorkerFailedError):
        return DispatchFailure.WORKER_FAILED
    try:
        import ray

        if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.GetTimeoutError):
            return DispatchFailure.WORKER_FAILED  # an unsupervised group's rank died or did not answer
    except ImportError:
        pass
    return DispatchFailure.RAISED


def bind_registered_methods(group: Any, user_cls: type, read_spec: SpecReader = get_method_spec) -> list[str]:
    """Set a :class:`BoundGroupMethod` on ``group`` for every registered method of ``user_cls``.

    Returns:
        The names that were bound.
    """
    names: list[str] = []
    for name, spec in registered_methods(user_cls, read_spec).items():
        setattr(group, name, BoundGroupMethod(group, name, spec))
        names.append(name)
    return names
