"""Read the registrations verl's own ``register`` put on a worker class, as our :class:`MethodSpec`.

verl stores ``{dispatch_mode, execute_mode, blocking}`` under the same magic attribute as ours, but
its modes are members of verl's ``Dispatch``/``Execute`` (another class than ours). A verl mode
whose functions are still verl's predefined ones maps to our mode of the same name, so verl's
DataProto goes through our dispatch (padding a copy, one-line errors, the supervised call); so does a
mode made by verl's ``make_nd_compute_dataproto_dispatch_fn`` (verl's FSDP and engine workers). Any
other verl mode (registered with verl's ``register_dispatch_mode``, or changed with
``update_dispatch_mode``, at any time before the group binds) runs verl's registered functions.
"""

from __future__ import annotations

import functools
from typing import Any

from verl.protocol import _padding_size_key as VERL_PADDING_KEY
from verl.single_controller.base import decorator as verl_decorator

from ...core.group.dispatch import PADDING_SIZE_KEY, make_nd_compute_dataproto_dispatch_fn
from ...core.worker.dispatch_modes import Dispatch, Execute
from ...core.worker.registration import MAGIC_ATTR, MethodSpec
from ...errors import ConfigError

__all__ = ["read_verl_method_spec", "translate_dispatch_mode", "translate_execute_mode"]

# verl's predefined dispatch and collect functions live here; a mode still served by them is verl's
# stock mode of that name.
_VERL_DECORATOR_MODULE = verl_decorator.__name__


def _is_stock(fns: dict[str, Any]) -> bool:
    return all(getattr(fns.get(key), "__module__", None) == _VERL_DECORATOR_MODULE for key in ("dispatch_fn", "collect_fn"))


def _with_our_padding_key(dispatch_fn: Any) -> Any:
    # A verl dispatch function reports its padding under verl's key; the bound method strips it under ours.
    @functools.wraps(dispatch_fn)
    def dispatch(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out_args, out_kwargs = dispatch_fn(worker_group, *args, **kwargs)
        if VERL_PADDING_KEY in out_kwargs:
            out_kwargs = dict(out_kwargs)
            out_kwargs[PADDING_SIZE_KEY] = out_kwargs.pop(VERL_PADDING_KEY)
        return out_args, out_kwargs

    return dispatch


def _custom(fns: dict[str, Any]) -> dict[str, Any]:
    mesh = _verl_mesh(fns)
    if mesh is not None:  # verl's mesh dispatch is ours too: it asks the group for each rank's dp rank
        return make_nd_compute_dataproto_dispatch_fn(mesh)
    return {"dispatch_fn": _with_our_padding_key(fns["dispatch_fn"]), "collect_fn": fns["collect_fn"]}


def _verl_mesh(fns: dict[str, Any]) -> str | None:
    """The mesh of a mode made by verl's ``make_nd_compute_dataproto_dispatch_fn`` (partials of verl's
    lazy mesh functions, which work only on verl's own WorkerGroup); None for any other functions."""
    dispatch, collect = fns.get("dispatch_fn"), fns.get("collect_fn")
    if not (isinstance(dispatch, functools.partial) and isinstance(collect, functools.partial)):
        return None
    stock = (dispatch.func is verl_decorator.dispatch_lazy_compute_data_proto, collect.func is verl_decorator.collect_lazy_compute_data_proto)
    if not all(stock) or len(dispatch.args) != 1 or dispatch.args != collect.args or dispatch.keywords or collect.keywords:
        return None
    return str(dispatch.args[0])


def translate_dispatch_mode(mode: Any, where: str) -> Any:
    """Our Dispatch member, or a ``{dispatch_fn, collect_fn}`` dict, for a verl (or our) dispatch mode.

    Raises:
        ConfigError: a verl mode with no functions registered in verl.
    """
    if isinstance(mode, Dispatch):
        return mode
    if isinstance(mode, dict):
        return _custom(mode) if "dispatch_fn" in mode and "collect_fn" in mode else mode
    if isinstance(mode, verl_decorator.Dispatch):
        fns = verl_decorator.DISPATCH_MODE_FN_REGISTRY.get(mode)
        if fns is None:
            raise ConfigError(f"{where}: verl dispatch mode {mode.name} has no functions (verl's register_dispatch_mode)")
        if _is_stock(fns) and mode.name in Dispatch._registry:
            return Dispatch.get(mode.name)
        return _custom(fns)
    return mode  # our register's own checks name what is wrong


def translate_execute_mode(mode: Any, where: str) -> Execute:
    """Our Execute member for a verl (or our) execute mode.

    Raises:
        ConfigError: an execute mode verl's groups cannot run either.
    """
    if isinstance(mode, Execute):
        return mode
    name = getattr(mode, "name", None)
    if isinstance(mode, verl_decorator.Execute) and name in Execute._registry:
        return Execute.get(name)  # type: ignore[return-value]
    raise ConfigError(f"{where}: execute mode {mode!r} is not one of {sorted(Execute._registry)}")


def read_verl_method_spec(method: Any) -> MethodSpec | None:
    """The registration of ``method`` made by verl's ``register`` (or ours), None when it has none."""
    attrs = getattr(method, MAGIC_ATTR, None)
    if not isinstance(attrs, dict) or "dispatch_mode" not in attrs:
        return None
    where = getattr(method, "__qualname__", repr(method))
    return MethodSpec(
        dispatch_mode=translate_dispatch_mode(attrs["dispatch_mode"], where),
        execute_mode=translate_execute_mode(attrs.get("execute_mode", Execute.ALL), where),
        blocking=attrs.get("blocking", True),
        idempotent=attrs.get("idempotent", False),
        on_rank_failure=attrs.get("on_rank_failure"),
    )
