"""Detection: death watches, heartbeats and the GCS's word on a death, turned into failures of running ranks.

Every running rank has a death watch (:mod:`~supervisor.supervision.death_watch`): a call queued to it
by a watcher process and never sent, which Ray fails the moment the rank dies, busy or idle, so a
death is seen without polling. Heartbeats (:mod:`~supervisor.core.worker.actor_heartbeat`), written by a thread of
the rank's own, catch processes that are alive but stuck: a rank with no new beat for
``probe_timeout_s`` is hung. Neither runs anything on the actor's call path, so ranks are plain actors.
A death is classified once the GCS has a view of it (:func:`~supervisor.supervision.death_verdict.judge_death`):
a rank lost with its node is ``node_lost``, even when its watcher noticed before the GCS did.

Only running ranks are watched: a rank being replaced or initialised belongs to its recovery task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.group import gcs_outages
from ..core.worker.actor_heartbeat import read_beats
from ..errors import first_line
from ..failure import ErrorKind
from ..observability.log import get_logger
from . import death_watch
from .config import SupervisionConfig
from .death_verdict import UnavailableClock, judge_death
from .restart_policy import Failure, FailureReason

if TYPE_CHECKING:
    from ..core.group.group import WorkerGroup

__all__ = ["BeatClock", "Detected", "Detector"]

log = get_logger("detection")


@dataclass(frozen=True)
class Detected:
    failure: Failure
    generation: int
    detected_at: float  # loop clock
    died_at_wall: float | None  # wall-clock time of death when the GCS knows it


@dataclass
class _Suspect:
    generation: int
    kind: ErrorKind
    detail: str
    seen_at: float


@dataclass
class BeatClock:
    """When each watched incarnation last showed a new heartbeat, on the supervisor's clock (pure).

    Beats are compared by their counter, never by the writer's clock, so nodes' clocks may differ.
    Keys are whatever names one incarnation (``(rank, generation)``).
    """

    patience_s: float
    _last: dict[object, tuple[int | None, float]] = field(default_factory=dict)

    def watch(self, key: object, now: float) -> None:
        """Start the clock: a new incarnation has ``patience_s`` from now for its first beat."""
        self._last[key] = (None, now)

    def forget(self, key: object) -> None:
        self._last.pop(key, None)

    def forget_if(self, predicate: Callable[[object], bool]) -> None:
        for key in [k for k in self._last if predicate(k)]:
            del self._last[key]

    def blind(self, now: float) -> None:
        """The beats could not be read for a while (the GCS away): nobody is judged on that gap."""
        self._last = {key: (seq, now) for key, (seq, _) in self._last.items()}

    def seen(self, key: object, seq: int | None, now: float) -> bool:
        """Record a read of ``key``'s beat (None: it has none); True when it is a new one."""
        last = self._last.get(key)
        if last is None:
            return False
        if seq is not None and seq != last[0]:
            self._last[key] = (seq, now)
            return True
        return False

    def silent(self, now: float) -> dict[object, float]:
        """Incarnations with no new beat for longer than ``patience_s``, and for how long."""
        return {key: now - at for key, (_, at) in self._last.items() if now - at > self.patience_s}


