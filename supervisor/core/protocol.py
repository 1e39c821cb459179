"""The batch container exchanged between the driver and worker groups.

Data model
----------
A :class:`DataProto` holds one batch of samples in three parts:

* ``batch``: a :class:`tensordict.TensorDict` of tensors that share leading batch
  dimension(s), or ``None`` when the batch carries no tensors;
* ``non_tensor_batch``: ``dict[str, np.ndarray]`` of per-sample Python data
  (strings, dicts, ragged lists, usually ``dtype=object``). Every array is as long
  as the batch;
* ``meta_info``: a plain ``dict`` of batch-level values. Row operations never slice
  it; the pieces they produce share it.

Row operations (indexing, ``chunk``, ``split``, ``repeat``, ``concat``, ...) act on
``batch`` and ``non_tensor_batch`` together, so row ``i`` of every column always
describes the same sample. The single controller chunks a DataProto across the ranks
of a worker group and concatenates what the ranks return. :class:`DataProtoFuture`
defers that concatenation while the results are still in the Ray object store.

The API follows ``verl.protocol``, so verl code ports by changing the import prefix.
Misuse raises :class:`DataProtoError`: a ``SupervisorError`` and a ``ValueError``,
and also an ``AssertionError`` because verl reported the same conditions with ``assert``.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
import os
import pickle
import reprlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import ray
import tensordict
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase
from torch.utils.data import DataLoader

from ..errors import SupervisorError

__all__ = [
    "BatchData",
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoFuture",
    "DataProtoItem",
    "all_gather_data_proto",
    "receiving_views",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "unpad_dataproto",
]

logger = logging.getLogger(__name__)

# Older tensordict releases default to lazy stacking, where torch.stack returns a
# LazyStackedTensorDict view. Row operations here assume dense results. Newer
# releases may drop the switch entirely, hence the suppress.
with contextlib.suppress(Exception):
    tensordict.set_lazy_legacy(False).set()

_short_repr = reprlib.Repr()
_short_repr.maxstring = 60
_short_repr.maxother = 60


class DataProtoError(SupervisorError, ValueError, AssertionError):
    """Misuse of a DataProto: inconsistent lengths, unknown keys, conflicting values.

    Besides the library's :class:`SupervisorError` and ``ValueError`` it derives from
    ``AssertionError``, because verl raised that for the same conditions and ported
    code may catch it.
    """


# --------------------------------------------------------------------------- config


class _DataProtoConfigMeta(type):
    # A metaclass, so that `DataProtoConfig.auto_padding` is a property of the class
    # itself and verl's `DataProtoConfig.auto_padding = True` keeps working.
    _config: dict[str, bool] = {}

    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        if os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1"):
            return True
        return cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"auto_padding must be a bool, got {type(enabled).__name__}")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide DataProto settings.

    ``DataProtoConfig.auto_padding`` (bool, default ``False``; also switched on by the
    env var ``VERL_AUTO_PADDING`` set to ``TRUE`` or ``1``) lets every DataProto chunk
    into uneven pieces. A single DataProto opts in through
    ``meta_info[DataProtoConfig.auto_padding_key] = True``.
    """


# ------------------------------------------------------------------ private helpers


def _tensors_equal(a: Any, b: Any) -> bool:
    """Equality of two TensorDict leaves, treating NaN as equal to NaN."""
    if isinstance(a, TensorDictBase) or isinstance(b, TensorDictBase):
        if not (isinstance(a, TensorDictBase) and isinstance(b, TensorDictBase)):
            return False
        if set(a.keys()) != set(b.keys()) or a.batch_size != b.batch_size:
            return False
        return all(_tensors_equal(a.get(key), b.get(key)) for key in a.keys())
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return _values_equal(a, b)
    if a.is_nested or b.is_nested:
        if not (a.is_nested and b.is_nested):
            return False
        parts_a, parts_b = a.unbind(), b.unbind()
        return len(parts_a) == len(parts_b) and all(
            _tensors_equal(x, y) for x, y in zip(parts_a, parts_b, strict=True)
        )
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.device != b.device:
        b = b.to(a.device)
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return False


def _values_equal(a: Any, b: Any, _active: set[tuple[int, int]] | None = None) -> bool:
    """Deep equality for meta_info values and numpy object arrays.

    NaN equals NaN, arrays and tensors compare element-wise to a single bool, and a
    pair already being compared further up the stack (a cycle) counts as equal.
    """
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _tensors_equal(a, b)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)

    active = set() if _active is None else _active
    pair = (id(a), id(b))
    if pair in active:
        return True
    active.add(pair)
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                return False
            if a.shape != b.shape:
                return False
            if a.dtype != object and b.dtype != object:
                floating = a.dtype.kind in "fc" and b.dtype.kind in "fc"
                return bool(np.array_equal(a, b, equal_nan=floating))
            return all(_values_equal(x, y, active) for x, y in zip(a.flat, b.flat, strict=True))
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return (
                type(a) is type(b)
                and len(a) == len(b)
                and all(_values_equal(x, y, active) for x, y in zip(a, b, strict=True))
            )
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(_values_equal(a[k], b[k], active) for k in a)
        result = a == b
        try:
            return bool(result)
        except (TypeError, ValueError):
            # Objects whose == returns an array-like without a truth value.
            return bool(np.all(result))
    finally:
        active.discard(pair)


def _check_known_keys(kind: str, requested: Iterable[Any], available: Iterable[Any]) -> None:
    available = list(available)
    missing = [key for key in requested if key not in available]
    if missing:
        raise DataProtoError(f"unknown {kind} key(s) {missing}; available: {available}")


def _as_key_list(keys: str | Sequence[str] | None, argument: str) -> list[str] | None:
    # verl passed `tuple(keys)`, which splits a lone string into characters; a lone
    # string here means one key.
    if keys is None:
        return None
    if isinstance(keys, str):
        return [keys]
    try:
        return list(keys)
    except TypeError:
        raise TypeError(f"{argument} must be a str or a list of str, got {type(keys).__name__}") from None


def _normalize_index(idxs: Any, length: int) -> tuple[torch.Tensor, np.ndarray, int]:
    """Turn integer indices or a boolean mask into (torch index, numpy index, row count)."""
    if isinstance(idxs, torch.Tensor):
        idx_np = idxs.detach().cpu().numpy()
    elif isinstance(idxs, np.ndarray):
        idx_np = idxs
    elif isinstance(idxs, (list, tuple, range)):
        idx_np = np.asarray(list(idxs))
        if idx_np.size == 0:
            # np.asarray([]) is float64; an empty selection is still a valid index.
            idx_np = idx_np.astype(np.int64)
    else:
        raise TypeError(f"indices must be a list, np.ndarray or torch.Tensor, got {type(idxs).__name__}")

    if idx_np.dtype == np.bool_:
        if idx_np.shape != (length,):
            raise DataProtoError(
                f"boolean mask has shape {tuple(idx_np.shape)} but the DataProto has length {length}"
            )
        count = int(idx_np.sum())
    elif np.issubdtype(idx_np.dtype, np.integer):
        if idx_np.ndim != 1:
            raise DataProtoError(f"integer indices must be 1-D, got shape {tuple(idx_np.shape)}")
        idx_np = idx_np.astype(np.int64, copy=False)
        count = int(idx_np.shape[0])
    else:
        raise TypeError(f"indices must be integers or booleans, got dtype {idx_np.dtype}")
    return torch.from_numpy(np.ascontiguousarray(idx_np)), idx_np, count


