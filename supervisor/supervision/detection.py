"""Detection: sentinels, probes and the GCS's word on a death, turned into failures of running ranks.

Every running rank keeps a sentinel call outstanding in its own concurrency group; Ray fails that
call the moment the process dies, so detection does not rely on polling. Probes (another concurrency
group) catch processes that are alive but stuck. A death is classified once the GCS has a view of it
(:func:`~supervisor.supervision.failures.judge_death`): a rank lost with its node is ``node_lost``,
even when its owner noticed before the GCS did.

Only running ranks are watched: a rank being replaced or initialised belongs to its recovery task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.worker import arm_sentinel, send_probe
from ..errors import first_line
from ..observability.log import get_logger
from .config import SupervisionConfig
from .failures import ErrorKind, UnavailableClock, classify_error, judge_death
from .restart_policy import Failure, FailureReason

if TYPE_CHECKING:
    from ..core.group import WorkerGroup

__all__ = ["Detected", "Detector"]

log = get_logger("detection")

# Pause before a sentinel that found its rank unreachable is armed again (without it, the loop would
# spin on an actor that fails every call at once, for the whole of probe_timeout_s).
UNAVAILABLE_REARM_S = 0.5


@dataclass(frozen=True)
class Detected:
    failure: Failure
    generation: int
    detected_at: float  # loop clock
    died_at_wall: float | None  # wall-clock time of death when the GCS knows it


@dataclass
class _Suspect:
    generation: int
    error: BaseException
    seen_at: float


class Detector:
    """Watches the running ranks of one group.

    Args:
        group: the supervised group (its current actors).
        config: probe cadence and timeouts.
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
        self._sentinels: dict[Any, tuple[int, int]] = {}
        self._probes: dict[Any, tuple[int, int, float]] = {}
        self._next_probe: dict[int, float] = {}
        self._suspects: dict[int, _Suspect] = {}
        self._rearm_at: dict[int, tuple[int, float]] = {}  # rank -> (generation, when its sentinel is armed again)
        self._unavailable = UnavailableClock(config.probe_timeout_s, clock)
        self.node_updates: dict[int, str] = {}  # nodes the probes reported, for the supervisor's view

    # -- arming ---------------------------------------------------------------------------------
    def watch(self, rank: int, generation: int) -> None:
        """Start watching ``rank``'s current actor (after it started or re-joined)."""
        self.forget(rank)
        self._arm(rank, generation)
        self._next_probe[rank] = self.clock() + self.config.probe_period_s

    def _arm(self, rank: int, generation: int) -> None:
        self._sentinels[arm_sentinel(self.group.workers[rank], self.config.sentinel_hold_s)] = (rank, generation)

    def forget(self, rank: int) -> None:
        """Stop watching ``rank`` (its recovery task owns it now)."""
        self._sentinels = {ref: v for ref, v in self._sentinels.items() if v[0] != rank}
        self._probes = {ref: v for ref, v in self._probes.items() if v[0] != rank}
        self._suspects.pop(rank, None)
        self._rearm_at.pop(rank, None)
        self._unavailable.forget(lambda key: isinstance(key, tuple) and key[0] == rank)

    # -- one pass -------------------------------------------------------------------------------
    def refs(self) -> list[Any]:
        return [*self._sentinels, *self._probes]

    def wait_s(self, timeout_s: float) -> float:
        """How long the pass may block: until the next probe is due or expires, or a suspect is judged again."""
        if self._suspects:
            return min(timeout_s, 0.05)
        busy = {rank for rank, _, _ in self._probes.values()}
        due = [t for rank, t in self._next_probe.items() if rank not in busy]
        due += [sent + self.config.probe_timeout_s for _, _, sent in self._probes.values()]
        due += [at for _, at in self._rearm_at.values()]
        if not due:
            return timeout_s
        return max(0.01, min(timeout_s, min(due) - self.clock()))

    def send_due_probes(self) -> None:
        """Send the probes that are due, and re-arm the sentinels of ranks that were unreachable."""
        now = self.clock()
        for rank, (generation, at) in list(self._rearm_at.items()):
            if now >= at:
                del self._rearm_at[rank]
                if self._running().get(rank) == generation:
                    self._arm(rank, generation)
        busy = {rank for rank, _, _ in self._probes.values()}
        for rank, generation in self._running().items():
            if rank not in busy and now >= self._next_probe.get(rank, 0.0):
                self._probes[send_probe(self.group.workers[rank])] = (rank, generation, now)
                self._next_probe[rank] = now + self.config.probe_period_s

    def collect(self, ready: list[Any]) -> list[Detected]:
        """Failures among the ``ready`` refs, expired probes and suspects the GCS has now judged."""
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
        found += self._expired_probes(running)
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
        import ray

        sentinel = ref in self._sentinels
        if sentinel:
            rank, generation = self._sentinels.pop(ref)
        else:
            rank, generation, _ = self._probes.pop(ref)
        if running.get(rank) != generation:
            return []  # an earlier incarnation
        try:
            info = ray.get(ref)
        except Exception as exc:
            kind = classify_error(exc)
            if kind is ErrorKind.UNAVAILABLE:
                # Temporarily unreachable (Ray says so), not known dead: asked again, for a while.
                lasted = self._unavailable.unavailable((rank, generation))
                if lasted is not None:
                    return [
                        self._detected(
                            rank,
                            generation,
                            FailureReason.HUNG,
                            f"unavailable for {lasted:.0f}s: {first_line(exc)}",
                        )
                    ]
                if sentinel:  # asked again after a pause: an unreachable actor fails it at once
                    self._rearm_at[rank] = (generation, self.clock() + UNAVAILABLE_REARM_S)
                return []
            if kind in (ErrorKind.DIED, ErrorKind.INIT_FAILED):
                if rank not in self._suspects:
                    self._suspects[rank] = _Suspect(generation, exc, self.clock())
                return []  # judged in collect(), with the GCS's view
            return [self._detected(rank, generation, FailureReason.DIED, first_line(exc))] if sentinel else []
        self._unavailable.answered((rank, generation))
        if sentinel:
            self._arm(rank, generation)
        elif isinstance(info, dict) and info.get("node_id"):
            self.node_updates[rank] = info["node_id"]
        return []

    def _judge(self, rank: int, suspect: _Suspect, alive: set[str]) -> Detected | None:
        actor_id = self.group.workers[rank]._actor_id.hex()
        dead, end_s = _actor_death(actor_id)
        verdict = judge_death(
            suspect.error, self._node_of(rank), alive, dead, self.clock() - suspect.seen_at, self.config.probe_timeout_s
        )  # fmt: skip
        if verdict.reason is None:
            return None
        # A running rank's constructor ran long ago: init_failed here is a death too.
        reason = FailureReason.DIED if verdict.reason is FailureReason.INIT_FAILED else verdict.reason
        return self._detected(rank, suspect.generation, reason, verdict.detail, died_at_wall=end_s)

    def _expired_probes(self, running: dict[int, int]) -> list[Detected]:
        now = self.clock()
        out = []
        for ref, (rank, generation, sent) in list(self._probes.items()):
            if now - sent > self.config.probe_timeout_s:
                del self._probes[ref]
                if running.get(rank) == generation and rank not in self._suspects:
                    out.append(
                        self._detected(
                            rank,
                            generation,
                            FailureReason.HUNG,
                            f"health probe unanswered for {self.config.probe_timeout_s:g}s",
                        )
                    )
        return out

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
