"""Batches still in the Ray object store (:class:`DataProtoFuture`), and :class:`BatchData`, which
chunks and concatenates every batch kind a group call moves: DataProtos, futures, and TensorDicts
(verl's protocol v2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import ray
from tensordict import TensorDictBase

from .data import DataProto
from .protocol_config import DataProtoError

__all__ = ["BatchData", "DataProtoFuture", "concat_batches"]


def concat_batches(parts: list[Any]) -> Any:
    """What a group's ranks returned, as one batch: TensorDicts (verl's protocol v2, e.g. from a mesh
    dispatch) concatenate with :func:`~supervisor.core.protocol.tensordict_batches.concat_tensordict`, DataProtos
    with :meth:`DataProto.concat`."""
    if parts and all(isinstance(p, TensorDictBase) for p in parts):
        from .tensordict_batches import concat_tensordict

        return concat_tensordict(list(parts))
    return DataProto.concat(parts)


def _take_chunk(data: Any, index: int, chunks: int) -> Any:
    if isinstance(data, TensorDictBase):
        from .tensordict_batches import chunk_tensordict

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
        return (
            isinstance(data, list | tuple)
            and len(data) > 0
            and isinstance(data[0], DataProto | ray.ObjectRef | TensorDictBase)
        )

    def chunk(self, chunks: int) -> Any:
        """The wrapped value in ``chunks`` pieces of its own kind (TensorDict pieces are contiguous)."""
        if isinstance(self._data, TensorDictBase):
            from .tensordict_batches import chunk_tensordict, contiguous

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
