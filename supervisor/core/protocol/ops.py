"""DataProto's key and row operations (select, pop, rename, union; index, chunk, split, concat,
repeat, pad, iterate), as a base class of :class:`~supervisor.core.protocol.data.DataProto`.

They act on ``batch`` and ``non_tensor_batch`` together, so row ``i`` of every column always
describes the same sample; ``meta_info`` is shared with the result unless stated otherwise.
"""

from __future__ import annotations

import copy
import reprlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Self, TypeVar

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from .equality import _find_meta_conflict, _find_numpy_conflict, _find_tensor_conflict, _values_equal
from .protocol_config import DataProtoError

__all__ = ["DataProtoOperations"]

_short_repr = reprlib.Repr()
_short_repr.maxstring = 60
_short_repr.maxother = 60


def _select_keys(field: str, keys: Any, mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` itself when ``keys`` is None, else a new dict of those keys (each must exist)."""
    if keys is None:
        return mapping
    _check_known_keys(field, keys, mapping)
    wanted = set(keys)
    return {key: value for key, value in mapping.items() if key in wanted}


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


def _concat_rows(parts: Sequence[DataProtoOperations]) -> tuple[TensorDict | None, dict[str, np.ndarray]]:
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


_DataProtoT = TypeVar("_DataProtoT", bound="DataProtoOperations")


class DataProtoOperations:
    """The key and row operations of :class:`~supervisor.core.protocol.data.DataProto`, which is the
    only class built on this one. The annotations say ``Self``: every operation returns the caller's
    own type (``type(self)(...)``)."""

    batch: TensorDict | None
    non_tensor_batch: dict[str, np.ndarray]
    meta_info: dict[str, Any]

    # ----------------------------------------------------------- key operations

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> Self:
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

        non_tensor = _select_keys("non_tensor_batch", non_tensor_batch_keys, self.non_tensor_batch)
        meta = _select_keys("meta_info", meta_info_keys, self.meta_info)

        if deepcopy:
            non_tensor = copy.deepcopy(non_tensor)
            meta = copy.deepcopy(meta)
        return type(self)(batch=sub_batch, non_tensor_batch=non_tensor, meta_info=meta)

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> Self:
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
    ) -> Self:
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

    def union(self, other: Self) -> Self:
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
        # DataProto is the only class built on DataProtoOperations: this is "other is a DataProto".
        if not isinstance(other, DataProtoOperations):
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

    def select_idxs(self, idxs: list[int] | list[bool] | np.ndarray | torch.Tensor) -> Self:
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

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> Self:
        """Rows ``start:end:step`` as a DataProto of views (``data[a:b]`` calls this)."""
        window = slice(start, end, step)
        batch = self.batch[window] if self.batch is not None else None
        non_tensor = {key: value[window] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def chunk(self, chunks: int) -> list[Self]:
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

    def split(self, split_size: int) -> list[Self]:
        """Consecutive pieces of ``split_size`` rows (the last may be shorter) sharing ``meta_info``.

        Raises:
            DataProtoError: ``split_size`` is not positive.
        """
        if split_size < 1:
            raise DataProtoError(f"split_size must be a positive int, got {split_size}")
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[_DataProtoT]) -> _DataProtoT:
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

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> Self:
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

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> Self:
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
                raise DataProtoError(
                    f"'{key}' has {value.shape[1]} columns, not divisible by n_split={n_split}"
                )
            return value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])

        batch = None
        if self.batch is not None:
            batch = TensorDict(
                {
                    k: unfold(k, v, lambda t: torch.repeat_interleave(t, n_split, dim=0))
                    for k, v in self.batch.items()
                },
                batch_size=(self.batch.batch_size[0] * n_split,),
                device=self.batch.device,
            )
        non_tensors = {
            k: unfold(k, v, lambda a: np.repeat(a, n_split, axis=0)) for k, v in self.non_tensor_batch.items()
        }
        return type(self)(batch=batch, non_tensor_batch=non_tensors, meta_info=self.meta_info)

    def sample_level_repeat(self, repeat_times: int | Sequence[int] | torch.Tensor | np.ndarray) -> Self:
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
    ) -> Iterator[Self]:
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

        def epochs_of_batches() -> Iterator[Self]:
            for _ in range(epochs):
                yield from loader

        return epochs_of_batches()
