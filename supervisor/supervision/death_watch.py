"""Death watch: a call queued to each watched actor and never sent, which Ray fails when it dies.

A caller's calls to one actor leave in order, and a call leaves only once its arguments exist. The
watcher (:class:`_Watcher`, one per supervising process) queues a call to the rank whose argument is an
object it never produces; when the rank dies, Ray fails every call queued to it, that one too, within
milliseconds (the GCS tells each caller of a dead actor), busy or idle. Nothing runs on the rank,
so its actor needs no concurrency group, and runs every call on its main thread as a plain actor does.

The call has to be queued by a process of its own: it holds up every later call from the same caller
to that rank, so it cannot come from the supervisor that also calls the rank.

The watcher is owned by the process that started it (not detached, not named): it ends with that
process, and leaves nothing behind. It is pinned to that process's node, so a lost GPU node does not
take it. If it dies anyway, every watch fails with the watcher's own error (never a rank's notice),
and the next watch starts a new one.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import first_line
from ..failure import ErrorKind, classify_error
from ..observability.log import get_logger

__all__ = ["DeathNotice", "REWATCH_PAUSE_S", "acquire", "release", "watch", "notice_of", "unwatch", "replace_lost_watcher"]

log = get_logger("death_watch")

# An async actor keeps each watch as one coroutine: this bounds how many ranks one process watches.
MAX_WATCHES = 100_000
# Pause before a watch that reported its actor unreachable, or that the lost watcher took down, is
# started again (an actor that fails every call at once would otherwise be watched in a spin).
REWATCH_PAUSE_S = 0.5


@dataclass(frozen=True)
class DeathNotice:
    """What Ray said when it failed the queued call: the rank died, its constructor failed, or it is
    unreachable for now."""

    kind: ErrorKind
    detail: str


class _Watcher:
    def __init__(self) -> None:
        self._never: Any = None

    async def _hold(self) -> None:
        await asyncio.Event().wait()

    async def watch(self, handle: Any) -> DeathNotice:
        import ray

        if self._never is None:  # one object for every watch, produced by a call that never returns
            self._never = ray.get_runtime_context().current_actor._hold.remote()
        queued = handle._supervisor_sentinel.remote(self._never)
        try:
            await queued
        except asyncio.CancelledError:  # unwatched: take the queued call back
            ray.cancel(queued)
            raise
        except Exception as exc:
            kind = classify_error(exc)
            if not kind.rank_failed:
                # The call failed on its argument, not on the rank: the held object is lost. Say so
                # (the supervisor watches again), and hold a new one.
                self._never = None
                raise
            return DeathNotice(kind, first_line(exc))
        raise AssertionError("a death watch's call ran: its argument can never exist")  # pragma: no cover


_lock = threading.Lock()
_watcher: Any = None
_users = 0


def acquire() -> None:
    """A supervisor starts watching: the watcher lives while any supervisor of this process needs it."""
    global _users
    with _lock:
        _users += 1


def release() -> None:
    """A supervisor stopped: the last one to stop ends the watcher (and with it every queued call)."""
    global _users, _watcher
    import ray

    with _lock:
        _users = max(0, _users - 1)
        if _users or _watcher is None:
            return
        watcher, _watcher = _watcher, None
    try:
        ray.kill(watcher)
    except Exception:  # already gone (a lost node, a shut-down cluster): nothing is left to end
        pass


def _get_watcher() -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    global _watcher
    with _lock:
        if _watcher is None:
            here = ray.get_runtime_context().get_node_id()
            _watcher = (
                ray.remote(_Watcher)
                .options(
                    num_cpus=0,
                    max_concurrency=MAX_WATCHES,
                    max_restarts=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
                )
                .remote()
            )
        return _watcher


def watch(handle: Any) -> Any:
    """A ref that resolves to a :class:`DeathNotice` when ``handle``'s actor dies (or is unreachable).

    It raises instead only when the watch itself is lost (the watcher died, or the object it holds):
    then :func:`replace_lost_watcher`, and watch again.
    """
    return _get_watcher().watch.remote(handle)


def notice_of(ref: Any, **log_context: Any) -> DeathNotice | None:
    """What a resolved watch says, or None when the watch itself was lost (the watcher died, or the
    object it holds): then the watcher is replaced if it is dead, and the actor is to be watched
    again after :data:`REWATCH_PAUSE_S` (``log_context`` names it in the log line that says so)."""
    import ray

    try:
        notice: DeathNotice = ray.get(ref)
    except ray.exceptions.RayError as exc:
        log.warning("death_watch_lost", **log_context, error=first_line(exc))
        replace_lost_watcher()
        return None
    return notice


def unwatch(ref: Any) -> None:
    """Stop a watch (the queued call on the rank is taken back)."""
    import ray

    try:
        # Not recursive: the object every watch waits for was made by a call of the first watch.
        ray.cancel(ref, recursive=False)
    except Exception:  # already resolved, or the watcher is gone: nothing is queued any more
        pass


def replace_lost_watcher() -> None:
    """After a watch raised: if the watcher is dead, forget it, so the next watch starts a new one."""
    global _watcher
    from ray._private import state

    with _lock:
        if _watcher is None:
            return
        try:
            dead = state.actors(_watcher._actor_id.hex()).get("State") == "DEAD"
        except Exception:  # the GCS cannot say now: the next failed watch asks again
            return
        if dead:
            _watcher = None
