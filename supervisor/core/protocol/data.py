"""The :class:`DataProto` container: its fields, construction and conversion, inspection, devices and
pickling. Its key and row operations live in :mod:`supervisor.core.protocol.ops`; the data model is
described in :mod:`supervisor.core.protocol`."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from .ops import DataProtoOperations
from .protocol_config import DataProtoConfig, DataProtoError
from .serialization import _RECEIVE_VIEWS, _decode_tensordict, _encode_tensordict

__all__ = ["DataProto", "DataProtoItem"]


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
class DataProto(DataProtoOperations):
    """A batch of samples: tensors, per-sample Python data and batch-level metadata.

    See :mod:`supervisor.core.protocol` for the data model. Construction checks consistency (see
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
        shared = type(self)(
            batch=self.batch, non_tensor_batch=self.non_tensor_batch, meta_info=self.meta_info
        )
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
