"""Teardown: every way out of a daemon except SIGKILL ends here. Depending on why it stops
(:func:`~supervisor.daemon.stop.teardown_scope`) it removes everything the supervisor owns, ending
with a sweep by name so nothing is left even after a half-finished start, or it leaves the job for
the next start (detached) or for the daemon that took over (superseded).

Every removal goes through the owner fence: if another daemon took the supervisor over (this one was
paused past its grace period), the first refused call stops the teardown and nothing of the new
owner's is touched. The heartbeat beats on (state "stopping") until the end, so ``supervisor stop``
waits for slow shutdown methods and nobody collects a job that is still being torn down.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import SupersededError, first_line
from ..observability.log import get_logger
from .events import EventKind, EventType, events_to_json
from .job import Job, ManagedGroup
from .ownership import find_owned
from .record import DaemonState
from .stop import StopReason, TeardownScope

__all__ = ["tear_down"]

log = get_logger("daemon")


def tear_down(job: Job, reason: StopReason, scope: TeardownScope, driver_stop_grace_s: float, stop_heartbeat: Callable[[], None]) -> None:
    """Stop the driver and the supervisors, then remove what ``scope`` says (or mark the job detached)."""
    if scope is TeardownScope.EVERYTHING:
        job.persist()  # status shows "stopping" at once
    if job.driver is not None and not job.driver.done.is_set():
        if not job.driver.join(driver_stop_grace_s):
            log.warning("driver_still_running", waited_s=driver_stop_grace_s)
    for m in reversed(job.groups):  # stop in reverse start order
        m.supervisor.stop()
    try:
        if scope is TeardownScope.EVERYTHING:
            _remove_everything(job, reason, stop_heartbeat)
        else:
            stop_heartbeat()
            if reason.detaches:
                _mark_detached(job)
            elif reason is StopReason.START_FAILED:
                log.error(
                    "adopted_resources_left_in_place",
                    supervisor=job.spec.name,
                    hint="fix the cause and start again to re-adopt them, or `supervisor gc` once the record is orphaned",
                )
    except SupersededError as exc:
        log.error("teardown_left_to_new_owner", supervisor=job.spec.name, error=str(exc))
    finally:
        stop_heartbeat()


def _remove_everything(job: Job, reason: StopReason, stop_heartbeat: Callable[[], None]) -> None:
    assert job.fence is not None
    try:
        job.fence.check()  # shutdown methods are not fenced calls: ask right before them
        for m in reversed(job.groups):
            _shutdown_workers(m)
            m.group.kill()
        for pool in reversed(list(job.pools.values())):
            pool.teardown()
        job.fence.remove_owned(find_owned(job.spec.name))  # what a half-finished start or an earlier run left
        stop_heartbeat()
        with job.lock:
            job.record = None  # nothing may write the record again once it is deleted
        job.hooks.event(
            EventKind.STOPPED,
            f"torn down ({reason.value})",
            EventType.WARNING if reason.exit_code else EventType.NORMAL,
        )
        job.fence.retire(events_to_json(job.hooks.events.events()))
    except SupersededError:
        raise
    except Exception as exc:
        log.error("teardown_incomplete", error=first_line(exc))


def _mark_detached(job: Job) -> None:
    # The record stays, with its facts, for the next start; its heartbeat stops here, so that start
    # takes it over at once (a detached owner is gone by definition).
    try:
        assert job.store is not None
        job.write_record(DaemonState.DETACHED)
        job.store.clear_stop(job.spec.name, job.owner)
        log.info("detached", supervisor=job.spec.name, hint="start the same spec again to re-adopt the pools and workers")
    except SupersededError:
        raise
    except Exception as exc:
        log.error("detach_incomplete", error=first_line(exc))


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
