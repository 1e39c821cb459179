"""The disk fallback's format, in one process: a trained model's and optimizer's state written with
torch.distributed.checkpoint comes back bit-identical into a rank that has only just been initialised
(whose optimizer holds no state yet to load into)."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from supervisor.core.state_tree import (
    from_wire,
    host_copy,
    join_tensors,
    split_tensors,
    state_digest,
    state_nbytes,
    to_wire,
)
from supervisor.core.worker.state_endpoints import _save_disk, load_disk_state


class TrainedRank:
    """The state contract of a rank (state_dict / load_state_dict) over a model and its Adam."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self._rank = 1
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.step = 0

    def train(self, steps: int) -> None:
        for step in range(steps):
            x = torch.randn(16, 4, generator=torch.Generator().manual_seed(step))
            self.optimizer.zero_grad()
            self.model(x).pow(2).mean().backward()
            self.optimizer.step()
            self.step += 1

    def state_dict(self) -> dict:
        return {"step": self.step, "model": self.model.state_dict(), "optim": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])


def test_split_and_join_keep_int_keys_containers_and_plain_values():
    state = {"step": 3, "optim": {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}, "t": (torch.zeros(1), "x")}
    tensors, skeleton = split_tensors(state)
    assert sorted(tensors) == ["0", "1"]
    assert state_digest(join_tensors(skeleton, {k: v.clone() for k, v in tensors.items()})) == state_digest(state)


def test_a_trained_state_on_disk_loads_bit_exact_into_a_fresh_rank(tmp_path):
    trained = TrainedRank()
    trained.train(5)
    state = host_copy(trained.state_dict())
    digest = state_digest(state)
    _save_disk(str(tmp_path), "actor", 5, 1, state, digest, state_nbytes(state))
    fresh = TrainedRank()  # as a replacement after init: its Adam has no state
    assert not fresh.optimizer.state_dict()["state"]
    assert load_disk_state(fresh, str(tmp_path), "actor", 5, 1, digest)["digest"] == digest
    trained.train(3)
    fresh.train(3)  # and trains on exactly as the original does
    assert state_digest(fresh.state_dict()) == state_digest(trained.state_dict())


def test_the_wire_form_round_trips_every_dtype_and_shape_and_shares_the_copys_memory():
    """What a snapshot puts into the object store: the host copy's memory as uint8 arrays (no copy),
    and back into tensors bit-identical, whatever their dtype, shape, strides or emptiness; the
    skeleton names dtypes as text, so a keeper unpickles it without torch."""
    rank = TrainedRank()
    rank.train(2)
    state = {
        **rank.state_dict(),
        "half": torch.randn(3, 5).to(torch.bfloat16),
        "scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.zeros(0, 4),
        "flags": torch.tensor([True, False]),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),
    }
    copy = host_copy(state)
    wire = to_wire(copy)
    assert all(isinstance(a, np.ndarray) and a.dtype == np.uint8 for a in wire.arrays.values())
    shared = wire.arrays[next(iter(wire.arrays))]
    assert np.shares_memory(shared, next(iter(split_tensors(copy)[0].values())).numpy().view(np.uint8))
    assert "torch" not in pickle.dumps(wire.skeleton).decode("latin-1")
    back = from_wire(pickle.loads(pickle.dumps(wire, protocol=5)))
    assert state_digest(back) == state_digest(state)
    assert back["half"].dtype is torch.bfloat16 and back["scalar"].shape == () and back["empty"].shape == (0, 4)


def test_a_reused_host_copy_writes_over_its_buffers_and_equals_a_fresh_one():
    rank = TrainedRank()
    rank.train(1)
    first = host_copy(rank.state_dict())
    buffer = first["model"]["0.weight"]
    rank.train(1)
    again = host_copy(rank.state_dict(), first)
    assert again["model"]["0.weight"] is buffer
    assert state_digest(again) == state_digest(host_copy(rank.state_dict()))
