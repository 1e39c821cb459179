"""TensorDict helpers behaving like ``verl.utils.tensordict_utils``: the TensorDict-first batch format
(protocol v2) that verl's workers exchange next to :class:`~supervisor.core.protocol.DataProto`.

What a batch looks like here: a ``TensorDict`` with one batch dimension whose columns are dense tensors,
jagged nested tensors (one variable-length row per sample; ``_ragged_idx`` names the ragged per-row
dimension) or ``NonTensorStack`` columns of ``NonTensorData`` (one Python object per row). Batch-level
metadata is a ``NonTensorData`` entry, alone in a TensorDict with an empty batch size or next to the
columns. A broken precondition is an ``AssertionError`` (verl's tests expect that type); a key that is
asked for by name and missing is a ``KeyError``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.tensorclass import NonTensorData, NonTensorStack

__all__ = [
    "assign_non_tensor",
    "assign_non_tensor_data",
    "assign_non_tensor_stack",
    "assert_tensordict_eq",
    "chunk_tensordict",
    "concat_nested_tensors",
    "concat_tensordict",
    "concat_tensordict_with_none_bsz",
    "contiguous",
    "get",
    "get_keys",
    "get_non_tensor_data",
    "get_tensordict",
    "index_select_tensor_dict",
    "list_of_dict_to_tensordict",
    "make_iterator",
    "maybe_fix_3d_position_ids",
    "nested_tensor_from_tensor_list",
    "pad_to_divisor",
    "pop",
    "pop_keys",
    "union_tensor_dict",
    "unpad",
    "unwrap_non_tensor_data",
]

logger = logging.getLogger(__name__)


# -- small shared pieces -----------------------------------------------------------------------------


def _is_nested(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_nested


def _ragged_idx(nested: torch.Tensor) -> int:
    # A jagged tensor built by torch itself has no _ragged_idx attribute: its last dimension is the ragged one.
    return getattr(nested, "_ragged_idx", nested.dim() - 1)


def _require_tensordict(where: str, value: Any) -> None:
    assert isinstance(value, TensorDict), f"{where}: expected a TensorDict, got {type(value).__name__}"


def _native(value: Any) -> Any:
    """A stored value as a caller wants it: tensors as they are, a stack as a list, metadata unwrapped."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, NonTensorStack):
        return value.tolist()
    assert isinstance(value, NonTensorData), f"unexpected stored value of type {type(value).__name__}"
    return value.data


def _stack_of(items: Iterable[Any]) -> NonTensorStack:
    # Each row wrapped on its own, so a row that is itself a list or dict stays one row.
    return NonTensorStack.from_list([NonTensorData(item) for item in items])


def _nested_keys(td: TensorDict) -> set[str]:
    return {key for key, value in td.items() if _is_nested(value)}


def _without(td: TensorDict, keys: set[str]) -> TensorDict:
    """``td`` minus ``keys``, as a new TensorDict (TensorDict's own cat/chunk cannot handle jagged columns)."""
    kept = {key: value for key, value in td.items() if key not in keys}
    return TensorDict(kept, batch_size=td.batch_size, device=td.device)


# -- non-tensor data ---------------------------------------------------------------------------------


def assign_non_tensor_data(tensor_dict: TensorDict, key: str, val: Any) -> None:
    """Stores one non-tensor value (metadata) under ``key``."""
    _require_tensordict("assign_non_tensor_data", tensor_dict)
    tensor_dict[key] = NonTensorData(val)


def assign_non_tensor_stack(tensor_dict: TensorDict, key: str, val: list[Any]) -> None:
    """Stores a per-row list (items may be lists or dicts) under ``key`` as a ``NonTensorStack``."""
    _require_tensordict("assign_non_tensor_stack", tensor_dict)
    tensor_dict[key] = _stack_of(val)


def assign_non_tensor(tensor_dict: TensorDict, **kwargs: Any) -> TensorDict:
    """Stores each keyword: a list as a per-row stack, anything else as metadata; returns ``tensor_dict``."""
    _require_tensordict("assign_non_tensor", tensor_dict)
    for key, val in kwargs.items():
        if isinstance(val, NonTensorData | NonTensorStack):
            tensor_dict[key] = val
        elif isinstance(val, list):
            tensor_dict[key] = _stack_of(val)
        else:
            tensor_dict[key] = NonTensorData(val)
    return tensor_dict


