"""The supervisor daemon: one long-lived process that owns a spec's detached pools and groups.

Life of a daemon (:meth:`Daemon.run`)::

    connect ──> claim the record ──> STARTING: pools, groups (create or re-adopt), init ──> RUNNING
                                                                                             │
      SIGTERM / SIGINT / `supervisor stop` / driver returned or raised / a group FAILED ─────┘
                                                                                             v
                    exit code <── remove everything owned, delete the record <── STOPPING

* Claim: the owner fence (:mod:`.fence`) refuses while another daemon of that name is heard from;
  one that is gone is taken over, and its pools and workers are re-adopted (same placement groups,
  healthy actors untouched); anything it owned that the spec no longer describes is removed. The
  claim's generation fences everything this daemon writes or destroys from then on.
* While it runs, a heartbeat thread rewrites the state record every ``heartbeat_interval_s`` (what
  ``supervisor status`` reads) and watches for ``supervisor stop``; the GroupSupervisors detect,
  replace and report, writing every rank state change to the record as it happens; the driver (if
  any) runs in its own thread.
* Every way out except SIGKILL goes through teardown, which ends with a sweep of everything the
  supervisor owns by name, so nothing is left behind even after a half-finished start. A refusal
  from the fence at any point means another daemon owns the job now: everything is left to it.
"""

from __future__ import annotations

import _thread
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import first_line
from ..observability import metrics
from ..observability.log import get_logger
from ..supervision import GroupState
from .claim import AlreadyRunningError, claim
from .events import EventKind, EventType
from .fence import OwnerFence
from .gcs_watch import GcsWatch, gcs_address
from .heartbeat import Heartbeat
from .job import Job
from .loopback import exposure_warning
from .probes import ProbeResult, health, readiness
from .record import DaemonState, RecordStore
from .spec import SigtermAction, SupervisorSpec
from .spec_cluster import SpecCluster
from .startup import JobStarter
from .stop import ExitCode, StopReason, TeardownScope, teardown_scope
from .teardown import tear_down

__all__ = ["Daemon", "ExitCode", "StopReason", "TeardownScope", "teardown_scope", "AlreadyRunningError"]

log = get_logger("daemon")


class _StopDuringStart(KeyboardInterrupt):
    """Unwinds start-up when a stop arrives. A KeyboardInterrupt, because that is what Ray lets through
    its blocking calls (and transactional starts release what they acquired on any BaseException)."""


