"""Heartbeats: every supervised actor's own thread writes a counter to the GCS key-value store.

This is how the supervisor sees a rank that is alive but stuck without running anything on the
actor's call path. A call-based probe would need a concurrency group of its own to be answered while
a user call runs, and any concurrency group makes Ray run *every* call of the actor on a thread
pool instead of its main thread, which costs each of the user's calls (bench/detection_cost.py).
The thread needs the GIL and the process's GCS connection, as a probe did: a stopped process
(SIGSTOP), one stuck in C code holding the GIL or one cut off from the GCS stops beating; one
busy in a long call does not.

A beat is ``{"seq", "node", "pid", "rank"}`` under the actor's id in :data:`HEARTBEAT_NAMESPACE`.
The supervisor compares ``seq`` with what it saw before, on its own clock, so clocks of different
nodes are never compared. One put per actor every :data:`HEARTBEAT_PERIOD_S` (1,024 ranks: about a
thousand small puts a second, which the GCS's in-memory store serves well).

This module runs inside every actor: it stays light (no torch).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...retrying import Backoff, poll

__all__ = [
    "Beat",
    "HEARTBEAT_NAMESPACE",
    "HEARTBEAT_PERIOD_S",
    "start_heartbeat",
    "read_beats",
    "clear_beats",
    "clear_beats_once_ended",
    "clear_beats_once_ended_later",
    "stale_beats",
    "wait_for_beat",
]

HEARTBEAT_NAMESPACE = "ray_supervisor_heartbeat"
# How often a rank beats. The supervisor calls a rank hung after probe_timeout_s without a new beat,
# so that must be a few periods (the spec checks it is at least two).
HEARTBEAT_PERIOD_S = 1.0
# How long clearing the beats of actors just killed waits for their processes to end: briefly where
# a caller waits (a teardown, the owner fence), longer on a thread of its own. A hung rank ends when
# its raylet's kill timer fires (seconds); one on a lost node once the GCS declares the node dead.
KILLED_ENDED_WAIT_S = 3.0
KILLED_ENDED_WAIT_LATER_S = 60.0


@dataclass(frozen=True)
class Beat:
    """One heartbeat of an actor: a counter that grows, and where the actor runs."""

    seq: int
    node_id: str
    pid: int
    rank: int | None

    def encode(self) -> bytes:
        return json.dumps({"seq": self.seq, "node": self.node_id, "pid": self.pid, "rank": self.rank}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Beat:
        doc = json.loads(raw)
        return cls(int(doc["seq"]), str(doc["node"]), int(doc["pid"]), None if doc.get("rank") is None else int(doc["rank"]))


def _gcs() -> Any:
    from ray.experimental import internal_kv

    if not internal_kv._internal_kv_initialized():
        raise ConnectionError("not connected to Ray: heartbeats are kept in its GCS")
    return internal_kv.internal_kv_get_gcs_client()


class _Heartbeat(threading.Thread):
    def __init__(self, actor_id: str, node_id: str, rank_of: Callable[[], int | None]) -> None:
        super().__init__(name="supervisor-heartbeat", daemon=True)
        self.actor_id, self.node_id, self.rank_of = actor_id, node_id, rank_of

    def run(self) -> None:
        seq = 0
        key = self.actor_id.encode()
        while True:
            seq += 1
            try:
                beat = Beat(seq, self.node_id, os.getpid(), self.rank_of())
                _gcs().internal_kv_put(key, beat.encode(), True, HEARTBEAT_NAMESPACE.encode())
            except Exception:  # the GCS is away for now: the supervisor sees the missing beats
                pass
            time.sleep(HEARTBEAT_PERIOD_S)


_started: _Heartbeat | None = None
_start_lock = threading.Lock()


def start_heartbeat(rank_of: Callable[[], int | None]) -> dict[str, Any]:
    """Start this actor process's heartbeat thread (once; later calls find it running).

    Args:
        rank_of: the rank to report in each beat (a standby has none until it takes one over).

    Returns:
        ``{"actor_id", "node_id", "pid"}``.
    """
    import ray

    global _started
    ctx = ray.get_runtime_context()
    with _start_lock:
        if _started is None:
            _started = _Heartbeat(ctx.get_actor_id(), ctx.get_node_id(), rank_of)
            _started.start()
        return {"actor_id": _started.actor_id, "node_id": _started.node_id, "pid": os.getpid()}


def read_beats(actor_ids: Iterable[str]) -> dict[str, Beat]:
    """The last beat of each of ``actor_ids`` that has one (one GCS request)."""
    keys = [a.encode() for a in actor_ids]
    if not keys:
        return {}
    found = _gcs().internal_kv_multi_get(keys, HEARTBEAT_NAMESPACE.encode())
    return {key.decode(): Beat.decode(raw) for key, raw in found.items() if raw}


def clear_beats(actor_ids: Iterable[str]) -> None:
    """Delete the beats of actors that are gone (a dead actor's last beat stays until then)."""
    gcs = _gcs()
    for actor_id in actor_ids:
        gcs.internal_kv_del(actor_id.encode(), False, HEARTBEAT_NAMESPACE.encode())


def clear_beats_once_ended(actor_ids: Iterable[str], timeout_s: float = KILLED_ENDED_WAIT_S) -> list[str]:
    """Delete the beats of actors just killed, once their processes have ended (at most ``timeout_s``).

    ``ray.kill`` returns before the actor's process has ended, and its heartbeat thread may put one
    more beat after a delete made right away: 16 of 240 actors killed and cleared at once left a beat
    behind. Waiting for the GCS to have the actor DEAD is not enough under load (3 of 320 with three
    busy loops beside them); waiting for its raylet to report the worker gone left none of 320.

    Returns:
        The ids whose end was not seen by the deadline (their beats are deleted all the same).
    """
    ids = list(dict.fromkeys(actor_ids))
    waiting = ids

    def all_ended() -> bool:
        nonlocal waiting
        ended = _ended(waiting)
        waiting = [a for a in waiting if a not in ended]
        return not waiting

    if waiting:
        poll(all_ended, Backoff(0.01, 0.2), timeout_s=timeout_s)
    clear_beats(ids)
    return waiting


def clear_beats_once_ended_later(actor_ids: Iterable[str]) -> None:
    """:func:`clear_beats_once_ended` on a thread of its own, for callers that must not wait (a
    replacement, whose recovery time counts). A beat left when this process exits first is for
    ``supervisor gc``."""
    ids = list(actor_ids)
    if ids:
        threading.Thread(target=_clear_quietly, args=(ids,), name="supervisor-clear-beats", daemon=True).start()


def _clear_quietly(actor_ids: list[str]) -> None:
    try:
        clear_beats_once_ended(actor_ids, KILLED_ENDED_WAIT_LATER_S)
    except Exception as exc:  # Ray went away meanwhile: the beats are for `supervisor gc`
        from ...errors import first_line
        from ...observability.log import get_logger

        get_logger("heartbeat").debug("heartbeats_not_cleared", actors=len(actor_ids), error=first_line(exc))


def _ended(actor_ids: list[str]) -> set[str]:
    """Those of ``actor_ids`` whose process can beat no more: unknown to the GCS, dead before a worker
    ran it, dead with its worker reported gone by its raylet, or dead on a node that is not alive."""
    import ray
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    accessor = state._connect_and_get_accessor()
    ended: set[str] = set()
    alive_nodes: set[bytes] | None = None
    for actor_id in actor_ids:
        raw = accessor.get_actor_info(ray.ActorID(bytes.fromhex(actor_id)))
        if raw is None:
            ended.add(actor_id)
            continue
        actor = gcs_pb2.ActorTableData.FromString(raw)
        if actor.state != gcs_pb2.ActorTableData.DEAD:
            continue
        worker_id = actor.address.worker_id
        if not worker_id:
            ended.add(actor_id)
            continue
        # A core worker registers before it runs the actor's constructor, which starts the beats.
        worker = accessor.get_worker_info(ray.WorkerID(worker_id))
        if worker is None or not gcs_pb2.WorkerTableData.FromString(worker).is_alive:
            ended.add(actor_id)
            continue
        if alive_nodes is None:  # (a node long dead may have left the GCS's table)
            alive_nodes = {bytes.fromhex(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}
        if actor.address.node_id not in alive_nodes:
            ended.add(actor_id)
    return ended


def stale_beats() -> list[str]:
    """Actor ids whose beat outlived the actor: it is dead, or the GCS no longer knows it.

    A group deletes the beats of the actors it kills or replaces; the beats of actors that ended
    otherwise (their daemon was SIGKILLed, and Ray ended the actors it owned) stay until
    ``supervisor gc`` removes them with this.
    """
    from ray._private.state import state

    ids = [key.decode() for key in _gcs().internal_kv_keys(b"", HEARTBEAT_NAMESPACE.encode())]
    if not ids:
        return []
    live = {actor_id for actor_id, info in state.actor_table(None).items() if info.get("State") != "DEAD"}
    return sorted(set(ids) - live)


def wait_for_beat(handle: Any, timeout_s: float = 30.0) -> Beat:
    """The first beat of ``handle``'s actor (its pid and node), waiting while it starts.

    Raises:
        TimeoutError: no beat within ``timeout_s`` (the actor is not supervised, or not up).
    """
    actor_id = handle._actor_id.hex()
    beat = poll(lambda: read_beats([actor_id]).get(actor_id), Backoff.fixed(0.05), timeout_s=timeout_s)
    if beat is None:
        raise TimeoutError(f"actor {actor_id} sent no heartbeat within {timeout_s:g}s")
    return beat
