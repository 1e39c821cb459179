"""Receivers that promise not to write get DataProto tensors as views of the (read-only) buffers they
were sent in, others a writable copy: pickled out of band as Ray does (protocol 5, read-only buffers)."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from supervisor import DataProto
from supervisor.core.protocol import receiving_views


def _through_a_read_only_store(data: DataProto) -> tuple[DataProto, list[memoryview]]:
    """Pickle as Ray does (out-of-band buffers) and read back from read-only memory, as from plasma."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(data, protocol=5, buffer_callback=buffers.append)
    store = [memoryview(bytes(b.raw())).toreadonly() for b in buffers]
    return pickle.loads(payload, buffers=store), store


def _in(tensor: torch.Tensor, store: list[memoryview]) -> bool:
    address = tensor.data_ptr()
    return any(np.frombuffer(m, dtype=np.uint8).ctypes.data <= address < np.frombuffer(m, dtype=np.uint8).ctypes.data + m.nbytes for m in store)


def _data() -> DataProto:
    return DataProto.from_dict(tensors={"ids": torch.arange(4096, dtype=torch.int64).reshape(64, 64)}, non_tensors={"uid": np.arange(64)})


def test_by_default_a_receiver_gets_its_own_writable_copy():
    received, store = _through_a_read_only_store(_data())
    ids = received.batch["ids"]
    assert not _in(ids, store)
    ids += 1  # its own memory
    assert int(ids[0, 0]) == 1


def test_a_read_only_receiver_gets_views_of_the_store():
    received, store = _through_a_read_only_store(_data().for_read_only_receiver())
    assert _in(received.batch["ids"], store) and received.batch["ids"].equal(_data().batch["ids"])
    assert list(received.non_tensor_batch["uid"][:3]) == [0, 1, 2]


def test_inside_receiving_views_every_datapproto_is_a_view_and_a_concat_is_writable_again():
    parts = _data().chunk(4)
    with receiving_views():
        received = [_through_a_read_only_store(p) for p in parts]
    assert all(_in(r.batch["ids"], store) for r, store in received)
    whole = DataProto.concat([r for r, _ in received])
    assert whole.batch["ids"].equal(_data().batch["ids"]) and not any(_in(whole.batch["ids"], s) for _, s in received)
    whole.batch["ids"] += 1
    received_after, store = _through_a_read_only_store(_data())  # outside the block: copies again
    assert not _in(received_after.batch["ids"], store)


def test_the_mark_is_not_left_on_the_senders_object():
    data = _data()
    shared = data.for_read_only_receiver()
    assert shared.batch is data.batch and not getattr(data, "_read_only_receiver", False)
    assert "views" not in data.__getstate__() and shared.__getstate__()["views"] is True
