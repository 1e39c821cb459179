"""Claiming a supervisor's record: refuse while another daemon of the name is alive, take over one
that is gone (its job is then re-adopted)."""

from __future__ import annotations

import os
import socket
import time

from ..errors import SupervisorError
from ..observability.log import get_logger
from .job import Job
from .record import DaemonState, Liveness, SupervisorRecord, liveness

__all__ = ["AlreadyRunningError", "claim"]

log = get_logger("daemon")


class AlreadyRunningError(SupervisorError):
    """Another daemon with this name is alive (its heartbeat is fresh)."""


def claim(job: Job, address: str | None, metrics_address: str | None, ray_version: str) -> None:
    """Claim ``job``'s record for this incarnation: sets ``job.record`` and ``job.previous``.

    Raises:
        AlreadyRunningError: another daemon of this name is alive, or claims it at the same moment.
    """
    store, spec = job.store, job.spec
    assert store is not None
    previous = store.get(spec.name)
    now = time.time()
    detached = previous is not None and previous.state == DaemonState.DETACHED.value
    if previous is not None and not detached and liveness(previous, now) is not Liveness.ORPHANED and _may_be_alive(previous):
        raise AlreadyRunningError(
            f"supervisor {spec.name} is already running (pid {previous.pid} on {previous.host}, heartbeat "
            f"{previous.heartbeat_age(now):.1f}s ago): stop it with `supervisor stop {spec.name}`"
        )
    if not store.claim(spec.name, previous.owner if previous else None, job.owner):
        raise AlreadyRunningError(f"supervisor {spec.name} is being started by another daemon at the same time")
    job.previous = previous
    # What the earlier incarnation owned stays in the record until this one has adopted it, so a
    # crash in the middle of re-adoption loses nothing.
    job.record = SupervisorRecord(
        name=spec.name,
        namespace=spec.namespace,
        owner=job.owner,
        pid=os.getpid(),
        host=socket.gethostname(),
        started_at=now,
        heartbeat_at=now,
        heartbeat_interval_s=spec.supervisor.heartbeat_interval_s,
        orphan_grace_s=spec.supervisor.orphan_grace_s,
        ray_address=address,
        ray_version=ray_version,
        metrics_address=metrics_address,
        pools=dict(previous.pools) if previous else {},
        groups=dict(previous.groups) if previous else {},
        driver_progress=dict(previous.driver_progress) if previous else {},
        failures=list(previous.failures) if previous else [],
    )
    job.hooks.failures.extend(job.record.failures)
    job.write_record()
    if previous is not None:
        log.info("supervisor_record_taken_over", supervisor=spec.name, previous_pid=previous.pid, previous_host=previous.host)


def _may_be_alive(record: SupervisorRecord) -> bool:
    """False when the record's daemon ran on this host and its pid is gone (a crash: take over at once)."""
    if record.host != socket.gethostname():
        return True
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return record.pid != os.getpid()
