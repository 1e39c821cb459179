"""Deep equality of DataProto contents, and the key conflicts that union and concat refuse.

NaN equals NaN throughout: two batches holding the same NaNs are the same batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from .protocol_config import DataProtoError


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
