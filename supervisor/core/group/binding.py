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
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...errors import DispatchError
from ...failure import DispatchFailure, classify_error
from ...observability.metrics import observe_dispatch
from ..worker.dispatch_modes import Dispatch, Execute
from ..worker.registration import MethodSpec, get_method_spec
from .dispatch import CONCATENATING_COLLECTS, PADDING_SIZE_KEY, resolve_dispatch_fns

if TYPE_CHECKING:
    from .call_runner import CallRunner

__all__ = ["BoundGroupMethod", "registered_methods", "bind_registered_methods", "func_generator"]


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
        # A collect that concatenates the ranks' DataProtos copies them into new memory anyway: the
        # parts may arrive as read-only views of the object store, saving a copy of every result.
        self._results_as_views = self._collect_fn in CONCATENATING_COLLECTS
        # RANK_ZERO dispatch means "call rank 0 with these arguments", whatever the execute mode says.
        self._rank_zero = spec.execute_mode is Execute.RANK_ZERO or spec.dispatch_mode is Dispatch.RANK_ZERO
        self._execute: Callable[..., Any] = group.execute_rank_zero if self._rank_zero else group.execute_all
        self._blocking = spec.blocking
        if spec.blocking:
            import ray  # here, not per call: an import statement costs about a microsecond a call

            self._ray_get = ray.get
        self._read_only = spec.read_only
        self._metric_group: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            output = self._call(args, kwargs)
        except BaseException as exc:
            observe_dispatch(self.group.name, self.method_name, time.perf_counter() - started, _dispatch_failure(exc))
            raise
        observe_dispatch(self._metric_group or self._name_group(), self.method_name, time.perf_counter() - started, None)
        return output

    def _name_group(self) -> str:
        # A group's name does not change once it serves calls: looked up once, not on every call.
        self._metric_group = self.group.name
        return self._metric_group

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # The driver-side cost of every training step's calls: bench/dispatch.py measures it against
        # verl's, so what does not depend on the call is worked out once, in __init__.
        try:
            args, kwargs = self._dispatch_fn(self.group, *args, **kwargs)
        except DispatchError as exc:
            raise DispatchError(f"{self.group.name_prefix}.{self.method_name}: {exc}") from None
        pad_size = kwargs.pop(PADDING_SIZE_KEY, 0)
        if self._read_only:
            args, kwargs = _for_read_only_receivers(args, kwargs)
        if self._results_as_views:
            with _receiving_views():
                output = self._run(args, kwargs)
        else:
            output = self._run(args, kwargs)
        if pad_size:
            output = _strip_padding(output, pad_size)
        return output

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Execute, wait when blocking, collect."""
        runner = self.group.call_runner
        if runner is not None and self._blocking:
            output = self._run_supervised(runner, args, kwargs)
        else:
            output = self._execute(self.remote_name, *args, **kwargs)
            if self._blocking:
                output = self._ray_get(output)
        return self._collect_fn(self.group, output)

    def _run_supervised(self, runner: CallRunner, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # The group's supervisor runs blocking calls so that they survive rank failures (see call_runner).
        if self._rank_zero:
            return runner.run_call(self.group, self.spec, self.remote_name, {0: (args, kwargs)})[0]
        per_rank = dict(enumerate(self.group.rank_arguments(args, kwargs)))
        return runner.run_call(self.group, self.spec, self.remote_name, per_rank)

    def __repr__(self) -> str:
        return f"<bound group method {self.group.name_prefix}.{self.method_name} ({self.spec.dispatch_mode})>"


def _receiving_views() -> AbstractContextManager[None]:
    # Imported here: the protocol pulls in torch and tensordict, which a process that only binds
    # groups (the CLI reading records, a daemon before its first DataProto) must not pay for.
    from ..protocol import receiving_views

    return receiving_views()


def _for_read_only_receivers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Mark the DataProto shards for ranks that will not write them (a dispatch gives a list per
    argument, one item per rank)."""

    def mark(value: Any) -> Any:
        if isinstance(value, list):
            return [mark(v) for v in value]
        for_reader = getattr(value, "for_read_only_receiver", None)
        return for_reader() if callable(for_reader) else value

    return tuple(mark(a) for a in args), {k: mark(v) for k, v in kwargs.items()}


def _dispatch_failure(exc: BaseException) -> DispatchFailure:
    return classify_error(exc).dispatch_failure


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


def func_generator(
    self: Any,
    method_name: str,
    dispatch_fn: Callable[..., Any],
    collect_fn: Callable[..., Any],
    execute_fn: Callable[..., Any],
    blocking: bool,
) -> Callable[..., Any]:
    """verl's low-level group method: dispatch with ``dispatch_fn(self, ...)``, run
    ``execute_fn(method_name, ...)``, wait when ``blocking``, collect with ``collect_fn(self, output)`` and
    strip the padding dispatch added. :class:`BoundGroupMethod` is the same pipeline for registered
    methods (with metrics and supervision); this one takes the functions directly."""

    def call(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = dispatch_fn(self, *args, **kwargs)
        pad_size = kwargs.pop(PADDING_SIZE_KEY, 0)
        output = execute_fn(method_name, *args, **kwargs)
        if blocking:
            import ray

            output = ray.get(output)
        output = collect_fn(self, output)
        if pad_size and isinstance(output, list):
            return output[:-pad_size]
        return _strip_padding(output, pad_size) if pad_size else output

    call.__name__ = method_name
    return call
