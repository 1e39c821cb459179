"""Teardown: every way out of a daemon except SIGKILL ends here. Depending on why it stops
(:func:`~supervisor.daemon.stop.teardown_scope`) it removes everything the supervisor owns, ending
with a sweep by name so nothing is left even after a half-finished start, or it leaves the job for
the next start (detached) or for the daemon that took over (superseded)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import first_line
from ..observability.log import get_logger
from .job import Job, ManagedGroup
from .ownership import find_owned, remove_owned
from .record import DaemonState, SupervisorRecord
from .stop import StopReason, TeardownScope

__all__ = ["tear_down"]

log = get_logger("daemon")


def tear_down(job: Job, reason: StopReason, scope: TeardownScope, driver_stop_grace_s: float, stop_heartbeat: Callable[[], None]) -> None:
    """Stop the driver and the supervisors, then remove what ``scope`` says (or mark the job detached)."""
    if scope is TeardownScope.EVERYTHING:
        _write_record_quietly(job)
    if job.driver is not None and not job.driver.done.is_set():
        if not job.driver.join(driver_stop_grace_s):
            log.warning("driver_still_running", waited_s=driver_stop_grace_s)
    for m in reversed(job.groups):  # stop in reverse start order
        m.supervisor.stop()
    stop_heartbeat()
    if scope is TeardownScope.EVERYTHING:
        _remove_everything(job)
    elif reason.detaches:
        _mark_detached(job)
    elif reason is StopReason.START_FAILED:
        log.error(
            "adopted_resources_left_in_place",
            supervisor=job.spec.name,
            hint="fix the cause and start again to re-adopt them, or `supervisor gc` once the record is orphaned",
        )


def _remove_everything(job: Job) -> None:
    for m in reversed(job.groups):
        _shutdown_workers(m)
        m.group.kill()
    for pool in reversed(list(job.pools.values())):
        pool.teardown()
    try:
        assert job.store is not None
        current = job.superseded_by()
        if current is not None:
            log.error("superseded", supervisor=job.spec.name, by_pid=current.pid)
            return  # what is left belongs to the daemon that took over
        remove_owned(job.spec.name, find_owned(job.spec.name))  # what a half-finished start or an earlier run left
        with job.lock:
            job.record = None  # nothing may write the record again once it is deleted
        job.store.delete(job.spec.name)
    except Exception as exc:
        log.error("teardown_incomplete", error=first_line(exc))


def _mark_detached(job: Job) -> None:
    # The record stays, with its facts, for the next start; its heartbeat stops here, so that start
    # takes it over at once on this host (the pid is gone), elsewhere after orphan_grace_s.
    try:
        assert job.store is not None and job.record is not None
        with job.lock:
            job.record.state = DaemonState.DETACHED.value
            data = job.record.to_json()
        job.store.put(SupervisorRecord.from_json(data))
        job.store.clear_stop(job.spec.name)
        log.info("detached", supervisor=job.spec.name, hint="start the same spec again to re-adopt the pools and workers")
    except Exception as exc:
        log.error("detach_incomplete", error=first_line(exc))


def _write_record_quietly(job: Job) -> None:
    try:
        job.write_record()
    except Exception as exc:
        log.warning("record_write_failed", error=first_line(exc))


def _shutdown_workers(m: ManagedGroup) -> None:
    # Graceful stop, OTP-style: ask (bounded by shutdown_timeout_s), then kill.
    import ray

    if not m.spec.shutdown_method or not m.group.workers:
        return
    try:
        refs = m.group.execute_all_async(m.spec.shutdown_method)
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=m.spec.shutdown_timeout_s)
        if pending:
            log.warning("shutdown_method_timed_out", group=m.name, ranks_pending=len(pending), timeout_s=m.spec.shutdown_timeout_s)
    except Exception as exc:
        log.warning("shutdown_method_failed", group=m.name, error=first_line(exc))
