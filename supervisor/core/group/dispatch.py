"""Dispatch and collect functions, and the registry that maps a :class:`Dispatch` mode to them.

A dispatch function turns the arguments of one group call into per-rank arguments:
``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` where every returned arg is a list
with one entry per rank (or a plain value that is broadcast). A collect function turns the per-rank
outputs back into the caller's result: ``collect_fn(worker_group, outputs) -> result``. These signatures
are verl's, so custom modes written for verl plug in unchanged.

Everything here runs in the driver; nothing here touches Ray except ``ray.put`` in mesh dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ...errors import DispatchError
from ..worker.dispatch_modes import Dispatch, Execute
from ..worker.registration import check_dispatch_mode

__all__ = [
    "DISPATCH_MODE_FN_REGISTRY",
    "PADDING_SIZE_KEY",
    "CONCATENATING_COLLECTS",
    "get_predefined_dispatch_fn",
    "get_predefined_execute_fn",
    "register_dispatch_mode",
    "update_dispatch_mode",
    "resolve_dispatch_fns",
    "make_nd_compute_dataproto_dispatch_fn",
    "dispatch_lazy_compute_data_proto",
    "collect_lazy_compute_data_proto",
    "mesh_of",
    "dispatch_one_to_all",
    "dispatch_all_to_all",
    "collect_all_to_all",
    "dispatch_rank_zero",
    "collect_rank_zero",
    "dispatch_dp_compute",
    "collect_dp_compute",
    "dispatch_dp_compute_data_proto",
    "dispatch_dp_compute_data_proto_with_func",
    "collect_dp_compute_data_proto",
    "dispatch_nd_compute",
    "collect_nd_compute",
    "dispatch_nd_compute_dataproto",
    "collect_nd_compute_dataproto",
]

# A dispatch function that padded its DataProto arguments reports the padding under this kwarg; the
# bound method pops it before calling the workers and strips the padding from the collected result.
# verl's value (its verl.protocol._padding_size_key), so dispatch functions written for verl interoperate.
PADDING_SIZE_KEY = "_padding_size_key_x123d"

DispatchFn = Callable[..., tuple[Any, Any]]
CollectFn = Callable[[Any, Any], Any]


def _world_size(worker_group: Any) -> int:
    return int(worker_group.world_size)


def dispatch_one_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[list[Any], ...], dict[str, list[Any]]]:
    """Give every rank the same arguments."""
    if not args and not kwargs:  # a call without arguments, the commonest of all: nothing to repeat
        return args, kwargs
    n = _world_size(worker_group)
    return tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Pass the arguments through: lists of world_size entries are split by rank, others broadcast."""
    return args, kwargs


def collect_all_to_all(worker_group: Any, output: Any) -> Any:
    """Return the per-rank outputs as they are."""
    return output


