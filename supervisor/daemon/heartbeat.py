"""The heartbeat: rewrites the state record every ``heartbeat_interval_s`` (what ``supervisor status``
reads) until the teardown ends, learns of a takeover from the owner fence's refusal, notices
``supervisor stop``, re-checks CPU oversubscription, and keeps the job's zygotes on spare nodes
(:mod:`.spare_zygotes`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import SupersededError, first_line
from ..observability.log import get_logger
from .job import Job
from .record import DaemonState
from .spare_zygotes import SPARE_CHECK_S, warm_spare_nodes
from .startup import warn_cpu_oversubscription
from .stop import StopReason

__all__ = ["Heartbeat", "OVERSUBSCRIPTION_RECHECK_S"]

log = get_logger("daemon")

OVERSUBSCRIPTION_RECHECK_S = 30.0  # ranks move between nodes when they are replaced


class Heartbeat:
    """A thread beating for ``job``; ``request_stop`` is how it ends the daemon (superseded, stop asked)."""

    def __init__(self, job: Job, request_stop: Callable[[StopReason], None], stop_pending: Callable[[], bool]) -> None:
        self.job = job
        self.request_stop = request_stop
        self.stop_pending = stop_pending
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="supervisor-heartbeat", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Stop beating after the write in progress (without waiting for it)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.job.spec.supervisor.heartbeat_interval_s + 5)

    def _beat(self) -> None:
        job = self.job
        assert job.store is not None
        interval = job.spec.supervisor.heartbeat_interval_s
        next_cpu_check = time.monotonic() + OVERSUBSCRIPTION_RECHECK_S
        next_spare_check = time.monotonic()
        # Beats on through the teardown (state "stopping"), so `supervisor stop` waits for a slow
        # shutdown method and nobody takes over a job that is still being torn down.
        while not self._stop.wait(interval):
            try:
                job.write_record()
            except SupersededError:
                # Another daemon took over (this one was paused past its grace period): it owns
                # everything now, so stop supervising and touch nothing.
                self.request_stop(StopReason.SUPERSEDED)
                return
            except Exception:  # a GCS hiccup must not end the heartbeat (logged and counted); retry
                continue
            try:
                self._publish_pool_bundles()
                if job.phase is DaemonState.RUNNING and time.monotonic() >= next_cpu_check:
                    warn_cpu_oversubscription(job)
                    next_cpu_check = time.monotonic() + OVERSUBSCRIPTION_RECHECK_S
                if job.phase is DaemonState.RUNNING and job.zygotes and time.monotonic() >= next_spare_check:
                    warm_spare_nodes(job.zygotes.values(), [pool.bundle() for pool in job.pools.values()])
                    next_spare_check = time.monotonic() + SPARE_CHECK_S
                how = job.store.stop_requested(job.spec.name, job.owner) if not self.stop_pending() else None
                if how is not None:
                    log.info("stop_requested", by="supervisor stop", detach=how == "detach")
                    self.request_stop(StopReason.DETACH_COMMAND if how == "detach" else StopReason.STOP_COMMAND)
            except Exception as exc:  # a GCS hiccup must not end the heartbeat; the next beat retries
                log.warning("heartbeat_failed", error=first_line(exc))

    def _publish_pool_bundles(self) -> None:
        # Bundles go pending when a node is lost and Ray re-places them: refreshed every beat.
        for pool in list(self.job.pools.values()):
            if pool.pgs is not None:
                self.job.hooks.on_pool_bundles(pool.name_prefix, *pool.bundle_counts())