class Daemon:
    """Runs one spec until it is stopped. ``run()`` returns the process exit code.

    The daemon connects, handles signals and the metrics endpoint, and runs its parts in order: the
    claim (:mod:`.claim`), start-up as reconciliation (:mod:`.startup`), the heartbeat
    (:mod:`.heartbeat`) and the teardown (:mod:`.teardown`), which share one :class:`~.job.Job`.

    Args:
        spec: the validated spec.
        address: Ray address overriding the spec (``--address`` or ``RAY_ADDRESS``); none and no
            ``ray.address`` in the spec: an embedded local Ray.
        install_signal_handlers: handle SIGTERM/SIGINT (only possible in the main thread).
        driver_stop_grace_s: how long a driver may take to return after a stop before teardown goes on.
    """

    def __init__(
        self,
        spec: SupervisorSpec,
        address: str | None = None,
        install_signal_handlers: bool = True,
        driver_stop_grace_s: float = 10.0,
        status_document: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.spec = spec
        # What /status serves: the CLI gives `supervisor status -o json`'s document (it owns that layer).
        self._status_document = status_document
        # /status calls into Ray from the server's threads: one at a time, and none once Ray goes away.
        self._status_lock = threading.Lock()
        self._serving_status = True
        self.address = address or spec.ray.address
        self.install_signal_handlers = install_signal_handlers
        self.driver_stop_grace_s = driver_stop_grace_s
        self.job = Job(spec, owner=uuid.uuid4().hex)
        self.job.fence = OwnerFence(spec.name, on_superseded=lambda error: self.request_stop(StopReason.SUPERSEDED))
        self._interruptible = False  # a stop signal unwinds start-up only while this is set
        self._linger_cut = threading.Event()
        self._stop_event = threading.Event()
        self._stop_reason: StopReason | None = None
        self._error: str | None = None
        self._cluster = SpecCluster(spec, self.address)
        self._metrics_server: Any = None
        self._heartbeat = Heartbeat(self.job, self.request_stop, lambda: self._stop_reason is not None)
        self._gcs_watch: GcsWatch | None = None

    # -- the whole life -------------------------------------------------------------------------
    def run(self) -> ExitCode:
        """Connect, claim, start, supervise until stopped, tear down. Returns the exit code."""
        job = self.job
        try:
            self._connect()
            if self.install_signal_handlers:
                # After connecting: Ray's core worker installs its own SIGTERM handler, which ends the
                # process at once; ours must replace it so a SIGTERM means "tear down".
                signal.signal(signal.SIGTERM, self._on_signal)
                signal.signal(signal.SIGINT, self._on_signal)
            self._start_metrics()
            claim(job, self.address, self._metrics_address(), _ray_version())
            job.write_through_armed = True  # from now on every rank state change is written at once
        except Exception as exc:  # nothing of this supervisor was touched yet
            log.error("daemon_not_started", supervisor=self.spec.name, error=first_line(exc, limit=None))
            self._stop_metrics()
            self._disconnect()
            return ExitCode.FAILED
        self._heartbeat.start()
        self._gcs_watch = GcsWatch(gcs_address(), self.spec.supervisor.gcs_outage_grace_s, self._gcs_gone, self._gcs_back)
        self._gcs_watch.start()
        try:
            job.phase = DaemonState.STARTING
            if not self._stop_event.is_set():
                self._interruptible = True
                try:
                    JobStarter(job, self._stop_event).start()
                finally:
                    self._interruptible = False
            job.phase = DaemonState.RUNNING
            job.write_record()
            log.info("supervisor_running", supervisor=self.spec.name, groups=[m.name for m in job.groups], metrics=self._metrics_address())
            reason = self._wait_for_stop()
        except KeyboardInterrupt:  # _StopDuringStart, or a KeyboardInterrupt Ray raised for a signal
            reason = self._stop_reason or StopReason.SIGINT
        except Exception as exc:
            self._error = first_line(exc, limit=None)
            log.error("start_failed", supervisor=self.spec.name, error=self._error)
            reason = StopReason.START_FAILED
        return self._teardown(reason)

    def _gcs_gone(self, message: str) -> None:
        with self.job.lock:
            self._error = self._error or message
        log.error("gcs_unreachable_too_long", error=message)
        self.request_stop(StopReason.GCS_UNREACHABLE)

    def _gcs_back(self, outage_s: float) -> None:
        self.job.hooks.event(EventKind.GCS_OUTAGE, f"the GCS was unreachable for {outage_s:.1f}s; the job ran on", EventType.WARNING)

    def request_stop(self, reason: StopReason) -> None:
        """Ask the daemon to tear down (thread-safe; the first reason is the one reported)."""
        with self.job.lock:
            if self._stop_reason is None:
                self._stop_reason = reason
        self._stop_event.set()
        if self._interruptible and threading.current_thread() is not threading.main_thread():
            # Start-up blocks the main thread (resource waits can take minutes): interrupt it there.
            _thread.interrupt_main(signal.SIGTERM)

    def _on_signal(self, signum: int, frame: Any) -> None:
        reason = StopReason.SIGINT if signum == signal.SIGINT else StopReason.SIGTERM
        if reason is StopReason.SIGTERM and self.spec.supervisor.on_sigterm is SigtermAction.DETACH:
            reason = StopReason.SIGTERM_DETACH
        log.info("stop_signal", signal=signal.Signals(signum).name, phase=self.job.phase.value)
        with self.job.lock:
            if self._stop_reason is None:
                self._stop_reason = reason
        self._stop_event.set()
        if self.job.phase is DaemonState.STOPPING:
            self._linger_cut.set()
        if self._interruptible:
            self._interruptible = False  # once: a second signal must not interrupt the unwinding
            raise _StopDuringStart()

    # -- connect --------------------------------------------------------------------------------
    def _connect(self) -> None:
        paths = self.spec.python_path()
        pythonpath = os.pathsep.join([*paths, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
        # Actors (detached ones too) inherit the job's env_vars: they import user modules from here.
        self.address = self._cluster.connect(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
        self.job.store = RecordStore()

    def _disconnect(self) -> None:
        self._cluster.disconnect()

    # -- metrics --------------------------------------------------------------------------------
    def _start_metrics(self) -> None:
        spec = self.spec.metrics
        if not spec.enabled:
            return
        cert, key = self.spec.path(spec.tls_cert), self.spec.path(spec.tls_key)
        metrics.label_every_series(self.spec.name)
        routes = {"/healthz": self._healthz, "/readyz": self._readyz}
        if self._status_document is not None:
            routes["/status"] = self._status
        self._metrics_server = metrics.serve(spec.port, spec.host, str(cert) if cert else None, str(key) if key else None, routes)
        log.info("metrics_serving", address=self._metrics_address(), tls=cert is not None)
        exposed = exposure_warning(spec.host, tls=cert is not None)
        if exposed:
            log.warning("metrics_exposed_without_tls", host=spec.host, hint=exposed)

    def _healthz(self) -> tuple[int, str, bytes]:
        written = self.job.last_written
        age = None if written is None else time.monotonic() - written
        return _probe_answer(health(self.job.phase, age, self.spec.supervisor.heartbeat_interval_s))

    def _readyz(self) -> tuple[int, str, bytes]:
        with self.job.lock:
            groups = {m.name: m.supervisor.state for m in self.job.groups}
        return _probe_answer(readiness(self.job.phase, groups))

    def _status(self) -> tuple[int, str, bytes]:
        assert self._status_document is not None
        with self._status_lock:
            if not self._serving_status:
                return 503, "text/plain; charset=utf-8", b"stopping: the cluster connection is closing\n"
            return 200, "application/json", json.dumps(self._status_document()).encode()

    def _stop_metrics(self) -> None:
        with self._status_lock:  # a /status in progress finishes before Ray is shut down
            self._serving_status = False
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _metrics_address(self) -> str | None:
        if self._metrics_server is None:
            return None
        return f"{self.spec.metrics.host}:{self._metrics_server.server_port}"

    def _linger_metrics(self, code: ExitCode) -> None:
        # A failure ends this process, and its series with it: stay scrapeable a little longer so the
        # FAILED group reaches Prometheus and its alert (a further signal cuts the wait short).
        linger = self.spec.metrics.linger_s
        if code is ExitCode.OK or self._metrics_server is None or linger <= 0:
            return
        log.info("metrics_linger", seconds=linger, address=self._metrics_address())
        self._linger_cut.wait(linger)

    # -- running and stopping -------------------------------------------------------------------
    def _wait_for_stop(self) -> StopReason:
        job = self.job
        while True:
            if self._stop_event.wait(0.2):
                return self._stop_reason or StopReason.SIGTERM
            if job.driver is not None and job.driver.done.is_set():
                if job.driver.error is not None:
                    self._error = first_line(job.driver.error, limit=None)
                    log.error("driver_raised", error=self._error, exc_info=job.driver.error)
                    return StopReason.DRIVER_RAISED
                log.info("driver_returned")
                return StopReason.DRIVER_RETURNED
            failed = [m for m in job.groups if m.supervisor.state is GroupState.FAILED]
            if failed:
                self._error = "; ".join(str(m.supervisor.failure) for m in failed)
                return StopReason.GROUP_FAILED

    @property
    def stop_reason(self) -> StopReason | None:
        return self._stop_reason

    def _teardown(self, reason: StopReason) -> ExitCode:
        job = self.job
        with job.lock:
            self._stop_reason = self._stop_reason or reason
            reason = self._stop_reason
        if self._gcs_watch is not None:
            self._gcs_watch.stop()
        if reason is StopReason.GCS_UNREACHABLE:
            return self._abandon(reason)
        scope = teardown_scope(reason, adopting=job.adopting)
        job.phase = DaemonState.STOPPING
        self._stop_event.set()
        log.info("teardown_started", supervisor=self.spec.name, reason=reason.value, scope=scope.value, error=self._error)
        tear_down(job, reason, scope, self.driver_stop_grace_s, self._heartbeat.stop)
        assert job.fence is not None
        if job.fence.superseded is not None:  # found out while stopping: everything was left alone
            reason = StopReason.SUPERSEDED
        code = reason.exit_code
        self._linger_metrics(code)
        self._stop_metrics()
        # A process that runs daemons one after another (tests, an embedding service) must not
        # export the series of groups it no longer supervises.
        for m in job.groups:
            job.hooks.on_group_removed(m.name)
        for pool in job.pools.values():
            job.hooks.on_pool_removed(pool.name_prefix)
        self._disconnect()
        log.info("supervisor_stopped", supervisor=self.spec.name, reason=reason.value, exit_code=int(code), error=self._error)
        return code


    def _abandon(self, reason: StopReason) -> ExitCode:
        """End without a word to the GCS (it is away: every call would wait for it): the job, its
        record and the Ray connection are left as they are; the caller exits the process at once
        (``os._exit``: Ray's own clean-up at exit would wait for the GCS too)."""
        self.job.phase = DaemonState.STOPPING
        self._stop_event.set()
        self._heartbeat.halt()
        self._stop_metrics()
        log.error("supervisor_stopped", supervisor=self.spec.name, reason=reason.value, exit_code=int(reason.exit_code), error=self._error)
        return reason.exit_code


def _ray_version() -> str:
    import ray

    return ray.__version__


def _probe_answer(result: ProbeResult) -> tuple[int, str, bytes]:
    return (200 if result.ok else 503), "text/plain; charset=utf-8", (result.detail + "\n").encode()