def _column_from_items(items: list[Any]) -> np.ndarray:
    """Rebuild one non-tensor column from its per-row values.

    Rows taken from a typed or multi-dimensional array are stacked back to that dtype
    and shape. Anything else becomes a 1-D object array, filled element by element so
    that equal-length lists are not turned into a 2-D array.
    """
    if items and all(isinstance(item, np.ndarray) for item in items):
        first = items[0]
        if all(item.shape == first.shape and item.dtype == first.dtype for item in items):
            return np.stack(items)
    # Compare scalar types, not dtypes: np.str_ values of different lengths have
    # different dtypes ('<U1', '<U2') yet come from one string column.
    if items and all(isinstance(item, np.generic) for item in items):
        if len({type(item) for item in items}) == 1:
            return np.array(items)
    column = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        column[i] = item
    return column


def _chunk_bounds(length: int, chunks: int) -> list[tuple[int, int]]:
    # torch.chunk sizing: ceil(length / chunks) rows per piece, the last one shorter.
    # torch.chunk drops pieces that would be empty; they are kept here so that a
    # caller always gets exactly `chunks` pieces, one per rank.
    step = -(-length // chunks)
    bounds = []
    for i in range(chunks):
        start = min(i * step, length)
        bounds.append((start, min(start + step, length)))
    return bounds


def _loadable_device(device: str) -> torch.device:
    """The recorded device when it exists in this process, otherwise CPU."""
    target = torch.device(device)
    if target.type == "cpu":
        return target
    backend = getattr(torch, target.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and is_available():
        return target
    return torch.device("cpu")


def _portable_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A detached CPU tensor that owns exactly its own elements."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        return tensor.cpu()
    if tensor.is_nested:
        return tensor
    # A view pickles its whole storage: a chunk of a large batch would otherwise
    # ship the full batch to every rank.
    own_bytes = tensor.numel() * tensor.element_size()
    if not tensor.is_contiguous() or tensor.untyped_storage().nbytes() != own_bytes:
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor


def _numpy_view(tensor: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU tensor, when numpy has its dtype (not bfloat16, not nested)."""
    if tensor.device.type != "cpu" or tensor.is_nested or tensor.dtype not in _NUMPY_DTYPES:
        return None
    try:
        return tensor.detach().numpy()
    except RuntimeError:  # conjugate or negative views numpy cannot express: pickled as a tensor
        return None


# dtypes that round-trip through numpy unchanged.
_NUMPY_DTYPES = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
     torch.float64, torch.complex64, torch.complex128}
)  # fmt: skip


def _encode_tensordict(td: TensorDictBase) -> dict[str, Any]:
    entries: dict[str, tuple] = {}
    for key, value in td.items():
        if isinstance(value, torch.Tensor) and (array := _numpy_view(value)) is not None:
            # As a numpy view: pickle protocol 5 (Ray's) ships exactly the view's bytes out of band,
            # written once into the object store, where a torch tensor pickles in band (a clone of a
            # chunk, then copies through the pickle stream). The reader gets its own writable copy.
            entries[key] = ("numpy", array, value.requires_grad)
        elif isinstance(value, torch.Tensor):
            entries[key] = (
                "tensor",
                _portable_tensor(value),
                str(value.device),
                value.requires_grad,
            )
        elif isinstance(value, TensorDictBase) and not tensordict.is_non_tensor(value):
            entries[key] = ("tensordict", _encode_tensordict(value))
        else:
            entries[key] = ("object", value)
    return {
        "batch_size": tuple(td.batch_size),
        "device": None if td.device is None else str(td.device),
        "entries": entries,
    }


# Set while a receiver that promised not to write takes in DataProtos (see receiving_views): their
# tensors stay views of the object store's read-only shared memory, instead of writable copies.
_RECEIVE_VIEWS: contextvars.ContextVar[bool] = contextvars.ContextVar("receive_views", default=False)


@contextlib.contextmanager
def receiving_views() -> Iterator[None]:
    """DataProtos unpickled inside keep their tensors as views of Ray's read-only shared memory (no
    copy). For receivers that only read them, or copy them right away (a concatenation)."""
    token = _RECEIVE_VIEWS.set(True)
    try:
        yield
    finally:
        _RECEIVE_VIEWS.reset(token)


def _as_tensor(array: np.ndarray, views: bool) -> torch.Tensor:
    if array.flags.writeable:
        return torch.from_numpy(array)
    if not views:
        return torch.from_numpy(array.copy())  # read-only shared memory: the receiver gets its own copy
    with warnings.catch_warnings():  # torch warns once that writing to it is undefined: the receiver promised not to
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _decode_tensordict(state: dict[str, Any], views: bool = False) -> TensorDict:
    entries: dict[str, Any] = {}
    for key, (kind, *payload) in state["entries"].items():
        if kind == "numpy":
            array, requires_grad = payload
            tensor = _as_tensor(array, views)
            if requires_grad:
                tensor.requires_grad_(True)
            entries[key] = tensor
        elif kind == "tensor":
            tensor, device, requires_grad = payload
            tensor = tensor.to(_loadable_device(device))
            if requires_grad:
                tensor.requires_grad_(True)
            entries[key] = tensor
        elif kind == "tensordict":
            entries[key] = _decode_tensordict(payload[0], views)
        else:
            entries[key] = payload[0]
    device = state["device"]
    return TensorDict(
        entries,
        batch_size=state["batch_size"],
        device=None if device is None else _loadable_device(device),
    )


def _dict_of_lists(dicts: list[Any]) -> dict[str, list[Any]]:
    """Gather per-worker metric dicts into ``{name: [value per dict that has it]}``."""
    gathered: dict[str, list[Any]] = {}
    for entry in dicts:
        if not isinstance(entry, dict):
            raise DataProtoError(
                f"meta_info['metrics'] must be a dict or a list of dicts, got an entry of type "
                f"{type(entry).__name__}"
            )
        for name, value in entry.items():
            gathered.setdefault(name, []).append(value)
    return gathered


def _merge_meta_info(metas: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    metrics: list[Any] = []
    for meta in metas:
        for key, value in meta.items():
            if key == "metrics":
                if value is not None:
                    metrics.extend(value if isinstance(value, list) else [value])
            elif key not in merged:
                merged[key] = value
            elif not _values_equal(merged[key], value):
                # The leading text is verl's: verl's tests/test_protocol_on_cpu.py:353 matches it.
                raise DataProtoError(
                    f"Conflicting values for meta_info key '{key}': "
                    f"{_short_repr.repr(merged[key])} vs {_short_repr.repr(value)}"
                )
    if metrics:
        merged["metrics"] = _dict_of_lists(metrics)
    return merged


def _find_meta_conflict(meta1: dict[str, Any], meta2: dict[str, Any]) -> str | None:
    for key, value in meta2.items():
        if key in meta1 and not _values_equal(meta1[key], value):
            return key
    return None


def _find_numpy_conflict(dict1: dict[str, np.ndarray], dict2: dict[str, np.ndarray]) -> str | None:
    for key, value in dict2.items():
        if key in dict1:
            for side in (dict1[key], value):
                if not isinstance(side, np.ndarray):
                    raise DataProtoError(
                        f"non-tensor value for key '{key}' must be a numpy array, got {type(side).__name__}"
                    )
            if not _values_equal(dict1[key], value):
                return key
    return None


def _find_tensor_conflict(td1: TensorDictBase, td2: TensorDictBase) -> str | None:
    if td1.batch_size != td2.batch_size:
        raise DataProtoError(
            f"cannot union TensorDicts with batch sizes {list(td1.batch_size)} and {list(td2.batch_size)}"
        )
    keys1 = set(td1.keys())
    for key in td2.keys():
        if key in keys1 and not _tensors_equal(td1.get(key), td2.get(key)):
            return key
    return None


def _concat_rows(parts: Sequence[DataProto]) -> tuple[TensorDict | None, dict[str, np.ndarray]]:
    """Concatenate the rows of several DataProtos; meta_info is left to the caller."""
    has_batch = [part.batch is not None for part in parts]
    if any(has_batch) and not all(has_batch):
        without = [i for i, present in enumerate(has_batch) if not present]
        raise DataProtoError(f"cannot concat: parts {without} have batch=None while others have tensors")
    if all(has_batch):
        keys = set(parts[0].batch.keys())
        for i, part in enumerate(parts[1:], start=1):
            if set(part.batch.keys()) != keys:
                raise DataProtoError(
                    f"cannot concat: part {i} has batch keys {sorted(part.batch.keys())}, "
                    f"part 0 has {sorted(keys)}"
                )
        batch = torch.cat([part.batch for part in parts], dim=0)
    else:
        batch = None

    keys = list(parts[0].non_tensor_batch)
    for i, part in enumerate(parts[1:], start=1):
        if set(part.non_tensor_batch) != set(keys):
            raise DataProtoError(
                f"cannot concat: part {i} has non_tensor_batch keys {sorted(part.non_tensor_batch)}, "
                f"part 0 has {sorted(keys)}"
            )
    non_tensor = {key: np.concatenate([part.non_tensor_batch[key] for part in parts], axis=0) for key in keys}
    return batch, non_tensor


def _describe_type(value: Any) -> str:
    """A short nested type description such as ``list[int|str]`` or ``dict[str: float]``."""
    if isinstance(value, list):
        inner = sorted({_describe_type(item) for item in value[:3]})
        return f"list[{'|'.join(inner) if inner else '...'}]"
    if isinstance(value, tuple):
        return f"tuple({', '.join(_describe_type(item) for item in value)})"
    if isinstance(value, dict):
        if not value:
            return "dict"
        key, item = next(iter(value.items()))
        return f"dict[{_describe_type(key)}: {_describe_type(item)}]"
    if isinstance(value, np.ndarray):
        return f"ndarray{value.shape} ({value.dtype})"
    return type(value).__name__


# ------------------------------------------------------------------ public helpers


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the entries of ``tensor_dict2`` to ``tensor_dict1`` in place.

    Args:
        tensor_dict1: receives the new keys.
        tensor_dict2: keys already in ``tensor_dict1`` must hold equal values.

    Returns:
        ``tensor_dict1``.

    Raises:
        DataProtoError: the batch sizes differ, or a shared key holds different values
            (checked before anything is added).
    """
    conflict = _find_tensor_conflict(tensor_dict1, tensor_dict2)
    if conflict is not None:
        raise DataProtoError(f"cannot union: batch key '{conflict}' holds different values on the two sides")
    existing = set(tensor_dict1.keys())
    for key in tensor_dict2.keys():
        if key not in existing:
            tensor_dict1[key] = tensor_dict2.get(key)
    return tensor_dict1


def union_numpy_dict(
    tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` in place.

    Shared keys must hold equal arrays (deep comparison; NaN equals NaN).

    Returns:
        ``tensor_dict1``.

    Raises:
        DataProtoError: a shared key holds different arrays or a non-array
            (checked before anything is added).
    """
    conflict = _find_numpy_conflict(tensor_dict1, tensor_dict2)
    if conflict is not None:
        # verl's exact text: verl's tests/test_protocol_on_cpu.py:84 matches it (pytest.raises(AssertionError, match=...))
        raise DataProtoError(f"`{conflict}` in tensor_dict1 and tensor_dict2 are not the same object.")
    tensor_dict1.update(tensor_dict2)
    return tensor_dict1


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack single-row :class:`DataProtoItem` objects into a DataProto.

    Non-tensor values are rebuilt into columns that keep the dtype of the array they
    came from where that can be seen (numpy scalars, equal-shape rows); other Python
    objects go into a 1-D object array. meta_info is not carried over.

    Raises:
        DataProtoError: ``x`` is empty, or the items disagree on which keys they hold.
    """
    if not x:
        raise DataProtoError("collate_fn needs at least one DataProtoItem")
    batches = [item.batch for item in x]
    if any(b is None for b in batches) and not all(b is None for b in batches):
        raise DataProtoError("cannot collate DataProtoItems with and without a tensor batch")
    batch = torch.stack(batches).contiguous() if batches[0] is not None else None

    keys = list(x[0].non_tensor_batch)
    for i, item in enumerate(x[1:], start=1):
        if set(item.non_tensor_batch) != set(keys):
            raise DataProtoError(
                f"item {i} has non_tensor_batch keys {sorted(item.non_tensor_batch)}, item 0 has {sorted(keys)}"
            )
    non_tensor = {key: _column_from_items([item.non_tensor_batch[key] for item in x]) for key in keys}
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append copies of the leading rows until ``len(data)`` is a multiple of ``size_divisor``.

    Args:
        data: the DataProto to pad (left unchanged).
        size_divisor: the length must become divisible by this.

    Returns:
        ``(padded, pad_size)``: ``padded`` is ``data`` itself when no padding is needed;
        it shares ``data.meta_info``. Undo with :func:`unpad_dataproto`.

    Raises:
        TypeError: ``data`` is not a DataProto.
        DataProtoError: ``size_divisor`` is not positive.
    """
    if not isinstance(data, DataProto):
        raise TypeError(f"data must be a DataProto, got {type(data).__name__}")
    if size_divisor < 1:
        raise DataProtoError(f"size_divisor must be a positive int, got {size_divisor}")
    length = len(data)
    if length % size_divisor == 0:
        if length == 0:
            logger.warning("pad_dataproto_to_divisor: the DataProto is empty, nothing to pad")
        return data, 0

    pad_size = size_divisor - length % size_divisor
    parts = [data]
    remaining = pad_size
    while remaining > 0:
        take = min(remaining, length)
        parts.append(data[:take])
        remaining -= take
    # Rows only: merging meta_info through concat would gather data's metrics once
    # per padding part.
    batch, non_tensor = _concat_rows(parts)
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=data.meta_info), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows added by :func:`pad_dataproto_to_divisor`.

    Raises:
        DataProtoError: ``pad_size`` is negative or larger than ``len(data)``.
    """
    if not 0 <= pad_size <= len(data):
        raise DataProtoError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    if pad_size == 0:
        return data
    return data[:-pad_size]


def _reshape_leading(arrays: dict[str, np.ndarray], leading: tuple[int, ...], replaced: int) -> dict[str, np.ndarray]:
    """Each array with its first ``replaced`` dimensions swapped for the ``leading`` shape (a new dict)."""
    return {key: np.reshape(array, (*leading, *array.shape[replaced:])) for key, array in arrays.items()}


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Rows ``[bsz, ...]`` regrouped as ``[new_batch_size, bsz // new_batch_size, ...]`` (one batch dim).

    Raises:
        AssertionError: ``new_batch_size`` does not divide the batch size.
    """
    rows = data.batch.batch_size[0]
    assert rows % new_batch_size == 0, f"fold_batch_dim: {rows} rows do not fold into {new_batch_size} equal groups"
    per_group = rows // new_batch_size
    folded = data.batch.view(new_batch_size, per_group)
    # Only the group dimension stays a batch dimension; the rows of a group become part of each entry.
    folded.auto_batch_size_(batch_dims=1)
    non_tensor = _reshape_leading(data.non_tensor_batch, (new_batch_size, per_group), replaced=1)
    return type(data)(batch=folded, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """The inverse of :func:`fold_batch_dim`: the first ``batch_dims`` dimensions flattened into one."""
    # The TensorDict must first know that its leading batch_dims dimensions are batch dimensions
    # (fold_batch_dim left it with one) before they can be merged.
    data.batch.auto_batch_size_(batch_dims=batch_dims)
    flat = data.batch.view(-1)
    non_tensor = _reshape_leading(data.non_tensor_batch, (flat.batch_size[0],), replaced=batch_dims)
    return type(data)(batch=flat, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def _torch_name(value: torch.dtype | torch.layout) -> str:
    return str(value).removeprefix("torch.")


def serialize_single_tensor(obj: torch.Tensor) -> tuple[str, torch.Size, np.ndarray]:
    """``(dtype name, shape, raw bytes as a uint8 array)``: a tensor as plain data (msgpack-friendly)."""
    as_bytes = obj.detach().contiguous().reshape(-1).view(torch.uint8)
    return _torch_name(obj.dtype), obj.shape, as_bytes.numpy()


def deserialize_single_tensor(arr: Any) -> torch.Tensor:
    """The tensor :func:`serialize_single_tensor` encoded (a copy, writable)."""
    dtype_name, shape, raw = arr
    dtype = getattr(torch, dtype_name)
    assert isinstance(dtype, torch.dtype), f"deserialize_single_tensor: torch.{dtype_name} is not a dtype"
    # bytearray copies the bytes: the tensor owns writable memory instead of a read-only message buffer.
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return flat.view(dtype).view(shape)


def _encode_column(value: torch.Tensor) -> tuple[Any, ...]:
    if not value.is_nested:
        return serialize_single_tensor(value)
    # A jagged column has no single buffer: it travels as its layout name and its rows.
    return _torch_name(value.layout), [serialize_single_tensor(row) for row in value.unbind()]


def _decode_column(key: str, encoding: Any) -> torch.Tensor:
    if len(encoding) == 3:
        return deserialize_single_tensor(encoding)
    if len(encoding) == 2:
        layout_name, rows = encoding
        return torch.nested.as_nested_tensor(
            [deserialize_single_tensor(row) for row in rows], layout=getattr(torch, layout_name)
        )
    raise ValueError(
        f"deserialize_tensordict: {key!r} is encoded in {len(encoding)} fields, "
        "expected 3 (a tensor) or 2 (a nested tensor)"
    )


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, dict[str, tuple[Any, ...]]]:
    """``(batch size, device, {key: encoding})``; a jagged column is ``(layout, [row encodings])``."""
    columns = {key: _encode_column(value) for key, value in batch.items()}
    return tuple(batch.batch_size), (str(batch.device) if batch.device is not None else None), columns


def deserialize_tensordict(arr: Any) -> TensorDict:
    """The TensorDict :func:`serialize_tensordict` encoded.

    Raises:
        ValueError: an entry is neither a tensor (3 fields) nor a nested tensor (2 fields) encoding.
    """
    batch_size, device, columns = arr
    decoded = {key: _decode_column(key, encoding) for key, encoding in columns.items()}
    return TensorDict(source=decoded, batch_size=batch_size, device=device)


# ------------------------------------------------------------------------ classes


@dataclass
class DataProtoItem:
    """One row of a DataProto, as returned by ``data[i]`` for an integer ``i``.

    ``batch`` has no batch dimension; ``non_tensor_batch`` maps each key to that row's
    value; ``meta_info`` is the parent's dict (shared, not copied).
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


@dataclass
class DataProto:
    """A batch of samples: tensors, per-sample Python data and batch-level metadata.

    See the module docstring for the data model. Construction checks consistency (see
    :meth:`check_consistency`). Row operations return new DataProtos whose tensors
    and arrays may be views of the original; ``meta_info`` is shared, not copied,
    unless stated otherwise.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ------------------------------------------------------------- construction

    @classmethod
    def from_single_dict(
        cls,
        data: dict[str, torch.Tensor | np.ndarray],
        meta_info: dict[str, Any] | None = None,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from one dict, sending tensors to ``batch`` and numpy arrays to ``non_tensor_batch``.

        Raises:
            DataProtoError: a value is neither a ``torch.Tensor`` nor an ``np.ndarray``.
        """
        tensors: dict[str, torch.Tensor] = {}
        non_tensors: dict[str, np.ndarray] = {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, np.ndarray):
                non_tensors[key] = value
            else:
                raise DataProtoError(
                    f"value for key '{key}' must be a torch.Tensor or np.ndarray, got {type(value).__name__}"
                )
        return cls.from_dict(
            tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding
        )

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from tensors that share their first ``num_batch_dims`` dimensions.

        Args:
            tensors: become ``batch``; ``batch`` is ``None`` when this is empty.
            non_tensors: per-sample values. Anything that is not an ``np.ndarray`` is
                converted with ``np.array(value, dtype=object)``.
            meta_info: batch-level values (the dict is copied, the values are not).
            num_batch_dims: leading dimensions that form the batch. Anything but 1 fails the
                consistency check (verl 0.9 supports one batch dimension); see :func:`fold_batch_dim`.
            auto_padding: allow uneven :meth:`chunk` for this DataProto.

        Raises:
            DataProtoError: the tensors disagree on their batch dimensions, a column
                length does not match, or ``num_batch_dims`` is invalid.
        """
        if num_batch_dims < 1:
            raise DataProtoError(f"num_batch_dims must be >= 1, got {num_batch_dims}")
        tensors = dict(tensors or {})
        non_tensors = dict(non_tensors or {})
        meta_info = dict(meta_info or {})
        if non_tensors and num_batch_dims != 1:
            raise DataProtoError(f"num_batch_dims must be 1 when non_tensors are given, got {num_batch_dims}")

        batch_size: torch.Size | None = None
        pivot_key = None
        for key, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"tensors['{key}'] must be a torch.Tensor, got {type(tensor).__name__}")
            if tensor.dim() < num_batch_dims:
                raise DataProtoError(
                    f"tensors['{key}'] has {tensor.dim()} dims, fewer than num_batch_dims={num_batch_dims}"
                )
            shape = tensor.shape[:num_batch_dims]
            if batch_size is None:
                batch_size, pivot_key = shape, key
            elif shape != batch_size:
                raise DataProtoError(
                    f"tensors['{key}'] has batch shape {list(shape)} but tensors['{pivot_key}'] has "
                    f"{list(batch_size)}"
                )

        for key, value in non_tensors.items():
            if not isinstance(value, np.ndarray):
                non_tensors[key] = np.array(value, dtype=object)

        batch = TensorDict(tensors, batch_size=batch_size) if tensors else None
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    @classmethod
    def from_tensordict(
        cls,
        tensor_dict: TensorDictBase | None = None,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
    ) -> DataProto:
        """Build from a TensorDict such as one made by :meth:`to_tensordict`.

        Tensors (and nested TensorDicts) go to ``batch``, ``NonTensorStack`` entries
        become ``non_tensor_batch`` columns, and ``NonTensorData`` entries become
        ``meta_info`` values (added to a copy of ``meta_info``).

        Raises:
            TypeError: ``tensor_dict`` is not a TensorDict, or holds an entry of
                another kind.
            DataProtoError: ``num_batch_dims`` is invalid.
        """
        if not isinstance(tensor_dict, TensorDictBase):
            raise TypeError(f"tensor_dict must be a TensorDict, got {type(tensor_dict).__name__}")
        if num_batch_dims < 1:
            raise DataProtoError(f"num_batch_dims must be >= 1, got {num_batch_dims}")
        meta = dict(meta_info or {})
        tensors: dict[str, Any] = {}
        columns: dict[str, np.ndarray] = {}
        for key, value in tensor_dict.items():
            # NonTensorStack subclasses TensorDictBase, so it is tested first.
            if isinstance(value, NonTensorStack):
                columns[key] = _column_from_items(value.tolist())
            elif isinstance(value, NonTensorData):
                meta[key] = value.data
            elif isinstance(value, (torch.Tensor, TensorDictBase)):
                tensors[key] = value
            else:
                raise TypeError(f"entry '{key}' has unsupported type {type(value).__name__}")
        if columns and num_batch_dims != 1:
            raise DataProtoError(
                f"num_batch_dims must be 1 when tensor_dict holds non-tensor columns, got {num_batch_dims}"
            )

        batch = None
        if tensors:
            if len(tensor_dict.batch_size) >= num_batch_dims:
                batch_size = tensor_dict.batch_size[:num_batch_dims]
            else:
                batch_size = next(iter(tensors.values())).shape[:num_batch_dims]
            batch = TensorDict(tensors, batch_size=batch_size, device=tensor_dict.device)
        return cls(batch=batch, non_tensor_batch=columns, meta_info=meta)

    def to_tensordict(self) -> TensorDict:
        """Pack everything into one TensorDict; :meth:`from_tensordict` inverts it.

        Tensors stay tensors, each non-tensor column becomes a ``NonTensorStack`` and
        each meta_info value a ``NonTensorData``.

        Raises:
            DataProtoError: a key appears in more than one of the three parts.
        """
        tensor_keys = list(self.batch.keys()) if self.batch is not None else []
        seen: set[str] = set()
        for key in [*tensor_keys, *self.non_tensor_batch, *self.meta_info]:
            if key in seen:
                raise DataProtoError(
                    f"key '{key}' appears in more than one of batch, non_tensor_batch, meta_info"
                )
            seen.add(key)

        source: dict[str, Any] = {}
        if self.batch is not None:
            source.update(self.batch.items())
        for key, column in self.non_tensor_batch.items():
            source[key] = NonTensorStack.from_list([NonTensorData(item) for item in column])
        for key, value in self.meta_info.items():
            source[key] = NonTensorData(value)

        if self.batch is not None:
            batch_size, device = self.batch.batch_size, self.batch.device
        else:
            batch_size, device = ([len(self)] if self.non_tensor_batch else []), None
        return TensorDict(source, batch_size=batch_size, device=device)

    # -------------------------------------------------------------- inspection

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return int(next(iter(self.non_tensor_batch.values())).shape[0])
        return 0

    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        """Index rows.

        Args:
            item: an ``int`` gives a :class:`DataProtoItem`; a ``slice`` gives a
                DataProto via :meth:`slice`; a list, ``np.ndarray`` or
                ``torch.Tensor`` of ints or bools gives a DataProto via
                :meth:`select_idxs`.

        Raises:
            IndexError: an integer index is out of range.
            TypeError: any other index type.
        """
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (torch.Tensor, np.ndarray)) and item.ndim == 0:
            # A 0-d integer tensor or array means one row, like an int.
            is_integer = (
                not item.is_floating_point() and not item.is_complex() and item.dtype != torch.bool
                if isinstance(item, torch.Tensor)
                else np.issubdtype(item.dtype, np.integer)
            )
            if not is_integer:
                raise TypeError(f"a 0-d index must be an integer, got dtype {item.dtype}")
            item = int(item)
        if isinstance(item, (int, np.integer)):
            length = len(self)
            if not -length <= item < length:
                raise IndexError(f"index {item} is out of range for a DataProto of length {length}")
            return DataProtoItem(
                batch=self.batch[item] if self.batch is not None else None,
                non_tensor_batch={key: value[item] for key, value in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        raise TypeError(
            f"DataProto indices must be int, slice, list, np.ndarray or torch.Tensor, got {type(item).__name__}"
        )

    def check_consistency(self) -> None:
        """Validate the structure; run on construction and callable at any time.

        Raises:
            TypeError: a part has the wrong container type.
            DataProtoError: ``batch`` has no batch dimension, or more than one while
                ``non_tensor_batch`` is not empty; a non-tensor value is not a numpy
                array with a leading dimension; or a column's length differs from the
                batch size (or from the other columns when there is no batch).
        """
        if self.batch is not None:
            if not isinstance(self.batch, TensorDictBase):
                raise TypeError(f"batch must be a TensorDict or None, got {type(self.batch).__name__}")
            if len(self.batch.batch_size) != 1:
                # verl 0.9 keeps one batch dimension (fold/unfold_batch_dim reshape around that).
                raise DataProtoError(
                    f"batch must have exactly 1 batch dimension (only num_batch_dims=1 is supported), "
                    f"got batch_size={list(self.batch.batch_size)}"
                )
        if not isinstance(self.non_tensor_batch, dict):
            raise TypeError(f"non_tensor_batch must be a dict, got {type(self.non_tensor_batch).__name__}")
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"meta_info must be a dict, got {type(self.meta_info).__name__}")
        if not self.non_tensor_batch:
            return

        expected = int(self.batch.batch_size[0]) if self.batch is not None else None
        reference = "the batch size"
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray):
                raise DataProtoError(
                    f"non_tensor_batch['{key}'] must be a numpy array, got {type(value).__name__}"
                )
            if value.ndim == 0:
                raise DataProtoError(f"non_tensor_batch['{key}'] is a 0-d array; it needs a batch dimension")
            if expected is None:
                expected, reference = int(value.shape[0]), f"non_tensor_batch['{key}']"
            elif value.shape[0] != expected:
                raise DataProtoError(
                    f"non_tensor_batch['{key}'] has length {value.shape[0]} but {reference} is {expected}"
                )

    def is_padding_enabled(self) -> bool:
        """Whether :meth:`chunk` may split unevenly: this DataProto's ``meta_info`` opts in, or
        :class:`DataProtoConfig` enables it globally."""
        return (
            bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding
        )

    def get_data_info(self) -> str:
        """A multi-line description of every key: tensor shapes, dtypes and devices,
        array shapes and dtypes, and the nested types of meta_info values."""
        lines = ["batch"]
        if self.batch is not None:
            for key, value in self.batch.items():
                if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "device"):
                    lines.append(f"  {key}: {tuple(value.shape)} ({value.dtype}) {value.device}")
                elif hasattr(value, "shape") and hasattr(value, "dtype"):
                    lines.append(f"  {key}: {tuple(value.shape)} ({value.dtype})")
                else:
                    lines.append(f"  {key}: {type(value).__name__}")
        lines.append("non_tensor_batch")
        for key, array in self.non_tensor_batch.items():
            lines.append(f"  {key}: ndarray{array.shape} ({array.dtype})")
        lines.append("meta_info")
        for key, value in self.meta_info.items():
            lines.append(f"  {key}: {_describe_type(value)}")
        return "\n".join(lines)

    def print_size(self, prefix: str = "") -> None:
        """Print the memory held by tensors and by numpy arrays, in GB."""
        tensor_bytes = 0
        if self.batch is not None:
            for _, tensor in self.batch.items(include_nested=True, leaves_only=True):
                if isinstance(tensor, torch.Tensor):
                    tensor_bytes += tensor.element_size() * tensor.numel()
        array_bytes = sum(array.nbytes for array in self.non_tensor_batch.values())
        message = (
            f"Size of tensordict: {tensor_bytes / 1024**3} GB, "
            f"size of non_tensor_batch: {array_bytes / 1024**3} GB"
        )
        print(f"{prefix}, {message}" if prefix else message)

    # ----------------------------------------------------------- key operations

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto restricted to the given keys; ``None`` keeps a part whole.

        Tensors are shared with ``self``. With ``deepcopy=True`` the non-tensor arrays
        and meta_info are deep-copied (tensors still are not, as in verl). When a
        part's keys are ``None`` the result holds the very same container.

        Raises:
            DataProtoError: a requested key does not exist (the message lists the
                available ones).
        """
        batch_keys = _as_key_list(batch_keys, "batch_keys")
        non_tensor_batch_keys = _as_key_list(non_tensor_batch_keys, "non_tensor_batch_keys")
        meta_info_keys = _as_key_list(meta_info_keys, "meta_info_keys")

        if batch_keys is None:
            sub_batch = self.batch
        else:
            _check_known_keys("batch", batch_keys, self.batch.keys() if self.batch is not None else [])
            sub_batch = self.batch.select(*batch_keys) if self.batch is not None else None

        if non_tensor_batch_keys is None:
            non_tensor = self.non_tensor_batch
        else:
            _check_known_keys("non_tensor_batch", non_tensor_batch_keys, self.non_tensor_batch)
            wanted = set(non_tensor_batch_keys)
            non_tensor = {key: value for key, value in self.non_tensor_batch.items() if key in wanted}

        if meta_info_keys is None:
            meta = self.meta_info
        else:
            _check_known_keys("meta_info", meta_info_keys, self.meta_info)
            wanted = set(meta_info_keys)
            meta = {key: value for key, value in self.meta_info.items() if key in wanted}

        if deepcopy:
            non_tensor = copy.deepcopy(non_tensor)
            meta = copy.deepcopy(meta)
        return type(self)(batch=sub_batch, non_tensor_batch=non_tensor, meta_info=meta)

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> DataProto:
        """Remove the given keys from ``self`` and return them as a new DataProto.

        All keys are checked before anything is removed. Tensors popped from a batch keep its
        batch size even if the batch is left with no keys.

        Raises:
            DataProtoError: a requested key does not exist (nothing is removed then).
        """
        batch_keys = _as_key_list(batch_keys, "batch_keys") or []
        non_tensor_batch_keys = _as_key_list(non_tensor_batch_keys, "non_tensor_batch_keys") or []
        meta_info_keys = _as_key_list(meta_info_keys, "meta_info_keys") or []
        _check_known_keys("batch", batch_keys, self.batch.keys() if self.batch is not None else [])
        _check_known_keys("non_tensor_batch", non_tensor_batch_keys, self.non_tensor_batch)
        _check_known_keys("meta_info", meta_info_keys, self.meta_info)

        popped_batch = None
        if batch_keys:
            tensors = {key: self.batch.pop(key) for key in batch_keys}
            popped_batch = TensorDict(tensors, batch_size=self.batch.batch_size, device=self.batch.device)
        non_tensor = {key: self.non_tensor_batch.pop(key) for key in non_tensor_batch_keys}
        meta = {key: self.meta_info.pop(key) for key in meta_info_keys}
        return type(self)(batch=popped_batch, non_tensor_batch=non_tensor, meta_info=meta)

    def rename(
        self,
        old_keys: str | Sequence[str] | None = None,
        new_keys: str | Sequence[str] | None = None,
    ) -> DataProto:
        """Rename ``batch`` keys in place (non-tensor and meta_info keys are untouched).

        Args:
            old_keys: a key or list of keys present in ``batch``.
            new_keys: their new names, in the same order.

        Returns:
            ``self``.

        Raises:
            TypeError: keys are neither a str nor a list.
            DataProtoError: the lists differ in length, an old key does not exist, or a
                new key collides with a key that is kept or repeats.
        """
        old = _as_key_list(old_keys, "old_keys") or []
        new = _as_key_list(new_keys, "new_keys") or []
        if len(old) != len(new):
            raise DataProtoError(f"old_keys and new_keys differ in length: {len(old)} vs {len(new)}")
        if not old:
            return self
        available = list(self.batch.keys()) if self.batch is not None else []
        _check_known_keys("batch", old, available)
        kept = set(available) - set(old)
        clashes = [key for key in new if key in kept]
        if clashes or len(set(new)) != len(new):
            raise DataProtoError(f"new_keys {new} repeat or collide with existing batch keys {sorted(kept)}")
        # Take all values out before inserting so that swaps such as a->b, b->a work.
        values = [self.batch.pop(key) for key in old]
        for key, value in zip(new, values, strict=True):
            self.batch.set(key, value)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other`` into ``self`` in place: batch, non_tensor_batch and meta_info.

        Keys present on both sides must hold equal values. Everything is checked before
        ``self`` is modified.

        Returns:
            ``self``.

        Raises:
            TypeError: ``other`` is not a DataProto.
            DataProtoError: the lengths differ, or a shared key holds different values
                (the message names the key).
        """
        if not isinstance(other, DataProto):
            raise TypeError(f"can only union with a DataProto, got {type(other).__name__}")
        self_has_rows = self.batch is not None or bool(self.non_tensor_batch)
        other_has_rows = other.batch is not None or bool(other.non_tensor_batch)
        if self_has_rows and other_has_rows and len(self) != len(other):
            raise DataProtoError(f"cannot union DataProtos of lengths {len(self)} and {len(other)}")

        if self.batch is not None and other.batch is not None:
            key = _find_tensor_conflict(self.batch, other.batch)
            if key is not None:
                raise DataProtoError(
                    f"cannot union: batch key '{key}' holds different values on the two sides"
                )
        key = _find_numpy_conflict(self.non_tensor_batch, other.non_tensor_batch)
        if key is not None:
            raise DataProtoError(
                f"cannot union: non_tensor_batch key '{key}' holds different values on the two sides"
            )
        key = _find_meta_conflict(self.meta_info, other.meta_info)
        if key is not None:
            raise DataProtoError(
                f"cannot union: meta_info key '{key}' holds different values on the two sides"
            )

        if self.batch is None:
            self.batch = other.batch
        elif other.batch is not None:
            existing = set(self.batch.keys())
            for name in other.batch.keys():
                if name not in existing:
                    self.batch[name] = other.batch.get(name)
        self.non_tensor_batch.update(other.non_tensor_batch)
        self.meta_info.update(other.meta_info)
        return self

    # ----------------------------------------------------------- row operations

    def select_idxs(self, idxs: list[int] | list[bool] | np.ndarray | torch.Tensor) -> DataProto:
        """The rows at integer positions ``idxs`` (in that order) or where a boolean mask is true.

        Raises:
            TypeError: ``idxs`` is not a list, array or tensor of ints or bools.
            DataProtoError: a boolean mask's length differs from ``len(self)``.
            IndexError: a position is out of range.
        """
        idx_torch, idx_np, count = _normalize_index(idxs, len(self))
        batch = None
        if self.batch is not None:
            batch = TensorDict(
                {key: value[idx_torch] for key, value in self.batch.items()},
                batch_size=(count, *self.batch.batch_size[1:]),
                device=self.batch.device,
            )
        non_tensor = {key: value[idx_np] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``start:end:step`` as a DataProto of views (``data[a:b]`` calls this)."""
        window = slice(start, end, step)
        batch = self.batch[window] if self.batch is not None else None
        non_tensor = {key: value[window] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split along dim 0 into exactly ``chunks`` pieces that share ``meta_info``.

        Without padding enabled the length must divide evenly. With padding enabled
        (see :meth:`is_padding_enabled`) pieces follow ``torch.chunk`` sizing,
        ``ceil(len / chunks)`` rows each with a shorter last piece; where
        ``torch.chunk`` would return fewer pieces, empty ones are appended.

        Raises:
            DataProtoError: ``chunks`` is not positive, or the length is not divisible
                and padding is not enabled.
        """
        if chunks < 1:
            raise DataProtoError(f"chunks must be a positive int, got {chunks}")
        length = len(self)
        if length % chunks != 0 and not self.is_padding_enabled():
            raise DataProtoError(
                f"cannot chunk a DataProto of length {length} into {chunks} equal chunks; pad it first with "
                f"pad_dataproto_to_divisor(data, {chunks}) or build it with "
                f"DataProto.from_dict(..., auto_padding=True) to allow uneven chunks"
            )
        return [self.slice(start, end) for start, end in _chunk_bounds(length, chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive pieces of ``split_size`` rows (the last may be shorter) sharing ``meta_info``.

        Raises:
            DataProtoError: ``split_size`` is not positive.
        """
        if split_size < 1:
            raise DataProtoError(f"split_size must be a positive int, got {split_size}")
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Concatenate DataProtos along dim 0.

        meta_info is merged: keys other than ``"metrics"`` must agree across parts.
        ``"metrics"`` values (a dict, or a list of dicts, per part; ``None`` skipped)
        are gathered into one dict mapping each metric name to the list of its values
        in part order.

        Raises:
            DataProtoError: ``data`` is empty, the parts disagree on keys or on
                having a tensor batch, or a non-metrics meta_info key conflicts.
        """
        if len(data) == 0:
            raise DataProtoError("cannot concat an empty list of DataProto")
        batch, non_tensor = _concat_rows(data)
        meta = _merge_meta_info([part.meta_info for part in data])
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def reorder(self, indices: torch.Tensor | np.ndarray | list[int]) -> None:
        """Permute the rows in place so that row ``i`` becomes old row ``indices[i]``."""
        reordered = self.select_idxs(indices)
        self.batch = reordered.batch
        self.non_tensor_batch = reordered.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row ``repeat_times`` times.

        Args:
            repeat_times: copies of each row (``>= 0``).
            interleave: ``True`` gives ``a a b b``; ``False`` tiles the whole batch,
                ``a b a b``.

        Raises:
            DataProtoError: ``repeat_times`` is negative.
        """
        if repeat_times < 0:
            raise DataProtoError(f"repeat_times must be >= 0, got {repeat_times}")
        rows = torch.arange(len(self))
        order = rows.repeat_interleave(repeat_times) if interleave else rows.repeat(repeat_times)
        return self.select_idxs(order)

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Each row becomes ``n_split`` rows: columns in ``split_keys`` are cut along their second
        dimension into ``n_split`` pieces (one per new row); the other columns repeat.

        Raises:
            DataProtoError: a split column's second dimension is not divisible by ``n_split``.
        """
        split = set(split_keys or ())

        def unfold(key: str, value: Any, repeat: Callable[[Any], Any]) -> Any:
            if key not in split:
                return repeat(value)
            if value.shape[1] % n_split:
                raise DataProtoError(f"'{key}' has {value.shape[1]} columns, not divisible by n_split={n_split}")
            return value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])

        batch = None
        if self.batch is not None:
            batch = TensorDict(
                {k: unfold(k, v, lambda t: torch.repeat_interleave(t, n_split, dim=0)) for k, v in self.batch.items()},
                batch_size=(self.batch.batch_size[0] * n_split,),
                device=self.batch.device,
            )
        non_tensors = {
            k: unfold(k, v, lambda a: np.repeat(a, n_split, axis=0)) for k, v in self.non_tensor_batch.items()
        }
        return type(self)(batch=batch, non_tensor_batch=non_tensors, meta_info=self.meta_info)

    def sample_level_repeat(self, repeat_times: int | Sequence[int] | torch.Tensor | np.ndarray) -> DataProto:
        """Repeat row ``i`` ``repeat_times[i]`` times, keeping copies adjacent.

        Args:
            repeat_times: an int for every row, or one non-negative count per row
                (list, tuple, 1-D tensor or 1-D array).

        Raises:
            DataProtoError: the counts are not 1-D, their number differs from
                ``len(self)``, or a count is negative.
        """
        if isinstance(repeat_times, (int, np.integer)):
            counts = np.full(len(self), int(repeat_times), dtype=np.int64)
        else:
            if isinstance(repeat_times, torch.Tensor):
                repeat_times = repeat_times.detach().cpu().numpy()
            counts = np.asarray(repeat_times, dtype=np.int64)
        if counts.ndim != 1 or counts.shape[0] != len(self):
            raise DataProtoError(
                f"repeat_times must hold one count per row ({len(self)}), got shape {tuple(counts.shape)}"
            )
        if (counts < 0).any():
            raise DataProtoError(f"repeat_times must be >= 0, got {counts.tolist()}")
        order = np.repeat(np.arange(len(self), dtype=np.int64), counts)
        return self.select_idxs(order)

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of one row, in place (meta_info is unchanged).

        Args:
            padding_size: rows to append (``>= 0``).
            padding_candidate: ``"first"`` repeats row 0; ``"last"`` or ``""``
                repeats the last row.

        Raises:
            DataProtoError: ``padding_size`` is negative, ``padding_candidate`` is
                unknown, or the DataProto is empty while ``padding_size > 0``.
        """
        if padding_candidate not in ("", "first", "last"):
            raise DataProtoError(f"padding_candidate must be 'first' or 'last', got {padding_candidate!r}")
        if padding_size < 0:
            raise DataProtoError(f"padding_size must be >= 0, got {padding_size}")
        if padding_size == 0:
            return
        if len(self) == 0:
            raise DataProtoError("cannot pad an empty DataProto: there is no row to repeat")
        row = 0 if padding_candidate == "first" else len(self) - 1
        filler = self.select_idxs([row] * padding_size)
        self.batch, self.non_tensor_batch = _concat_rows([self, filler])

    def make_iterator(
        self,
        mini_batch_size: int,
        epochs: int,
        seed: int | None = None,
        dataloader_kwargs: dict[str, Any] | None = None,
    ) -> Iterator[DataProto]:
        """Yield mini-batches for ``epochs`` passes over the rows.

        A ``torch.utils.data.DataLoader`` over row positions drives the order, so
        ``dataloader_kwargs`` (e.g. ``{"shuffle": True}``) behave as usual. ``seed``
        seeds its generator, which makes shuffled orders reproducible. Each mini-batch
        shares ``self.meta_info``.

        Args:
            mini_batch_size: rows per mini-batch; must divide ``len(self)``.
            epochs: number of passes.
            seed: seed of the DataLoader's generator, or ``None`` for torch's global RNG.
            dataloader_kwargs: extra DataLoader arguments (not ``batch_size``,
                ``collate_fn`` or ``generator``).

        Returns:
            An iterator of ``len(self) * epochs // mini_batch_size`` DataProtos.

        Raises:
            DataProtoError: ``mini_batch_size`` is not positive or does not divide ``len(self)``.
        """
        if mini_batch_size < 1:
            raise DataProtoError(f"mini_batch_size must be a positive int, got {mini_batch_size}")
        if len(self) % mini_batch_size != 0:
            raise DataProtoError(f"length {len(self)} is not divisible by mini_batch_size {mini_batch_size}")
        kwargs = dict(dataloader_kwargs or {})
        generator = None
        if seed is not None:
            generator = torch.Generator()
            generator.manual_seed(seed)
        loader = DataLoader(
            range(len(self)),
            batch_size=mini_batch_size,
            collate_fn=self.select_idxs,
            generator=generator,
            **kwargs,
        )

        def epochs_of_batches() -> Iterator[DataProto]:
            for _ in range(epochs):
                yield from loader

        return epochs_of_batches()

    # -------------------------------------------------------- device and storage

    def to(self, device: str | torch.device) -> DataProto:
        """Move ``batch`` to ``device`` in place (numpy data stays put).

        Returns:
            ``self``.
        """
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def __getstate__(self) -> dict[str, Any]:
        # The TensorDict travels as plain arrays plus batch_size and device, so that
        # unpickling does not depend on TensorDict internals. CPU tensors go as numpy
        # views (a chunk carries only its own rows, out of band under protocol 5); the
        # rest is moved to CPU and made compact, so a chunk never drags its parent's storage along.
        state = {
            "batch": None if self.batch is None else _encode_tensordict(self.batch),
            "non_tensor_batch": self.non_tensor_batch,
            "meta_info": self.meta_info,
        }
        if getattr(self, "_read_only_receiver", False):
            state["views"] = True
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        batch = state["batch"]
        views = bool(state.get("views")) or _RECEIVE_VIEWS.get()
        self.batch = None if batch is None else _decode_tensordict(batch, views)
        self.non_tensor_batch = state["non_tensor_batch"]
        self.meta_info = state["meta_info"]

    def for_read_only_receiver(self) -> DataProto:
        """The same data, to send to a receiver that will not write it: it unpickles the tensors as
        views of Ray's read-only shared memory instead of copying them (a method registered with
        ``read_only=True`` gets its shards this way). Writing to them is undefined."""
        shared = type(self)(batch=self.batch, non_tensor_batch=self.non_tensor_batch, meta_info=self.meta_info)
        shared._read_only_receiver = True  # type: ignore[attr-defined]
        return shared

    def save_to_disk(self, filepath: str | os.PathLike[str]) -> None:
        """Pickle to ``filepath``; :meth:`load_from_disk` reads it back."""
        with open(filepath, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike[str]) -> DataProto:
        """Unpickle a DataProto written by :meth:`save_to_disk`. Only load trusted files:
        this is ``pickle``.

        Raises:
            TypeError: the file holds something other than a DataProto.
        """
        with open(filepath, "rb") as f:
            data = pickle.load(f)
        if not isinstance(data, DataProto):
            raise TypeError(f"{filepath} holds a {type(data).__name__}, not a DataProto")
        return data


# --------------------------------------------------------------------------- futures


def concat_batches(parts: list[Any]) -> Any:
    """What a group's ranks returned, as one batch: TensorDicts (verl's protocol v2, e.g. from a mesh
    dispatch) concatenate with :func:`~supervisor.core.tensordict_utils.concat_tensordict`, DataProtos
    with :meth:`DataProto.concat`."""
    if parts and all(isinstance(p, TensorDictBase) for p in parts):
        from .tensordict_utils import concat_tensordict

        return concat_tensordict(list(parts))
    return DataProto.concat(parts)


def _take_chunk(data: Any, index: int, chunks: int) -> Any:
    if isinstance(data, TensorDictBase):
        from .tensordict_utils import chunk_tensordict

        return chunk_tensordict(data, chunks)[index]
    return data.chunk(chunks=chunks)[index]


def _then(first: Callable[[Any], Any], second: Callable[[Any], Any], data: Any) -> Any:
    return second(first(data))


@dataclass
class DataProtoFuture:
    """A DataProto still in the Ray object store, to be gathered where it is used.

    The driver hands this to the next worker group instead of fetching the data.
    :meth:`get` fetches ``futures``, reduces them with ``collect_fn`` (usually
    :meth:`DataProto.concat`) and applies ``dispatch_fn`` (for example, "take chunk
    ``i``"). Everything here pickles, so a future can be sent to a Ray actor.
    """

    collect_fn: Callable[[list[Any]], Any]
    futures: list[ray.ObjectRef]
    dispatch_fn: Callable[[Any], Any] | None = None

    @staticmethod
    def concat(data: list[ray.ObjectRef]) -> DataProtoFuture:
        """A future for the concatenation of the DataProtos (or TensorDicts) behind ``data``."""
        return DataProtoFuture(collect_fn=concat_batches, futures=data)

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures; the ``i``-th resolves to ``self.get().chunk(chunks)[i]``.

        Raises:
            DataProtoError: ``chunks`` is not positive.
        """
        if chunks < 1:
            raise DataProtoError(f"chunks must be a positive int, got {chunks}")
        pieces = []
        for index in range(chunks):
            pick: Callable[[Any], Any] = partial(_take_chunk, index=index, chunks=chunks)
            if self.dispatch_fn is not None:
                # verl replaced an existing dispatch_fn here; keep it so a chunk of a
                # chunk is the sub-chunk and not a chunk of the whole.
                pick = partial(_then, self.dispatch_fn, pick)
            pieces.append(DataProtoFuture(collect_fn=self.collect_fn, futures=self.futures, dispatch_fn=pick))
        return pieces

    def get(self) -> Any:
        """Fetch the futures (blocking), collect them, then dispatch."""
        return self._finish(ray.get(self.futures))

    async def get_async(self) -> Any:
        """Like :meth:`get`, but awaits the futures: an async actor must not block its event loop,
        or a call it is waiting for can never run on that actor."""
        import asyncio

        return self._finish(list(await asyncio.gather(*self.futures)))

    def _finish(self, outputs: list[Any]) -> Any:
        collected = self.collect_fn(outputs)
        if self.dispatch_fn is not None:
            return self.dispatch_fn(collected)
        return collected


class BatchData:
    """One interface to chunk and concatenate the batch kinds a group call moves: :class:`DataProto`,
    :class:`DataProtoFuture` (and the ObjectRefs of non-blocking calls) and TensorDicts (verl's
    protocol v2). verl 0.9 also handles its transfer-queue metadata here; that is not part of this library.
    """

    def __init__(self, data: Any) -> None:
        self._data = data

    def is_chunkable(self) -> bool:
        """Whether :meth:`chunk` applies to the wrapped value."""
        return isinstance(self._data, DataProto | DataProtoFuture | TensorDictBase)

    def is_concatable(self) -> bool:
        """Whether the wrapped value is a non-empty list of parts :meth:`concat` accepts."""
        data = self._data
        return isinstance(data, list | tuple) and len(data) > 0 and isinstance(data[0], DataProto | ray.ObjectRef | TensorDictBase)

    def chunk(self, chunks: int) -> Any:
        """The wrapped value in ``chunks`` pieces of its own kind (TensorDict pieces are contiguous)."""
        if isinstance(self._data, TensorDictBase):
            from .tensordict_utils import chunk_tensordict, contiguous

            return tuple(contiguous(piece) for piece in chunk_tensordict(self._data, chunks))
        return self._data.chunk(chunks=chunks)

    def concat(self) -> Any:
        """The wrapped parts as one: ObjectRefs become a :class:`DataProtoFuture`.

        Raises:
            ValueError: the list is empty.
        """
        parts = list(self._data)
        if not parts:
            raise ValueError("BatchData.concat: there are no parts to concatenate")
        # Refs of non-blocking calls stay unresolved: the future concatenates them when it is read.
        if isinstance(parts[0], ray.ObjectRef):
            return DataProtoFuture.concat(parts)
        return concat_batches(parts)


def all_gather_data_proto(data: DataProto, process_group: Any) -> None:
    """Gather every rank's rows of ``data`` into ``data`` on every rank of ``process_group`` (in place, like
    ``torch.distributed.all_gather``; rank order). Every rank must hold the same keys and, per tensor key,
    the same shape. Tensors are gathered on the current accelerator when there is one, else where they are.
    """
    import torch.distributed as dist

    assert isinstance(data, DataProto), f"all_gather_data_proto needs a DataProto, got {type(data).__name__}"
    size = dist.get_world_size(group=process_group)
    if data.batch is not None:
        home = data.batch.device
        work = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else home
        gathered = {}
        for key, tensor in data.batch.items():
            local = tensor.to(work).contiguous()
            parts = [torch.empty_like(local) for _ in range(size)]
            dist.all_gather(parts, local, group=process_group)
            gathered[key] = torch.cat(parts, dim=0)
        batch = TensorDict(gathered, batch_size=[int(data.batch.batch_size[0]) * size])
        data.batch = batch.to(home) if home is not None else batch
    columns: list[Any] = [None] * size
    dist.all_gather_object(columns, data.non_tensor_batch, group=process_group)
    data.non_tensor_batch = {k: np.concatenate([c[k] for c in columns]) for k in data.non_tensor_batch}
