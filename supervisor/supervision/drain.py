"""Drain notices: nodes the cluster announced it will take away (preemption, maintenance, scale-down).

KubeRay, autoscaler v2 and ``ray drain-node`` tell the GCS through its DrainNode call, with a reason
and a deadline. The GCS then schedules nothing new on the node and lists it among its draining nodes;
it does not move what runs there, and does not kill a busy node at the deadline either: whoever sent
the notice takes the node away. A supervised rank on such a node is handed over (see
:mod:`.reconcile`): its successor is started elsewhere while it still serves, and takes its place,
with its state, at the next call boundary. A hand-over is not a failure: nothing is charged to the
restart budget and nothing is rolled back.

:class:`DrainReader` reads the draining nodes from the GCS every ``DRAIN_CHECK_S`` on a thread of its
own, one per process however many groups there are; each supervisor's loop reads its last answer on
every pass and never waits for the GCS.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import first_line
from ..observability.log import get_logger

__all__ = ["DRAIN_CHECK_S", "DrainPolicy", "DrainOutcome", "DrainReader", "draining_nodes"]

log = get_logger("drain")

# How often the draining nodes are read from the GCS: a notice is acted on within a second.
DRAIN_CHECK_S = 0.5


@dataclass(frozen=True)
class DrainPolicy:
    """What a group does when a node of its ranks is being drained.

    Attributes:
        hand_over: start each affected rank's successor elsewhere and hand the rank over at the next
            call boundary. False: ignore notices (the node's loss is then a failure like any other).
        min_notice_s: a notice with less time than this left before its deadline is too short to
            hand over in (a successor's start, the state copy and the init must fit before it); the
            group says so and recovers when the node goes, as without a notice.
    """

    hand_over: bool = True
    min_notice_s: float = 5.0


class DrainOutcome(enum.StrEnum):
    """How the notice for one rank ended (the ``outcome`` label of ``supervisor_drains_total``)."""

    HANDED_OVER = "handed_over"  # its successor serves; the old rank was stopped
    NO_CAPACITY = "no_capacity"  # no standby and no free bundle off draining nodes: recovered when the node goes
    DEADLINE_TOO_SHORT = "deadline_too_short"  # less than min_notice_s left: recovered when the node goes
    IGNORED = "ignored"  # the group does not act on notices (hand_over = false)
    ABORTED = "aborted"  # the successor failed during the take-over: the rank kept its actor and is tried again


class DrainReader:
    """The GCS's draining nodes, as last read: a thread of its own reads them every ``period_s``, so a
    supervision loop that asks never waits for the GCS (one reader per process, however many groups)."""

    def __init__(self, read: Callable[[], dict[str, int]], period_s: float = DRAIN_CHECK_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self.period_s, self._clock = read, period_s, clock
        self._lock = threading.Lock()
        self._nodes: dict[str, float | None] = {}
        self._failing = False
        self._thread: threading.Thread | None = None

    def nodes(self) -> dict[str, float | None]:
        """``{node id (hex): deadline (wall-clock seconds, None: none given)}`` of the draining nodes,
        as last read (the reading thread starts on the first call)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="supervisor-drain-reader", daemon=True)
                self._thread.start()
            return dict(self._nodes)

    def refresh(self) -> None:
        """Read the draining nodes once. A GCS that does not answer leaves the last answer in place (a
        notice is not withdrawn because the GCS was away for a moment)."""
        try:
            raw = self._read()
        except Exception as exc:
            if not self._failing:
                log.warning("draining_nodes_unknown", error=first_line(exc))
            self._failing = True
            return
        self._failing = False
        nodes = {str(node): (ms / 1000.0 if ms else None) for node, ms in raw.items()}
        with self._lock:
            self._nodes = nodes

    def _run(self) -> None:
        while True:
            started = self._clock()
            self.refresh()
            time.sleep(max(0.0, self.period_s - (self._clock() - started)))


def _read_from_gcs() -> dict[str, int]:
    import ray

    if not ray.is_initialized():  # disconnected (between two clusters, or shut down): nothing drains
        return {}
    return ray._private.worker.global_worker.gcs_client.get_draining_nodes(timeout=1)


_reader: DrainReader | None = None
_reader_lock = threading.Lock()


def draining_nodes() -> dict[str, float | None]:
    """The draining nodes of the cluster this process is connected to (see :class:`DrainReader`)."""
    global _reader
    with _reader_lock:
        if _reader is None:
            _reader = DrainReader(_read_from_gcs)
        reader = _reader
    return reader.nodes()