def unwrap_non_tensor_data(data: Any) -> Any:
    """The value inside a ``NonTensorData``; anything else unchanged."""
    return data.data if isinstance(data, NonTensorData) else data


def get_non_tensor_data(data: TensorDict, key: str, default: Any) -> Any:
    return unwrap_non_tensor_data(data.get(key, default))


# -- nested (jagged) tensors -------------------------------------------------------------------------


def nested_tensor_from_tensor_list(tensors: list[torch.Tensor], ragged_idx: int | None = None) -> torch.Tensor:
    """A jagged nested tensor whose rows are ``tensors``; ``ragged_idx`` (1-based, default: the last
    per-row dimension) is the dimension along which the rows differ in length."""
    assert len(tensors) > 0, "nested_tensor_from_tensor_list: no tensors given"
    row_dims = tensors[0].dim()
    if ragged_idx is None:
        ragged_idx = row_dims
    assert 1 <= ragged_idx <= row_dims, (
        f"nested_tensor_from_tensor_list: ragged_idx={ragged_idx} is outside [1, {row_dims}] for rows of {row_dims} dims"
    )
    rows = list(tensors)
    if row_dims == 1:
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    # torch's constructors only make the first per-row dimension ragged. For another one, the rows are
    # joined along it and the offsets along it are given explicitly; _ragged_idx then records which
    # dimension the offsets refer to (what verl's consumers read back).
    axis = ragged_idx - 1
    joined = torch.cat(rows, dim=axis)
    row_lengths = [row.shape[axis] for row in rows]
    offsets = torch.tensor([0, *itertools.accumulate(row_lengths)], dtype=torch.long, device=joined.device)
    nested = torch.nested.nested_tensor_from_jagged(values=joined, offsets=offsets)
    nested._ragged_idx = ragged_idx
    return nested


