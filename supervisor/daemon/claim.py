"""Claiming a supervisor: refuse while another daemon of the name is alive, take over one that is gone
(its job is then re-adopted). The owner fence decides, atomically and on its own clock (:mod:`.fence`)."""

from __future__ import annotations

import time

from ..errors import SupervisorError
from ..observability.log import get_logger
from .events import EventKind, EventLog, EventType
from .fence import ClaimVerdict
from .job import Job
from .liveness import ProcessIdentity
from .record import SupervisorRecord

__all__ = ["AlreadyRunningError", "claim"]

log = get_logger("daemon")


class AlreadyRunningError(SupervisorError):
    """Another daemon with this name is alive (its fence heard from it within its grace period)."""


def claim(job: Job, address: str | None, metrics_address: str | None, ray_version: str) -> None:
    """Claim ``job``'s supervisor for this incarnation: sets ``job.record`` and ``job.previous``.

    Raises:
        AlreadyRunningError: another daemon of this name is alive, or claims it at the same moment.
    """
    store, spec, fence = job.store, job.spec, job.fence
    assert store is not None and fence is not None
    previous = store.get(spec.name)
    sup = spec.supervisor
    verdict, before = fence.claim(job.owner, sup.orphan_grace_s, sup.heartbeat_interval_s, record=previous)
    if verdict is not ClaimVerdict.GRANTED:
        who = (
            f"pid {previous.pid} on {previous.host}"
            if previous is not None and previous.owner == before.owner
            else "another daemon starting at the same moment"
        )
        raise AlreadyRunningError(
            f"supervisor {spec.name} is already running ({who}, heard from {before.silent_s:.1f}s ago; it is taken "
            f"over once silent for {before.grace_s:g}s): stop it with `supervisor stop {spec.name}`"
        )
    job.previous = previous
    now = time.time()
    me = ProcessIdentity.current()
    # What the earlier incarnation owned stays in the record until this one has adopted it, so a
    # crash in the middle of re-adoption loses nothing.
    job.record = SupervisorRecord(
        name=spec.name,
        namespace=spec.namespace,
        owner=job.owner,
        generation=fence.generation or 0,
        pid=me.pid,
        host=me.host,
        boot_id=me.boot_id,
        pid_namespace=me.pid_namespace,
        started_at=now,
        heartbeat_at=now,
        heartbeat_interval_s=sup.heartbeat_interval_s,
        orphan_grace_s=sup.orphan_grace_s,
        detached_grace_s=sup.detached_grace_s,
        ray_address=address,
        ray_version=ray_version,
        metrics_address=metrics_address,
        pools=dict(previous.pools) if previous else {},
        groups=dict(previous.groups) if previous else {},
        driver_progress=dict(previous.driver_progress) if previous else {},
        failures=list(previous.failures) if previous else [],
        heartbeat_seq=previous.heartbeat_seq if previous else 0,
    )
    job.hooks.failures.extend(job.record.failures)
    job.hooks.events = EventLog(store.events(spec.name))  # the history goes on across starts and takeovers
    job.hooks.events.generation = job.record.generation
    if previous is not None:
        how = (
            "re-adopts the detached job"
            if previous.detached
            else f"its daemon was silent for {before.silent_s:.0f}s"
        )
        job.hooks.event(
            EventKind.TAKEN_OVER,
            f"generation {job.record.generation} (pid {me.pid} on {me.host}) took over from pid {previous.pid} on {previous.host}: {how}",
            EventType.NORMAL if previous.detached else EventType.WARNING,
        )
    job.write_record()
    if previous is not None:
        log.info(
            "supervisor_record_taken_over", supervisor=spec.name, previous_pid=previous.pid, previous_host=previous.host,
            previous_state=previous.state, generation=fence.generation,
        )  # fmt: skip