class Detector:
    """Watches the running ranks of one group.

    Args:
        group: the supervised group (its current actors).
        config: heartbeat reads (``probe_period_s``) and the hang timeout (``probe_timeout_s``).
        clock: the loop's monotonic clock.
        running: ``rank -> generation`` of the ranks that run now (read at every pass).
        node_of: the node a rank runs on, as far as the supervisor knows.
    """

    def __init__(
        self, group: WorkerGroup, config: SupervisionConfig, clock: Callable[[], float],
        running: Callable[[], dict[int, int]], node_of: Callable[[int], str | None],
    ) -> None:  # fmt: skip
        self.group, self.config, self.clock = group, config, clock
        self._running, self._node_of = running, node_of
        self._watches: dict[Any, tuple[int, int]] = {}  # death watch -> (rank, generation)
        self._beats = BeatClock(config.probe_timeout_s)
        self._actor_ids: dict[int, str] = {}  # rank -> the actor watched (its beats' key)
        self._next_read = 0.0
        self._blind = False  # the last read of the beats failed
        self._outages_seen = gcs_outages.state()[0]  # GCS outages (the daemon's watch) already taken into account
        self._last_read: float | None = None  # when the beats were last read
        self._hung: list[Detected] = []  # found by the last read of the beats, for collect()
        self._suspects: dict[int, _Suspect] = {}
        self._rewatch_at: dict[int, tuple[int, float]] = {}  # rank -> (generation, when it is watched again)
        self._unavailable = UnavailableClock(config.probe_timeout_s, clock)
        self.node_updates: dict[int, str] = {}  # nodes the beats reported, for the supervisor's view

    # -- watching -------------------------------------------------------------------------------
    def watch(self, rank: int, generation: int) -> None:
        """Start watching ``rank``'s current actor (after it started or re-joined)."""
        self.forget(rank)
        self._actor_ids[rank] = self.group.workers[rank]._actor_id.hex()
        self._arm(rank, generation)
        self._beats.watch((rank, generation), self.clock())

    def _arm(self, rank: int, generation: int) -> None:
        self._watches[death_watch.watch(self.group.workers[rank])] = (rank, generation)

    def forget(self, rank: int) -> None:
        """Stop watching ``rank`` (its recovery task owns it now)."""
        for ref in [ref for ref, (r, _) in self._watches.items() if r == rank]:
            del self._watches[ref]
            death_watch.unwatch(ref)
        self._beats.forget_if(lambda key: isinstance(key, tuple) and key[0] == rank)
        self._hung = [d for d in self._hung if d.failure.rank != rank]
        self._suspects.pop(rank, None)
        self._rewatch_at.pop(rank, None)
        self._unavailable.forget(lambda key: isinstance(key, tuple) and key[0] == rank)

    def close(self) -> None:
        """Stop every watch (the supervisor stops; the ranks are left alone)."""
        for rank in {r for r, _ in self._watches.values()}:
            self.forget(rank)

    # -- one pass -------------------------------------------------------------------------------
    def refs(self) -> list[Any]:
        return list(self._watches)

    def wait_s(self, timeout_s: float) -> float:
        """How long the pass may block: until the beats are read next, or a suspect is judged again."""
        if self._suspects or self._hung:
            return min(timeout_s, 0.05)
        due = [self._next_read, *(at for _, at in self._rewatch_at.values())]
        return max(0.01, min(timeout_s, min(due) - self.clock()))

    def read_due_beats(self) -> None:
        """Read the running ranks' heartbeats when due, and start the watches that were paused."""
        now = self.clock()
        for rank, (generation, at) in list(self._rewatch_at.items()):
            if now >= at:
                del self._rewatch_at[rank]
                if self._running().get(rank) == generation:
                    self._arm(rank, generation)
        if now < self._next_read:
            return
        self._next_read = now + self.config.probe_period_s
        outages, away = gcs_outages.state()
        if away:  # the GCS is away: the ranks could not write their beats either
            self._blind = True
            return
        if outages != self._outages_seen:
            self._outages_seen = outages
            self._blind = True  # their silence restarts now: their writes waited for the GCS too
        running = self._running()
        ids = {rank: self._actor_ids[rank] for rank in running if rank in self._actor_ids}
        try:
            beats = read_beats(ids.values())
        except Exception as exc:  # the GCS is away: nobody is judged on what could not be read
            if not self._blind:
                log.warning("heartbeats_unreadable", group=self.group.name, error=first_line(exc))
            self._blind = True
            return
        # Not read for a whole timeout (this process was paused or starved, or the GCS was away): the
        # ranks' silence is ours, not theirs.
        if self._blind or (self._last_read is not None and now - self._last_read > self.config.probe_timeout_s):
            self._blind = False
            self._beats.blind(now)
        self._last_read = now
        for rank, actor_id in ids.items():
            beat = beats.get(actor_id)
            if self._beats.seen((rank, running[rank]), beat.seq if beat else None, now) and beat is not None:
                self.node_updates[rank] = beat.node_id
        for key, silent_s in self._beats.silent(now).items():
            rank, generation = key  # type: ignore[misc]
            self._beats.forget(key)
            if running.get(rank) == generation and rank not in self._suspects:
                self._hung.append(
                    self._detected(rank, generation, FailureReason.HUNG, f"no heartbeat for {silent_s:.0f}s")
                )

    def collect(self, ready: list[Any]) -> list[Detected]:
        """Failures among the ``ready`` watches, silent ranks and suspects the GCS has now judged."""
        running = self._running()
        found: list[Detected] = []
        alive: set[str] | None = None

        def alive_nodes() -> set[str]:
            nonlocal alive
            if alive is None:
                alive = _alive_nodes()
            return alive

        for ref in ready:
            found += self._on_ready(ref, running)
        found += [d for d in self._hung if running.get(d.failure.rank) == d.generation]
        self._hung = []
        for rank, suspect in list(self._suspects.items()):
            if running.get(rank) != suspect.generation:
                del self._suspects[rank]
                continue
            detected = self._judge(rank, suspect, alive_nodes())
            if detected is not None:
                del self._suspects[rank]
                found.append(detected)
        return found

    def _on_ready(self, ref: Any, running: dict[int, int]) -> list[Detected]:
        rank, generation = self._watches.pop(ref)
        if running.get(rank) != generation:
            return []  # an earlier incarnation
        notice = death_watch.notice_of(ref, group=self.group.name, rank=rank)
        if notice is None:  # the watch was lost, not the rank: watch again
            self._rewatch_at[rank] = (generation, self.clock() + death_watch.REWATCH_PAUSE_S)
            return []
        if notice.kind is ErrorKind.UNAVAILABLE:
            # Temporarily unreachable (Ray says so), not known dead: watched again, for a while.
            lasted = self._unavailable.unavailable((rank, generation))
            if lasted is not None:
                return [self._detected(rank, generation, FailureReason.HUNG, f"unavailable for {lasted:.0f}s: {notice.detail}")]
            self._rewatch_at[rank] = (generation, self.clock() + death_watch.REWATCH_PAUSE_S)
            return []
        if rank not in self._suspects:
            self._suspects[rank] = _Suspect(generation, notice.kind, notice.detail, self.clock())
        return []  # judged in collect(), with the GCS's view

    def _judge(self, rank: int, suspect: _Suspect, alive: set[str]) -> Detected | None:
        actor_id = self.group.workers[rank]._actor_id.hex()
        dead, end_s = _actor_death(actor_id)
        verdict = judge_death(
            suspect.kind, suspect.detail, self._node_of(rank), alive, dead, self.clock() - suspect.seen_at,
            self.config.probe_timeout_s,
        )  # fmt: skip
        if verdict.reason is None:
            return None
        # A running rank's constructor ran long ago: init_failed here is a death too.
        reason = FailureReason.DIED if verdict.reason is FailureReason.INIT_FAILED else verdict.reason
        return self._detected(rank, suspect.generation, reason, verdict.detail, died_at_wall=end_s)

    def _detected(
        self,
        rank: int,
        generation: int,
        reason: FailureReason,
        detail: str,
        died_at_wall: float | None = None,
    ) -> Detected:
        return Detected(
            Failure(rank, reason, detail, self._node_of(rank)), generation, self.clock(), died_at_wall
        )


def _alive_nodes() -> set[str]:
    import ray

    try:
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    except Exception:  # a GCS hiccup: no node is known lost, the death is still a death
        return _ALL_NODES


class _AllNodes(set):  # type: ignore[type-arg]
    """Stands for "every node is alive" when the GCS cannot be asked."""

    def __contains__(self, item: object) -> bool:
        return True


_ALL_NODES = _AllNodes()


def _actor_death(actor_id: str) -> tuple[bool, float | None]:
    """``(dead in the GCS, wall-clock time of death)``; dead when the GCS cannot be asked (a death the
    owner saw is a death)."""
    try:
        from ray._private import state

        info = state.actors(actor_id)
    except Exception:
        return True, None
    end_ms = float(info.get("EndTime", 0) or 0)
    return info.get("State") == "DEAD", (end_ms / 1000.0 if end_ms > 0 else None)
