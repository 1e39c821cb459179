"""The rank's side of state recovery: what the supervisor's state calls do inside a worker.

A stateful worker implements torch's contract, ``state_dict()`` and ``load_state_dict(state)``
(nested dicts of tensors and plain values). A snapshot copies the state to host memory at once and
returns; a thread of the rank then puts the copy into the object store and hands it to the keepers
(and, when due, writes it to disk with ``torch.distributed.checkpoint``) while the rank goes on with
its next call. One snapshot is in flight per rank at a time: the next one waits for it, so a rank
never holds more than one copy beyond its live state.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigError, SupervisorError
from ..state_tree import (
    WireState,
    empty_tensors,
    from_wire,
    host_copy,
    join_tensors,
    split_tensors,
    state_digest,
    state_nbytes,
    to_wire,
)

__all__ = [
    "StateMismatchError",
    "DISK_MARKER",
    "disk_shard_path",
    "start_snapshot",
    "wait_snapshot",
    "capture_state",
    "load_state",
    "load_disk_state",
    "state_info",
]

# Written last into a rank's disk snapshot directory: the snapshot is complete once it exists.
DISK_MARKER = "SUPERVISOR_SNAPSHOT.json"
# The state's containers and plain values, with a slot where each tensor was (the tensors are DCP's).
SKELETON_FILE = "skeleton.pkl"


class StateMismatchError(SupervisorError):
    """A rank's state after a load does not have the digest of the state it was given."""


def disk_shard_path(disk_dir: str, group: str, step: int, rank: int) -> str:
    return os.path.join(disk_dir, group, f"step-{step:08d}", f"rank-{rank:05d}")


def _contract(worker: Any) -> None:
    for name in ("state_dict", "load_state_dict"):
        if not callable(getattr(worker, name, None)):
            raise ConfigError(
                f"{type(worker).__name__} declares stateful ranks but has no {name}(): a stateful worker "
                "implements state_dict() and load_state_dict(state) (torch's names)"
            )


class _SnapshotThread:
    """The background half of one snapshot: put, hand to the keepers, write to disk."""

    def __init__(self, group: str, step: int, rank: int, state: Any, keepers: Sequence[Any], disk_dir: str | None) -> None:
        self.group, self.step, self.rank, self.state, self.keepers, self.disk_dir = group, step, rank, state, keepers, disk_dir
        self.error: str | None = None
        self.digest: str | None = None  # of the state at this step (replicas compare theirs)
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, name=f"snapshot-{group}-{step}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import ray

        started = time.perf_counter()
        try:
            digest, nbytes = state_digest(self.state), state_nbytes(self.state)
            self.digest = digest
            if self.keepers:
                ref = ray.put(to_wire(self.state))  # once, for both keepers: each holds it in place in its node's store
                ray.get([k.store.remote(self.group, self.step, self.rank, ref, digest, nbytes) for k in self.keepers])
                del ref
            if self.disk_dir:
                _save_disk(self.disk_dir, self.group, self.step, self.rank, self.state, digest, nbytes)
        except Exception as exc:  # a keeper lost meanwhile: that copy is missing, the inventory shows it
            self.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        finally:
            self.state = None
            self.seconds = time.perf_counter() - started


def _save_disk(disk_dir: str, group: str, step: int, rank: int, state: Any, digest: str, nbytes: int) -> None:
    import torch.distributed.checkpoint as dcp

    path = disk_shard_path(disk_dir, group, step, rank)
    os.makedirs(path, exist_ok=True)
    tensors, skeleton = split_tensors(state)
    dcp.save(tensors, checkpoint_id=path, no_dist=True)  # each rank its own directory: no collective
    with open(os.path.join(path, SKELETON_FILE), "wb") as f:
        pickle.dump(skeleton, f)
    tmp = os.path.join(path, DISK_MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step, "rank": rank, "digest": digest, "nbytes": nbytes}, f)
    os.replace(tmp, os.path.join(path, DISK_MARKER))


def start_snapshot(worker: Any, group: str, step: int, keepers: Sequence[Any], disk_dir: str | None) -> dict[str, Any]:
    """Copy the worker's state to host memory and hand it to ``keepers`` (and disk) in the background.
    With no keepers and no ``disk_dir`` only its digest is taken (a replica's, to compare with rank 0's).

    The copy goes into the previous snapshot's buffers (kept for it: a fresh allocation of the same
    size costs several times the copy), once that snapshot's hand-off is over.

    Returns at once after the copy, with the time the rank was held (the copy, and any wait for the
    previous hand-off) and the previous snapshot's outcome.
    """
    _contract(worker)
    started = time.perf_counter()
    previous = wait_snapshot(worker)
    state = host_copy(worker.state_dict(), getattr(worker, "_supervisor_snapshot_buffer", None))
    worker._supervisor_snapshot_buffer = state
    worker._supervisor_snapshot_thread = _SnapshotThread(group, step, worker._rank, state, keepers, disk_dir)
    return {"held_s": time.perf_counter() - started, "previous": previous}


def wait_snapshot(worker: Any, timeout_s: float | None = None) -> dict[str, Any] | None:
    """Wait for the snapshot in flight (if any); its step, digest, error and seconds."""
    current: _SnapshotThread | None = getattr(worker, "_supervisor_snapshot_thread", None)
    if current is None:
        return None
    current.thread.join(timeout_s)
    done = not current.thread.is_alive()
    return {"step": current.step, "digest": current.digest if done else None, "error": current.error, "seconds": current.seconds, "done": done}


def capture_state(worker: Any) -> tuple[Any, str]:
    """A live copy of the worker's state and its digest (the source of a peer recovery)."""
    _contract(worker)
    state = host_copy(worker.state_dict())
    return state, state_digest(state)


def load_state(worker: Any, state: Any, digest: str) -> dict[str, Any]:
    """Load ``state`` and check the result has ``digest``.

    Raises:
        StateMismatchError: the loaded state differs from the one given (a class whose
            ``load_state_dict`` drops or transforms something).
    """
    _contract(worker)
    started = time.perf_counter()
    worker.load_state_dict(from_wire(state) if isinstance(state, WireState) else state)
    got = state_digest(worker.state_dict())
    if got != digest:
        raise StateMismatchError(f"rank {worker._rank}: state digest {got} after load, expected {digest}")
    return {"digest": got, "seconds": time.perf_counter() - started}


def load_disk_state(worker: Any, disk_dir: str, group: str, step: int, rank: int, digest: str) -> dict[str, Any]:
    """Load a disk snapshot (``rank``'s directory of ``step``) into the worker, then check the digest.

    The state is rebuilt from the skeleton saved beside the tensors, not from the worker's current
    state: a freshly initialised rank has no optimizer state yet to load into.
    """
    import torch.distributed.checkpoint as dcp

    _contract(worker)
    path = disk_shard_path(disk_dir, group, step, rank)
    with open(os.path.join(path, SKELETON_FILE), "rb") as f:
        skeleton = pickle.load(f)  # written by this job's own ranks (see _save_disk)
    tensors = empty_tensors(skeleton)
    dcp.load(tensors, checkpoint_id=path, no_dist=True)  # loads in place into the templates
    return load_state(worker, join_tensors(skeleton, tensors), digest)


def state_info(worker: Any) -> dict[str, Any]:
    """The worker's state digest and size now."""
    _contract(worker)
    state = worker.state_dict()
    return {"rank": worker._rank, "digest": state_digest(state), "nbytes": state_nbytes(state)}