def dispatch_rank_zero(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Pass the arguments to rank 0 unchanged (the bound method executes on rank 0 only)."""
    return args, kwargs


def collect_rank_zero(worker_group: Any, output: Any) -> Any:
    """Return rank 0's output."""
    return output


def direct_rollout_call(worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    raise DispatchError(
        "DIRECT_ROLLOUT_METHOD methods are called by the rollout engine inside the worker, not through the group"
    )


def _check_rank_lists(mode: str, worker_group: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    n = _world_size(worker_group)
    for where, value in [(f"argument {i}", a) for i, a in enumerate(args)] + [
        (f"keyword {k!r}", v) for k, v in kwargs.items()
    ]:
        if not isinstance(value, list | tuple) or len(value) != n:
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, list | tuple) else type(value).__name__
            raise DispatchError(f"{mode} needs every argument to be a list with one entry per rank ({n}); {where} is a {got}")


def dispatch_dp_compute(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Each argument is already a list with one entry per rank."""
    _check_rank_lists("DP_COMPUTE", worker_group, args, kwargs)
    return args, kwargs


def collect_dp_compute(worker_group: Any, output: Any) -> list[Any]:
    """Return the list of per-rank outputs."""
    if len(output) != _world_size(worker_group):
        raise DispatchError(f"expected {_world_size(worker_group)} outputs, got {len(output)}")
    return list(output)


def _split_data_proto_args(
    mode: str,
    chunks: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    auto_padding: bool,
    tensordicts: bool = False,
) -> tuple[tuple[list[Any], ...], dict[str, Any]]:
    from .protocol_family import family_of

    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"keyword {k!r}", v) for k, v in kwargs.items()]
    padded_len: int | None = None
    pad_size: int | None = None
    split: list[list[Any]] = []
    for where, value in named:
        if tensordicts and _is_tensordict(value):
            split.append(_chunk_tensordict(mode, where, value, chunks))
            continue
        family = family_of(value)
        if family is None:
            raise DispatchError(f"{mode} splits DataProto arguments; {where} is a {type(value).__name__}")
        if isinstance(value, family.future):
            split.append(value.chunk(chunks))
            continue
        if auto_padding and value.is_padding_enabled():
            if padded_len is None:
                padded_len = len(value)
            elif len(value) != padded_len:
                raise DispatchError(
                    f"{mode} pads DataProto arguments together, so they must have one length; "
                    f"{where} has {len(value)} rows, an earlier one {padded_len}"
                )
            # pad a copy: the caller's DataProto must not grow behind its back
            value, pad_size = family.pad_to_divisor(value, chunks)
        elif len(value) % chunks != 0:
            raise DispatchError(
                f"{mode} cannot split {where} of {len(value)} rows evenly across {chunks} ranks; enable padding "
                f"(DataProto.from_dict(..., auto_padding=True) or DataProtoConfig.auto_padding = True)"
            )
        split.append(value.chunk(chunks))
    out_args = tuple(split[: len(args)])
    out_kwargs: dict[str, Any] = dict(zip(kwargs.keys(), split[len(args) :], strict=True))
    if pad_size:
        out_kwargs[PADDING_SIZE_KEY] = pad_size
    return out_args, out_kwargs


def _is_tensordict(value: Any) -> bool:
    from tensordict import TensorDictBase

    return isinstance(value, TensorDictBase)


def _chunk_tensordict(mode: str, where: str, value: Any, chunks: int) -> list[Any]:
    from ..protocol.tensordict_batches import chunk_tensordict

    if len(value) % chunks != 0:
        raise DispatchError(f"{mode} cannot split {where} of {len(value)} rows evenly across {chunks} dp ranks")
    # Copies: a row slice is a view, and a view pickles its whole storage (each dp rank's object would
    # carry the entire batch into the object store).
    return [part.clone() for part in chunk_tensordict(value, chunks)]


def dispatch_dp_compute_data_proto(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Split every DataProto (or DataProtoFuture) argument into world_size chunks, padding when enabled."""
    return _split_data_proto_args("DP_COMPUTE_PROTO", _world_size(worker_group), args, kwargs, auto_padding=True)


def dispatch_dp_compute_data_proto_with_func(
    worker_group: Any, *args: Any, **kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Broadcast the first argument (a function) and split the DataProto arguments after it."""
    if not args or not callable(args[0]):
        raise DispatchError("DP_COMPUTE_PROTO_WITH_FUNC needs a function as its first argument")
    n = _world_size(worker_group)
    rest, split_kwargs = _split_data_proto_args("DP_COMPUTE_PROTO_WITH_FUNC", n, args[1:], kwargs, auto_padding=False)
    return ([args[0]] * n, *rest), split_kwargs


def collect_dp_compute_data_proto(worker_group: Any, output: Any) -> Any:
    """Concatenate per-rank DataProtos; per-rank ObjectRefs (non-blocking calls) become a DataProtoFuture."""
    output = collect_dp_compute(worker_group, output)
    return _concat_data_protos(worker_group, output)


# Collects whose result is a concatenation of the ranks' DataProtos, so new memory: the parts they
# receive need not be writable copies of the object store's (see BoundGroupMethod).
CONCATENATING_COLLECTS = frozenset({collect_dp_compute_data_proto})


def _concat_data_protos(worker_group: Any, output: list[Any]) -> Any:
    import ray

    from .protocol_family import family_of, group_family

    if output and all(isinstance(o, ray.ObjectRef) for o in output):
        return group_family(worker_group).future.concat(output)
    family = family_of(output[0]) if output else None
    if family is not None and all(isinstance(o, family.data_proto) for o in output):
        return family.data_proto.concat(output)
    kinds = sorted({type(o).__name__ for o in output})
    raise DispatchError(f"DataProto-collecting mode expects every rank to return a DataProto, got {kinds}")


def dispatch_nd_compute(
    dp_rank_mapping: list[int], dp_size: int, worker_group: Any, *args: Any, **kwargs: Any
) -> tuple[tuple[list[Any], ...], dict[str, list[Any]]]:
    """Route the dp_size entries of each argument to ranks by their data-parallel rank.

    Each entry is put into the object store once and shared by all ranks of the same dp rank.
    """
    import ray

    n = _world_size(worker_group)
    if len(dp_rank_mapping) != n:
        raise DispatchError(f"mesh dispatch has {len(dp_rank_mapping)} dp ranks for {n} workers")

    def route(where: str, value: Any) -> list[Any]:
        if not isinstance(value, list | tuple) or len(value) != dp_size:
            raise DispatchError(f"mesh dispatch needs {where} to have {dp_size} entries (one per dp rank)")
        refs = [v if isinstance(v, ray.ObjectRef) else ray.put(v) for v in value]
        return [refs[dp_rank_mapping[r]] for r in range(n)]

    out_args = tuple(route(f"argument {i}", a) for i, a in enumerate(args))
    out_kwargs = {k: route(f"keyword {k!r}", v) for k, v in kwargs.items()}
    return out_args, out_kwargs


def collect_nd_compute(collect_mask: list[bool], worker_group: Any, output: Any) -> list[Any]:
    """Keep the outputs of ranks whose collect flag is set, in rank order."""
    if len(output) != _world_size(worker_group):
        raise DispatchError(f"expected {_world_size(worker_group)} outputs, got {len(output)}")
    return [o for o, keep in zip(output, collect_mask, strict=True) if keep]


def dispatch_nd_compute_dataproto(
    dp_rank_mapping: list[int], dp_size: int, worker_group: Any, *args: Any, **kwargs: Any
) -> tuple[tuple[list[Any], ...], dict[str, list[Any]]]:
    split_args, split_kwargs = _split_data_proto_args(
        "mesh dispatch", dp_size, args, kwargs, auto_padding=False, tensordicts=True
    )
    return dispatch_nd_compute(dp_rank_mapping, dp_size, worker_group, *split_args, **split_kwargs)


def collect_nd_compute_dataproto(collect_mask: list[bool], worker_group: Any, output: Any) -> Any:
    kept = collect_nd_compute(collect_mask, worker_group, output)
    if kept and all(_is_tensordict(o) for o in kept):
        from ..protocol.tensordict_batches import concat_tensordict

        return concat_tensordict(list(kept))
    return _concat_data_protos(worker_group, kept)


def _mesh_dispatch(mesh_name: str, worker_group: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    mapping = worker_group.dispatch_info(mesh_name)
    return dispatch_nd_compute_dataproto(mapping, max(mapping) + 1, worker_group, *args, **kwargs)


def _mesh_collect(mesh_name: str, worker_group: Any, output: Any) -> Any:
    return collect_nd_compute_dataproto(worker_group.collect_info(mesh_name), worker_group, output)


def dispatch_lazy_compute_data_proto(mesh_name: str, worker_group: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Mesh dispatch for ``mesh_name``: the ranks' dp ranks are asked once and cached on the group."""
    return _mesh_dispatch(mesh_name, worker_group, *args, **kwargs)


def collect_lazy_compute_data_proto(mesh_name: str, worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    """Mesh collect for ``mesh_name``: the outputs of the ranks that registered ``is_collect``."""
    return _mesh_collect(mesh_name, worker_group, *args, **kwargs)


def mesh_of(mode: Any) -> Any:
    """The mesh a :func:`make_nd_compute_dataproto_dispatch_fn` mode dispatches on; None for any other mode."""
    fn = mode.get("dispatch_fn") if isinstance(mode, dict) else None
    return fn.args[0] if isinstance(fn, partial) and fn.func is _mesh_dispatch and fn.args else None


def make_nd_compute_dataproto_dispatch_fn(mesh_name: Any) -> dict[str, Callable[..., Any]]:
    """A dispatch mode for workers that registered their dp rank on ``mesh_name``.

    Workers call ``self._register_dispatch_collect_info(mesh_name, dp_rank, is_collect)``; the group asks
    them once and caches the mapping. Data is split into dp_size chunks; ranks sharing a dp rank receive
    the same chunk; only ranks with ``is_collect`` contribute to the result.
    """
    return {"dispatch_fn": partial(_mesh_dispatch, mesh_name), "collect_fn": partial(_mesh_collect, mesh_name)}


DISPATCH_MODE_FN_REGISTRY: dict[Dispatch, dict[str, Callable[..., Any]]] = {
    Dispatch.RANK_ZERO: {"dispatch_fn": dispatch_rank_zero, "collect_fn": collect_rank_zero},
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": dispatch_all_to_all, "collect_fn": collect_all_to_all},
    Dispatch.DP_COMPUTE: {"dispatch_fn": dispatch_dp_compute, "collect_fn": collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {"dispatch_fn": dispatch_dp_compute_data_proto, "collect_fn": collect_dp_compute_data_proto},
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": dispatch_dp_compute_data_proto_with_func,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {"dispatch_fn": dispatch_dp_compute_data_proto, "collect_fn": collect_dp_compute},
    Dispatch.DIRECT_ROLLOUT_METHOD: {"dispatch_fn": direct_rollout_call, "collect_fn": direct_rollout_call},
}

_EXECUTE_FN_NAMES: dict[Execute, str] = {Execute.ALL: "execute_all", Execute.RANK_ZERO: "execute_rank_zero"}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch) -> dict[str, Callable[..., Any]]:
    """Return ``{"dispatch_fn", "collect_fn"}`` of a registered mode; KeyError naming it otherwise."""
    try:
        return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]
    except KeyError:
        raise KeyError(f"dispatch mode {dispatch_mode} has no functions; use register_dispatch_mode") from None


def get_predefined_execute_fn(execute_mode: Execute) -> dict[str, str]:
    """Return ``{"execute_fn_name": ...}``: the group method that runs calls in this execute mode."""
    return {"execute_fn_name": _EXECUTE_FN_NAMES[execute_mode]}


def register_dispatch_mode(dispatch_mode_name: str, dispatch_fn: DispatchFn, collect_fn: CollectFn) -> Dispatch:
    """Add a new :class:`Dispatch` member with its functions and return it.

    Raises:
        ValueError: a mode of that name already has functions (use :func:`update_dispatch_mode`).
    """
    if dispatch_mode_name in Dispatch._registry and Dispatch.get(dispatch_mode_name) in DISPATCH_MODE_FN_REGISTRY:
        raise ValueError(f"dispatch mode {dispatch_mode_name!r} already exists; use update_dispatch_mode to change it")
    mode = Dispatch.register(dispatch_mode_name)
    entry = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    check_dispatch_mode(entry)
    DISPATCH_MODE_FN_REGISTRY[mode] = entry  # type: ignore[index]
    return mode  # type: ignore[return-value]


def update_dispatch_mode(dispatch_mode: Dispatch, dispatch_fn: DispatchFn, collect_fn: CollectFn) -> None:
    """Replace the functions of an existing mode (applies to groups bound after the call).

    Raises:
        ValueError: the mode has no functions yet.
    """
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise ValueError(f"dispatch mode {dispatch_mode} is not registered; use register_dispatch_mode")
    entry = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    check_dispatch_mode(entry)
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = entry


def resolve_dispatch_fns(dispatch_mode: Any) -> tuple[DispatchFn, CollectFn]:
    """Return (dispatch_fn, collect_fn) for a Dispatch member or a custom ``{dispatch_fn, collect_fn}`` dict."""
    check_dispatch_mode(dispatch_mode)
    fns = dispatch_mode if isinstance(dispatch_mode, dict) else get_predefined_dispatch_fn(dispatch_mode)
    return fns["dispatch_fn"], fns["collect_fn"]
