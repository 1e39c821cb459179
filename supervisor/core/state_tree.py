"""Operations on a state: a nested dict of tensors and plain values (torch's ``state_dict`` shape).

Run inside the rank (and the keepers), so they import torch only when a state holds tensors.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "host_copy",
    "state_digest",
    "state_nbytes",
    "TensorSlot",
    "split_tensors",
    "join_tensors",
    "empty_tensors",
    "WireState",
    "to_wire",
    "from_wire",
]


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "untyped_storage")


def host_copy(state: Any, reuse: Any = None) -> Any:
    """A copy in host memory that shares nothing with ``state``: the rank goes on training while the
    copy is sent (tensors are copied to CPU, arrays copied, other values deep-copied).

    ``reuse``: an earlier copy nothing else holds any more; its tensors of the same place, dtype and
    shape are written over instead of allocated (a fresh 64 MiB buffer costs page faults: about 5x
    the copy itself)."""
    if isinstance(state, dict):
        earlier = reuse if isinstance(reuse, dict) else {}
        return {k: host_copy(v, earlier.get(k)) for k, v in state.items()}
    if isinstance(state, list | tuple):
        earlier = list(reuse) if type(reuse) is type(state) and len(reuse) == len(state) else [None] * len(state)
        items = [host_copy(v, e) for v, e in zip(state, earlier, strict=True)]
        return type(state)(items) if isinstance(state, list) or type(state) is tuple else type(state)(*items)
    if _is_tensor(state):
        source = state.detach()
        if _is_tensor(reuse) and reuse.device.type == "cpu" and reuse.dtype == source.dtype and reuse.shape == source.shape and reuse.is_contiguous():
            return reuse.copy_(source)
        return source.to("cpu", copy=True)
    return copy.deepcopy(state)


def _leaves(state: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(state, dict):
        for key in sorted(state, key=repr):
            yield from _leaves(state[key], f"{path}/{key!r}")
    elif isinstance(state, list | tuple):
        for i, value in enumerate(state):
            yield from _leaves(value, f"{path}[{i}]")
    else:
        yield path, state


def state_digest(state: Any) -> str:
    """A short hash of every leaf (its path, and a tensor's dtype, shape and bytes): equal digests mean
    bit-identical states."""
    digest = hashlib.sha256()
    for path, value in _leaves(state):
        digest.update(path.encode())
        if _is_tensor(value):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            if tensor.numel():  # the buffer itself: no copy of the bytes
                digest.update(tensor.view(-1).view(dtype=_byte_dtype()).numpy())
        elif hasattr(value, "tobytes") and hasattr(value, "dtype"):  # numpy
            digest.update(f"{value.dtype}{value.shape}".encode())
            digest.update(value.tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:16]


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def state_nbytes(state: Any) -> int:
    """Bytes the state's tensors and arrays take (plain values are negligible and not counted)."""
    total = 0
    for _, value in _leaves(state):
        if _is_tensor(value):
            total += value.numel() * value.element_size()
        elif hasattr(value, "nbytes") and hasattr(value, "dtype"):
            total += int(value.nbytes)
    return total


class TensorSlot:
    """Where a tensor was in a state split by :func:`split_tensors`: its key, shape and dtype."""

    __slots__ = ("key", "shape", "dtype")

    def __init__(self, key: str, shape: tuple[int, ...], dtype: Any) -> None:
        self.key, self.shape, self.dtype = key, shape, dtype

    def __reduce__(self) -> tuple[Any, ...]:
        return (TensorSlot, (self.key, self.shape, self.dtype))


def split_tensors(state: Any) -> tuple[dict[str, Any], Any]:
    """The state's tensors under flat string keys, and its skeleton: the state with each tensor
    replaced by its :class:`TensorSlot` (every container and plain value kept as it was, int keys
    included). ``torch.distributed.checkpoint`` stores the first; it would turn an optimizer
    state's int keys into strings, and cannot load into an empty state, so the skeleton goes beside."""
    tensors: dict[str, Any] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            items = [walk(v) for v in value]
            return type(value)(items) if isinstance(value, list) or type(value) is tuple else type(value)(*items)
        if _is_tensor(value):
            key = str(len(tensors))
            tensors[key] = value
            return TensorSlot(key, tuple(value.shape), value.dtype)
        return value

    return tensors, walk(state)


def join_tensors(skeleton: Any, tensors: dict[str, Any]) -> Any:
    """The state :func:`split_tensors` split (``tensors`` may be freshly loaded copies)."""
    if isinstance(skeleton, dict):
        return {k: join_tensors(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list | tuple):
        items = [join_tensors(v, tensors) for v in skeleton]
        return type(skeleton)(items) if isinstance(skeleton, list) or type(skeleton) is tuple else type(skeleton)(*items)
    if isinstance(skeleton, TensorSlot):
        return tensors[skeleton.key]
    return skeleton


def _slots(skeleton: Any) -> Iterator[TensorSlot]:
    if isinstance(skeleton, dict):
        for v in skeleton.values():
            yield from _slots(v)
    elif isinstance(skeleton, list | tuple):
        for v in skeleton:
            yield from _slots(v)
    elif isinstance(skeleton, TensorSlot):
        yield skeleton


def empty_tensors(skeleton: Any) -> dict[str, Any]:
    """A tensor of the right shape and dtype for every slot of ``skeleton``, under its key: what
    ``torch.distributed.checkpoint`` loads into, in place."""
    import torch

    return {slot.key: torch.empty(slot.shape, dtype=slot.dtype) for slot in _slots(skeleton)}


class WireState:
    """A state as a snapshot travels through the object store: each tensor's bytes as a flat uint8
    numpy array, and the skeleton (slots naming their dtype as text: a keeper never imports torch).

    Numpy arrays are pickle-5 buffers: one copy into the object store, and whoever gets the object
    reads them in place (a keeper holds them without a copy; torch tensors would be pickled into
    bytes, then copied again, then deserialized into a third copy, at every hop)."""

    __slots__ = ("skeleton", "arrays")

    def __init__(self, skeleton: Any, arrays: dict[str, Any]) -> None:
        self.skeleton, self.arrays = skeleton, arrays

    def __reduce__(self) -> tuple[Any, ...]:
        return (WireState, (self.skeleton, self.arrays))


def to_wire(state: Any) -> WireState:
    """``state`` (its tensors in host memory) as a :class:`WireState` sharing their memory."""
    import torch

    tensors, skeleton = split_tensors(state)
    arrays = {k: t.detach().contiguous().reshape(-1).view(torch.uint8).numpy() for k, t in tensors.items()}
    named = {slot.key: TensorSlot(slot.key, slot.shape, str(slot.dtype).removeprefix("torch.")) for slot in _slots(skeleton)}
    return WireState(join_tensors(skeleton, named), arrays)


def from_wire(wire: WireState) -> Any:
    """The state a :class:`WireState` carries, its tensors copied out of the (read-only) object store."""
    import numpy as np
    import torch

    def tensor(slot: TensorSlot) -> Any:
        dtype, data = getattr(torch, slot.dtype), wire.arrays[slot.key]
        if not data.size:  # no bytes to view as the dtype
            return torch.empty(slot.shape, dtype=dtype)
        return torch.from_numpy(np.array(data, copy=True)).view(dtype).reshape(slot.shape)

    return join_tensors(wire.skeleton, {slot.key: tensor(slot) for slot in _slots(wire.skeleton)})