def _rows(nested: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a jagged tensor. ``unbind`` fails on some 3-d jagged tensors (pytorch#153238); then the
    rows are cut from the padded tensor with the lengths the offsets give."""
    try:
        return list(nested.unbind(0))
    except RuntimeError:
        padded = nested.to_padded_tensor(0)
        return [padded[i, :length] for i, length in enumerate(nested.offsets().diff().tolist())]


def concat_nested_tensors(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The rows of contiguous jagged tensors (2 or more dimensions), one after another."""
    for position, part in enumerate(tensors):
        assert part.is_nested and part.is_contiguous(), (
            f"concat_nested_tensors: part {position} is not a contiguous nested tensor"
        )
        assert part.dim() >= 2, (
            f"concat_nested_tensors: part {position} has shape {tuple(part.shape)}, a nested tensor needs 2 or more dims"
        )
    rows = [row for part in tensors for row in part.unbind(0)]
    return nested_tensor_from_tensor_list(rows, ragged_idx=_ragged_idx(tensors[0]))


# -- building, selecting, combining ------------------------------------------------------------------


def _batched_column(key: str, val: Any) -> tuple[Any, int]:
    """``val`` as it is stored in a TensorDict column, and its number of rows."""
    if isinstance(val, NonTensorStack):
        return val, len(val)
    if isinstance(val, torch.Tensor):
        if val.is_nested:
            assert val.is_contiguous(), (
                f"get_tensordict: nested column {key!r} is not contiguous (build it with layout=torch.jagged)"
            )
            assert val.layout == torch.jagged, f"get_tensordict: nested column {key!r} has layout {val.layout}, not torch.jagged"
        return val, val.size(0)
    assert isinstance(val, list | np.ndarray), (
        f"get_tensordict: column {key!r} has type {type(val).__name__}, expected torch.Tensor, list, np.ndarray or NonTensorStack"
    )
    # A NonTensorStack keeps Python objects; tensors in it would lose their tensor handling.
    assert not any(isinstance(item, torch.Tensor) for item in val), (
        f"get_tensordict: list column {key!r} holds tensors; it becomes a NonTensorStack, convert them to numpy first"
    )
    return _stack_of(val), len(val)


def get_tensordict(tensor_dict: dict[str, Any], non_tensor_dict: dict[str, Any] | None = None) -> TensorDict:
    """A TensorDict of batched columns (tensors, jagged tensors, lists or arrays of per-row objects, or
    ``NonTensorStack``) of one common length, plus metadata from ``non_tensor_dict``."""
    source: dict[str, Any] = {}
    rows: int | None = None
    for key, val in tensor_dict.items():
        source[key], length = _batched_column(key, val)
        if rows is None:
            rows = length
        assert length == rows, f"get_tensordict: column {key!r} has {length} rows, the columns before it have {rows}"
    for key, val in (non_tensor_dict or {}).items():
        assert key not in source, f"get_tensordict: {key!r} is given both as a column and as metadata"
        source[key] = NonTensorData(val)
    return TensorDict(source=source, batch_size=[] if rows is None else [rows])


def _select_rows(value: Any, indices: torch.Tensor) -> Any:
    if _is_nested(value):
        # Jagged tensors cannot be indexed with a tensor: pick the rows and rebuild.
        rows = _rows(value)
        return nested_tensor_from_tensor_list([rows[i] for i in indices], ragged_idx=_ragged_idx(value))
    if isinstance(value, torch.Tensor) or value.shape:
        return value[indices]
    return value  # metadata (no batch dimension) belongs to every selection


def index_select_tensor_dict(batch: TensorDict | None, indices: torch.Tensor | list[int]) -> TensorDict | None:
    """The rows ``indices`` (1-d) of ``batch``, jagged columns included; metadata is kept as it is."""
    if isinstance(indices, list):
        indices = torch.tensor(indices)
    assert indices.dim() == 1, f"index_select_tensor_dict: indices must be 1-d, got shape {tuple(indices.shape)}"
    if batch is None:
        return None
    selected = {key: _select_rows(value, indices) for key, value in batch.items()}
    return TensorDict(source=selected, batch_size=indices.shape[0])


def _same_value(mine: Any, theirs: Any) -> bool:
    if isinstance(theirs, torch.Tensor):
        return bool(mine.equal(theirs))
    return bool(mine == theirs)


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Adds ``tensor_dict2``'s keys to ``tensor_dict1`` (in place); a key in both must hold equal values.
    Every shared key is checked before anything is added."""
    assert tensor_dict1.batch_size == tensor_dict2.batch_size, (
        f"union_tensor_dict: batch sizes differ, {tensor_dict1.batch_size} vs {tensor_dict2.batch_size}"
    )
    mine = set(tensor_dict1.keys())
    for key in mine.intersection(tensor_dict2.keys()):
        assert _same_value(tensor_dict1[key], tensor_dict2[key]), (
            f"union_tensor_dict: {key!r} holds different values in the two TensorDicts"
        )
    for key in tensor_dict2.keys():
        if key not in mine:
            # .get keeps a NonTensorData/NonTensorStack wrapped; indexing would unwrap it.
            tensor_dict1[key] = tensor_dict2.get(key)
    return tensor_dict1


def concat_tensordict_with_none_bsz(data: list[TensorDict]) -> TensorDict:
    """Metadata-only TensorDicts (empty batch size) concatenate to the first one."""
    for position, td in enumerate(data):
        assert len(td.batch_size) == 0, (
            f"concat_tensordict_with_none_bsz: part {position} has batch size {list(td.batch_size)}, expected []"
        )
    return data[0]


def concat_tensordict(data: list[TensorDict]) -> TensorDict:
    """The rows of ``data`` one after another (dim 0); all must have the same keys and jagged columns."""
    assert len(data) > 0, "concat_tensordict: no TensorDicts given"
    nested = _nested_keys(data[0])
    if not nested and len(data[0].batch_size) == 0:
        return concat_tensordict_with_none_bsz(data)
    if not nested:
        return TensorDict.cat(data, dim=0)
    for td in data[1:]:
        mismatch = nested.symmetric_difference(_nested_keys(td))
        assert not mismatch, (
            f"concat_tensordict: {sorted(mismatch)[0]!r} is nested in some TensorDicts and not in others"
        )
    out = TensorDict.cat([_without(td, nested) for td in data], dim=0)
    for key in nested:
        out[key] = concat_nested_tensors([td[key] for td in data])
    return out


def chunk_tensordict(td: TensorDict, chunks: int) -> list[TensorDict]:
    """``chunks`` equal parts of ``td`` (its length must divide evenly), jagged columns included."""
    _require_tensordict("chunk_tensordict", td)
    assert len(td) % chunks == 0, f"chunk_tensordict: {len(td)} rows do not split into {chunks} equal chunks"
    nested = _nested_keys(td)
    parts = list(_without(td, nested).chunk(chunks=chunks))
    size = len(td) // chunks
    for key in nested:
        column = td[key]
        rows = _rows(column)
        for number, part in enumerate(parts):
            part[key] = nested_tensor_from_tensor_list(rows[number * size : (number + 1) * size], ragged_idx=_ragged_idx(column))
    return parts


def _mini_batches(tensordict: TensorDict, index_batches: Iterable[torch.Tensor], epochs: int) -> Iterator[TensorDict]:
    for _ in range(epochs):
        for indices in index_batches:
            yield index_select_tensor_dict(tensordict, indices)


def make_iterator(
    tensordict: TensorDict,
    mini_batch_size: int,
    epochs: int,
    seed: int | None = None,
    dataloader_kwargs: dict[str, Any] | None = None,
) -> Iterator[TensorDict]:
    """Mini-batches of ``mini_batch_size`` rows for ``epochs`` passes; ``dataloader_kwargs`` go to the
    ``DataLoader`` that draws the row indices (``shuffle=True`` with ``seed`` is reproducible)."""
    from torch.utils.data import DataLoader

    rows = tensordict.batch_size[0]
    assert rows % mini_batch_size == 0, f"make_iterator: {rows} rows do not split into mini-batches of {mini_batch_size}"
    if dataloader_kwargs is None:
        dataloader_kwargs = {}
    assert isinstance(dataloader_kwargs, dict), (
        f"make_iterator: dataloader_kwargs must be a dict, got {type(dataloader_kwargs).__name__}"
    )
    # A DataLoader over row numbers, not over the rows: its samplers (shuffle, drop_last, ...) and a
    # seeded generator give the order; the rows are then taken from the TensorDict in one selection.
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    index_batches = DataLoader(
        dataset=torch.arange(rows),
        batch_size=mini_batch_size,
        collate_fn=torch.stack,
        generator=generator,
        **dataloader_kwargs,
    )
    return _mini_batches(tensordict, index_batches, epochs)


def _assert_same_entry(key: str, first: Any, second: Any) -> None:
    assert type(first) is type(second), (
        f"assert_tensordict_eq: {key!r} has type {type(first).__name__} in the first, {type(second).__name__} in the second"
    )
    if not isinstance(first, torch.Tensor):
        assert first == second, f"assert_tensordict_eq: {key!r} differs: {first!r} vs {second!r}"
        return
    assert first.is_nested == second.is_nested, f"assert_tensordict_eq: {key!r} is nested in only one of them"
    if not first.is_nested:
        assert torch.all(torch.eq(first, second)).item(), f"assert_tensordict_eq: {key!r} differs"
        return
    rows1, rows2 = first.unbind(), second.unbind()
    assert len(rows1) == len(rows2), f"assert_tensordict_eq: nested {key!r} has {len(rows1)} rows vs {len(rows2)}"
    for row, (a, b) in enumerate(zip(rows1, rows2, strict=True)):
        assert torch.equal(a, b), f"assert_tensordict_eq: nested {key!r} differs in row {row}"


def assert_tensordict_eq(tensordict1: TensorDict, tensordict2: TensorDict) -> None:
    """Raises ``AssertionError`` unless both hold the same keys with equal values of the same types."""
    keys1, keys2 = set(tensordict1.keys()), set(tensordict2.keys())
    assert keys1 == keys2, (
        f"assert_tensordict_eq: keys only in the first {sorted(keys1 - keys2)}, only in the second {sorted(keys2 - keys1)}"
    )
    for key in tensordict1.keys():
        _assert_same_entry(key, tensordict1[key], tensordict2[key])


# -- keys --------------------------------------------------------------------------------------------


def get(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """``key``'s value as a caller wants it: a tensor, a list (per-row objects) or the metadata value."""
    return _native(tensordict.get(key)) if key in tensordict else default


def pop(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """Like :func:`get`, and removes ``key``."""
    return _native(tensordict.pop(key)) if key in tensordict.keys() else default


def _split_by_kind(tensordict: TensorDict, keys: Iterable[str], take: bool) -> TensorDict:
    columns: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for key in keys:
        if key not in tensordict.keys():
            raise KeyError(f"key {key} not in tensordict")
        value = tensordict.pop(key) if take else tensordict.get(key)
        if isinstance(value, NonTensorData):
            metadata[key] = value if take else value.data
        else:
            columns[key] = _native(value)
    return get_tensordict(columns, metadata)


def get_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """A new TensorDict with ``keys`` only (``KeyError`` for a missing one)."""
    return _split_by_kind(tensordict, keys, take=False)


def pop_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """Removes ``keys`` from ``tensordict`` and returns them as a new TensorDict."""
    return _split_by_kind(tensordict, keys, take=True)


# -- padding -----------------------------------------------------------------------------------------


def pad_to_divisor(data: TensorDict, size_divisor: int) -> tuple[TensorDict, int]:
    """``data`` grown to a multiple of ``size_divisor`` rows by repeating its rows from the start (as often
    as needed); and the number of rows added."""
    _require_tensordict("pad_to_divisor", data)
    length = len(data)
    pad_size = -length % size_divisor
    if pad_size == 0:
        if length == 0:
            logger.warning("pad_to_divisor: the TensorDict is empty, nothing to pad")
        return data, 0
    whole_copies, rest = divmod(pad_size, length)
    parts = [data] * (1 + whole_copies)
    if rest:
        parts.append(data[:rest])
    return torch.cat(parts), pad_size


def unpad(data: TensorDict, pad_size: int) -> TensorDict:
    """The rows :func:`pad_to_divisor` did not add."""
    return data[:-pad_size] if pad_size != 0 else data


def contiguous(data: TensorDict) -> TensorDict:
    """A new TensorDict with contiguous tensors (writable in place); stacks and metadata are kept as they
    are (``TensorDict.contiguous`` would turn metadata into stacks)."""
    columns: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for key in data.keys():
        value = data.get(key)
        if isinstance(value, NonTensorData):
            metadata[key] = value
            continue
        assert isinstance(value, torch.Tensor | NonTensorStack), (
            f"contiguous: {key!r} has type {type(value).__name__}, expected a tensor, NonTensorStack or NonTensorData"
        )
        columns[key] = value if isinstance(value, NonTensorStack) else value.contiguous()
    return get_tensordict(tensor_dict=columns, non_tensor_dict=metadata)


def maybe_fix_3d_position_ids(data: TensorDict) -> None:
    """3-d jagged ``position_ids`` (mRoPE: ``[B, 4, *seq]``) are ragged in their last dimension; a
    consolidated-and-pickled TensorDict loses that, so it is set again."""
    position_ids = data.get("position_ids", None)
    if _is_nested(position_ids) and position_ids.dim() == 3:
        data["position_ids"]._ragged_idx = 2


def _column_from_values(values: list[Any]) -> Any:
    if not all(isinstance(value, torch.Tensor) for value in values):
        return NonTensorStack(*values)
    if all(value.shape == values[0].shape for value in values):
        return torch.stack(values)
    return torch.nested.as_nested_tensor(values, layout=torch.jagged)


def list_of_dict_to_tensordict(list_of_dicts: list[dict[str, Any]]) -> TensorDict:
    """One row per dict: same-shape tensors stack, tensors of different shapes become a jagged column,
    anything else a ``NonTensorStack``. Needs tensordict 0.10 or later."""
    import tensordict
    from packaging.version import parse

    assert parse(tensordict.__version__) >= parse("0.10"), (
        f"list_of_dict_to_tensordict: non-tensor rows need tensordict >= 0.10, found {tensordict.__version__}"
    )
    assert len(list_of_dicts) > 0, "list_of_dict_to_tensordict: no rows given"
    columns = {key: _column_from_values([row[key] for row in list_of_dicts]) for key in list_of_dicts[0]}
    return TensorDict(columns, batch_size=[len(list_of_dicts)])
