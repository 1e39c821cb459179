"""``supervisor logs NAME GROUP RANK``: a rank's actor log, the current actor's or (``--previous``)
the one it replaced, as ``kubectl logs [-p]`` shows a container's.

The actor comes from the supervisor's record (the rank's actor name, in the supervisor's namespace)
and Ray's actor table. Its log is Ray's own worker file (``worker-*-<pid>.out`` or ``.err`` in the
node's session log directory): read directly when that node runs on this machine (an embedded Ray,
a test cluster, the head), else through Ray's log API (``ray.util.state.get_log``), which needs the
cluster's dashboard. Reading needs a Ray connection; selecting lines is pure.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SupervisorError, first_line

__all__ = [
    "LogStream", "RankActor", "LogsUnavailableError", "find_rank_actor", "read_log", "read_through_log_api", "local_log_file",
    "last_lines", "is_ray_marker",
]  # fmt: skip

FOLLOW_POLL_S = 0.5


class LogStream(enum.StrEnum):
    OUT = "out"  # the worker's stdout (print)
    ERR = "err"  # its stderr: Python logging's default, tracebacks, Ray's "actor died" messages


class LogsUnavailableError(SupervisorError):
    """The rank, its actor or its log cannot be found; the message says which and why."""


@dataclass(frozen=True)
class RankActor:
    name: str
    actor_id: str
    pid: int
    node_id: str
    alive: bool


def find_rank_actor(name: str, group: str, rank: int, previous: bool) -> RankActor:
    """The actor serving ``rank`` of ``group`` now, or with ``previous`` the last one that died.

    Raises:
        LogsUnavailableError: no such supervisor, group or rank, or no such actor.
    """
    from ray._private import state

    from ..daemon.record import RecordStore

    record = RecordStore().get(name)
    if record is None:
        raise LogsUnavailableError(f"no supervisor {name!r} in this cluster (see `supervisor list`)")
    g = record.groups.get(group)
    if g is None:
        raise LogsUnavailableError(f"supervisor {name} has no group {group!r} (groups: {', '.join(sorted(record.groups)) or 'none'})")
    if not 0 <= rank < len(g.actor_names):
        raise LogsUnavailableError(f"group {group} of supervisor {name} has ranks 0..{len(g.actor_names) - 1}, not {rank}")
    actor_name = g.actor_names[rank]
    rank_node = next((r.node_id for r in g.ranks if r.rank == rank), None)
    wanted = "DEAD" if previous else "ALIVE"
    # The table has no namespaces: another supervisor's group of the same name and class has actors of
    # the same names, told apart by the class and (for the live one) the rank's node.
    found = [info for info in state.actors(actor_state_name=wanted).values() if info.get("Name") == actor_name]
    class_name = g.worker_class.rpartition(":")[2].rpartition(".")[2]
    if len(found) > 1 and any(f.get("ActorClassName") == class_name for f in found):
        found = [f for f in found if f.get("ActorClassName") == class_name]
    if not previous and len(found) > 1 and rank_node:
        found = [f for f in found if (f.get("Address") or {}).get("NodeID") == rank_node]
    if not found:
        what = "no earlier actor (it was never replaced)" if previous else "no live actor (it is being replaced: try again, or --previous)"
        raise LogsUnavailableError(f"rank {rank} of {name}/{group} ({actor_name}) has {what}")
    info = max(found, key=lambda f: f.get("EndTime") or f.get("StartTime") or 0)
    return RankActor(actor_name, str(info["ActorID"]), int(info.get("Pid") or 0), str((info.get("Address") or {}).get("NodeID") or ""), not previous)


def read_log(actor: RankActor, stream: LogStream, tail: int | None, follow: bool, stopped: Callable[[], bool] = lambda: False) -> Iterator[str]:
    """The log's lines (the last ``tail`` of them; then, with ``follow``, new ones as they come).

    Raises:
        LogsUnavailableError: the node's log is neither on this machine nor served by a dashboard.
    """
    path = local_log_file(actor, stream)
    if path is not None:
        yield from last_lines(path, tail)
        if follow:
            yield from _follow(path, stopped)
        return
    yield from read_through_log_api(actor, stream, tail, follow)


def local_log_file(actor: RankActor, stream: LogStream) -> Path | None:
    """The actor's worker log file, when its node's session directory is on this machine."""
    import ray

    node = next((n for n in ray.nodes() if n.get("NodeID") == actor.node_id), None)
    socket = (node or {}).get("RayletSocketName") or ""
    if not socket or not actor.pid:
        return None
    logs = Path(socket).parent.parent / "logs"  # <session>/sockets/raylet -> <session>/logs
    if not logs.is_dir():
        return None
    matches = sorted(logs.glob(f"worker-*-{actor.pid}.{stream.value}"), key=lambda p: p.stat().st_mtime)
    return matches[-1] if matches else None  # a pid reused on this host: the newest file is this actor's


def last_lines(path: Path, tail: int | None) -> list[str]:
    """The file's last ``tail`` lines (all of them for None), without their line ends and Ray's markers."""
    with path.open(errors="replace") as f:
        shown = (line.rstrip("\n") for line in f if not is_ray_marker(line))
        lines: Any = deque(shown, maxlen=tail) if tail is not None else list(shown)
    return list(lines)


def is_ray_marker(line: str) -> bool:
    """Lines Ray writes into worker logs to route them to the driver (the job, actor and task names)."""
    from ray._private import ray_constants as rc

    return line.startswith((rc.LOG_PREFIX_JOB_ID, rc.LOG_PREFIX_ACTOR_NAME, rc.LOG_PREFIX_TASK_NAME))


def _follow(path: Path, stopped: Callable[[], bool]) -> Iterator[str]:
    with path.open(errors="replace") as f:
        f.seek(0, 2)
        partial = ""
        while not stopped():
            chunk = f.readline()
            if not chunk:
                time.sleep(FOLLOW_POLL_S)
                continue
            partial += chunk
            if partial.endswith("\n"):
                if not is_ray_marker(partial):
                    yield partial.rstrip("\n")
                partial = ""


def read_through_log_api(actor: RankActor, stream: LogStream, tail: int | None, follow: bool) -> Iterator[str]:
    """The log through Ray's log API of the cluster this process is connected to: its dashboard asks
    the node's agent for the actor's file."""
    from ray.experimental import internal_kv
    from ray.util.state import get_log

    from ..daemon.gcs_watch import gcs_address

    # Without an address get_log asks the cluster this machine started last (Ray's temporary
    # directory), which may be another one; and whichever it asks, it makes that cluster's GCS
    # client this process's key-value client, through which every record is read: kept as it was.
    address, connected_kv = gcs_address(), internal_kv.internal_kv_get_gcs_client()
    try:
        chunks = get_log(address=address, actor_id=actor.actor_id, suffix=stream.value, tail=-1 if tail is None else tail, follow=follow)
        pending = ""
        for chunk in chunks:
            pending += chunk
            *lines, pending = pending.split("\n")
            yield from (line for line in lines if not is_ray_marker(line))
        if pending and not is_ray_marker(pending):
            yield pending
    except Exception as exc:
        raise LogsUnavailableError(
            f"the log of {actor.name} (node {actor.node_id[:12]}) is not on this machine, and Ray's log API did not "
            f"answer ({first_line(exc)}): it needs the cluster's dashboard (ray start --head --include-dashboard=true)"
        ) from None
    finally:
        internal_kv._initialize_internal_kv(connected_kv)
