"""verl's module-level DataProto functions: union of the parts' dicts, collation of single rows,
padding to a divisor and back, folding rows into a second batch dimension, and all-gather across a
process group."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from .data import DataProto, DataProtoItem, _column_from_items
from .equality import _find_numpy_conflict, _find_tensor_conflict
from .ops import _concat_rows
from .protocol_config import DataProtoError

__all__ = [
    "all_gather_data_proto",
    "collate_fn",
    "fold_batch_dim",
    "pad_dataproto_to_divisor",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "unpad_dataproto",
]

# The public module's name, as before these functions moved here: log configuration keys on it.
logger = logging.getLogger("supervisor.core.protocol")


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


def _reshape_leading(
    arrays: dict[str, np.ndarray], leading: tuple[int, ...], replaced: int
) -> dict[str, np.ndarray]:
    """Each array with its first ``replaced`` dimensions swapped for the ``leading`` shape (a new dict)."""
    return {key: np.reshape(array, (*leading, *array.shape[replaced:])) for key, array in arrays.items()}


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Rows ``[bsz, ...]`` regrouped as ``[new_batch_size, bsz // new_batch_size, ...]`` (one batch dim).

    Raises:
        AssertionError: ``new_batch_size`` does not divide the batch size.
    """
    rows = data.batch.batch_size[0]
    assert rows % new_batch_size == 0, (
        f"fold_batch_dim: {rows} rows do not fold into {new_batch_size} equal groups"
    )
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
