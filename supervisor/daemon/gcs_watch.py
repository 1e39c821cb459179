"""The GCS outage watch: how long the cluster's GCS has been unreachable, said while it lasts, and the
daemon's one-line exit once it lasts longer than ``gcs_outage_grace_s``.

With GCS fault tolerance (an external Redis: KubeRay's ``ray.io/ft-enabled``), the head's GCS can
restart under a running job. Meanwhile actors keep running and calling each other (those calls do not
go through the GCS), but anything that asks the GCS waits: record writes, heartbeats read from its
KV store, placement-group tables, new actors. None of that is a death or a reason to tear down: the
daemon goes on, says every few seconds what it waits for, and the loops judge nobody on the gap
(:meth:`~supervisor.supervision.detection.BeatClock.blind`). Only past the grace does the daemon end,
leaving the job in place (the GCS is away: nothing could be removed anyway), with one line that says
how long the GCS has been unreachable. Ray's own processes give up after
``RAY_gcs_rpc_server_reconnect_timeout_s`` (60 s by default, which is why the grace defaults below it).
"""

from __future__ import annotations

import enum
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core.group import gcs_outages
from ..observability.log import get_logger

__all__ = ["GCS_PING_S", "GCS_WAIT_REPORT_S", "GcsState", "GcsOutage", "GcsWatch", "gcs_address", "ping_gcs"]

log = get_logger("daemon")

GCS_PING_S = 1.0  # how often the GCS is asked (and how long one answer is waited for)
GCS_WAIT_REPORT_S = 5.0  # how often an outage says how long it has lasted


class GcsState(enum.Enum):
    REACHABLE = "reachable"
    AWAY = "away"  # unreachable, within the grace
    BACK = "back"  # reachable again after an outage (reported once)
    EXCEEDED = "exceeded"  # unreachable for longer than the grace


@dataclass
class GcsOutage:
    """The outage clock (pure): fed one ping result at a time, on the daemon's monotonic clock."""

    grace_s: float
    since: float | None = None  # when the current outage started
    last_outage_s: float = 0.0  # how long the last one that ended lasted

    def observe(self, reachable: bool, now: float) -> GcsState:
        if reachable:
            if self.since is None:
                return GcsState.REACHABLE
            self.last_outage_s, self.since = now - self.since, None
            return GcsState.BACK
        if self.since is None:
            self.since = now
        return GcsState.EXCEEDED if now - self.since > self.grace_s else GcsState.AWAY

    def lasted(self, now: float) -> float:
        return 0.0 if self.since is None else now - self.since


def gcs_address() -> str:
    """The address of the GCS this process is connected to (``host:port``)."""
    import ray

    return str(ray._private.worker.global_worker.gcs_client.address)


def ping_gcs(address: str, timeout_s: float = GCS_PING_S) -> bool:
    """Whether the GCS at ``address`` accepts a connection within ``timeout_s``.

    A TCP connection, not a GCS call: a call into Ray's GCS client while it reconnects can block far
    past its own timeout (seen: through the next restart), which would hide the end of one outage
    and the start of the next. A GCS process that is gone refuses at once."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


class GcsWatch:
    """A thread that pings the GCS every :data:`GCS_PING_S`, logs an outage while it lasts, reports
    each one that ended (``on_back(seconds)``) and calls ``on_exceeded(message)`` once past the grace.
    Every ping's result goes to ``note`` (default: :func:`supervisor.core.group.gcs_outages.note`, which this
    process's detection and snapshots read)."""

    def __init__(
        self, address: str, grace_s: float, on_exceeded: Callable[[str], None], on_back: Callable[[float], None],
        ping: Callable[[], bool] | None = None, clock: Callable[[], float] = time.monotonic,
        note: Callable[[bool], None] = gcs_outages.note,
    ) -> None:  # fmt: skip
        self.address, self.on_exceeded, self.on_back, self._clock, self._note = address, on_exceeded, on_back, clock, note
        self._ping = ping if ping is not None else (lambda: ping_gcs(address))
        self.outage = GcsOutage(grace_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_report = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="supervisor-gcs-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(GCS_PING_S * 3)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            if self.step(self._ping(), self._clock()):
                return
            self._stop.wait(max(0.0, GCS_PING_S - (self._clock() - started)))

    def step(self, reachable: bool, now: float) -> bool:
        """Feed one ping result; True once the grace is exceeded (the watch ends)."""
        self._note(reachable)  # this process's detection judges nobody on the gap
        state = self.outage.observe(reachable, now)
        grace = self.outage.grace_s
        if state is GcsState.BACK:
            log.warning("gcs_reachable_again", address=self.address, outage_s=round(self.outage.last_outage_s, 1))
            self.on_back(self.outage.last_outage_s)
        elif state is GcsState.AWAY and now >= self._next_report:
            self._next_report = now + GCS_WAIT_REPORT_S
            log.warning("gcs_unreachable", address=self.address, waited_s=round(self.outage.lasted(now), 1), grace_s=grace)
        elif state is GcsState.EXCEEDED:
            lasted = self.outage.lasted(now)
            self.on_exceeded(
                f"the GCS at {self.address} has been unreachable for {lasted:.0f}s (gcs_outage_grace_s = {grace:g}): "
                "the job is left as it is; start the daemon again once the GCS is back to re-adopt it"
            )
            return True
        if state is not GcsState.AWAY:
            self._next_report = 0.0
        return False
