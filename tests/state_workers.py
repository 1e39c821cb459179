"""A light stateful worker for the state-recovery tests (numpy state, no torch at import).

Each rank's state is a step counter and a vector that every ``train_step`` changes as a pure function
of ``(rank, step)``, so the expected state after any number of steps is known without running it
(:func:`expected_state`), and a step applied twice or skipped shows in the counter.
"""

from __future__ import annotations

import os
import time

import numpy as np

from supervisor import Dispatch, Worker, register
from supervisor.core.state_tree import state_digest


def _values(size: int, rank: int) -> np.ndarray:
    return np.full(size, float(rank), dtype=np.float64)


def _apply(values: np.ndarray, rank: int, step: int, shared: bool) -> np.ndarray:
    who = 0 if shared else rank
    return values * 0.5 + np.sin(np.arange(values.size) + 7 * step + 13 * who)


def expected_state(size: int, rank: int, steps: int, shared: bool) -> dict:
    values = _values(size, 0 if shared else rank)
    for step in range(steps):
        values = _apply(values, rank, step, shared)
    return {"step": steps, "values": values}


class StatefulWorker(Worker):
    """``shared``: every rank computes the same state (replicated); else each its own (sharded)."""

    def __init__(self, size: int = 1024, shared: bool = False, step_s: float = 0.0) -> None:
        super().__init__()
        self.size, self.shared, self.step_s = size, shared, step_s
        self.state: dict | None = None
        self.inits = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> str:
        self.inits += 1
        self.state = {"step": 0, "values": _values(self.size, 0 if self.shared else self.rank)}
        return os.environ["MASTER_PORT"]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train_step(self, step: int) -> int:
        assert self.state is not None
        if step != self.state["step"]:
            raise ValueError(f"rank {self.rank}: expected step {self.state['step']}, got {step}")
        time.sleep(self.step_s)
        self.state = {"step": step + 1, "values": _apply(self.state["values"], self.rank, step, self.shared)}
        return self.state["step"]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, mutates_state=True)
    def update_once(self) -> None:
        """A change of state that succeeds only in a rank's first incarnation: its replay fails."""
        assert self.state is not None
        if self.inits > 1:
            raise RuntimeError(f"rank {self.rank}: update_once ran after a re-initialisation")
        self.state = {**self.state, "values": self.state["values"] * 2}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def perturb(self, ranks: list[int]) -> None:
        """Change the state of ``ranks`` without a step: a replica that silently diverged."""
        assert self.state is not None
        if self.rank in ranks:
            self.state = {**self.state, "values": self.state["values"] + 1e-9}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def info(self) -> dict:
        assert self.state is not None
        return {"rank": self.rank, "step": self.state["step"], "digest": state_digest(self.state), "pid": os.getpid(), "inits": self.inits}

    def state_dict(self) -> dict:
        assert self.state is not None
        return self.state

    def load_state_dict(self, state: dict) -> None:
        self.state = {"step": int(state["step"]), "values": np.array(state["values"], copy=True)}


class StatelessWorker(StatefulWorker):
    """Declared stateful but without the contract (the error names what is missing)."""

    state_dict = None  # type: ignore[assignment]
