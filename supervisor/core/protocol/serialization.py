"""How a DataProto's TensorDict travels: the pickle codec (numpy views out of band, read-only
receivers that keep views of the object store) and verl's msgpack-friendly tensor encodings."""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensordict
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "receiving_views",
    "serialize_single_tensor",
    "serialize_tensordict",
]

# ------------------------------------------------------------------ pickle codec


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
    # torch warns once that writing to it is undefined: the receiver promised not to.
    with warnings.catch_warnings():
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


# ----------------------------------------------------- verl's plain-data encodings


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
