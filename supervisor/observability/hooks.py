"""Lifecycle hooks: where metrics and logs attach to what the library does.

The library calls these at each lifecycle step instead of sprinkling metric and log calls through its
logic. :class:`LifecycleHooks` does nothing; :class:`ObservingHooks` (the default) records the
Prometheus metrics of :mod:`supervisor.observability.metrics` and writes structured log events. Subclass either to
add alerts or tracing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol, TextIO

from ..failure import FailureReason
from . import metrics
from .log import get_logger

__all__ = ["LifecycleHooks", "ObservingHooks", "ConsoleProgressHooks", "default_hooks"]

log = get_logger("lifecycle")


# The hooks read the lower layers' facts through these shapes, not their classes: observability sits
# below placement and supervision, which call it. States arrive as their own enums (supervision's
# GroupState, WorkerState and DrainOutcome are string enums: their members are their label values).


class ResourceDiagnosisView(Protocol):
    """What the hooks read of a resource wait's diagnosis (``placement.resources.ResourceDiagnosis``)."""

    def as_fields(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


class InitOutcomeView(Protocol):
    """What the hooks read of an init call's outcome (``supervision.init_policy.InitOutcome``)."""

    @property
    def value(self) -> str: ...

    @property
    def ok(self) -> bool: ...


class InitAttemptView(Protocol):
    """One init call on one rank, as the hooks read it: the shape of ``supervision.init_policy.RankAttempt``,
    named here so that observability, a lower layer, does not import supervision."""

    @property
    def rank(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def outcome(self) -> InitOutcomeView: ...
    @property
    def error(self) -> str | None: ...
    @property
    def node_id(self) -> str | None: ...
    @property
    def bundle(self) -> str | None: ...
    @property
    def duration_s(self) -> float: ...

    def describe(self) -> str: ...


class LifecycleHooks:
    """No-op hooks; every method may be overridden."""

    def on_resource_wait_progress(self, pool: str, waited_s: float, diagnosis: ResourceDiagnosisView) -> None:
        """A pool is still waiting for its placement groups (called at a steady cadence)."""

    def on_resource_wait_done(self, pool: str, waited_s: float, outcome: str) -> None:
        """A pool's wait ended: ``outcome`` is ``ready``, ``timeout``, ``infeasible`` or ``error``."""

    def on_init_attempt(self, group: str, attempt: InitAttemptView) -> None:
        """One rank finished one call of the group's init method (any outcome)."""

    def on_worker_failed(self, group: str, rank: int, reason: FailureReason, detail: str, detection_s: float | None) -> None:
        """A supervised rank was detected failed; ``detection_s`` is death-to-detection when known."""

    def on_worker_replaced(self, group: str, rank: int, reason: FailureReason) -> None:
        """A rank's actor was killed and a fresh one created into the same bundle."""

    def on_worker_recovered(self, group: str, rank: int, recovery_s: float | None) -> None:
        """A replaced rank serves calls again; ``recovery_s`` is death (or detection) to serving."""

    def on_placement_drift(self, group: str, rank: int, original_node: str, current_node: str) -> None:
        """A replacement landed on another node than its bundle had at pool creation."""

    def on_drift_state(self, group: str, drifted_workers: int) -> None:
        """How many ranks of the group currently run away from their original node."""

    def on_worker_states(self, group: str, counts: Mapping[StrEnum, int]) -> None:
        """Workers of the group per state (``WorkerState``), after every change."""

    def on_group_state(self, group: str, source: StrEnum, target: StrEnum) -> None:
        """The group's state changed (``GroupState`` members: ``running``, ``recovering``, ``failed``, ...)."""

    def on_group_states(self, group: str, states: Mapping[StrEnum, int]) -> None:
        """The group's state as one-hot values (1 for the state it is in), published with its workers'."""

    def on_group_failed(self, group: str, message: str) -> None:
        """The group is FAILED (restart budget exhausted or replacement failed); no more restarts."""

    def on_rendezvous_changed(self, group: str, master_addr: str, master_port: int) -> None:
        """Rank 0 was replaced, so every rank got a new MASTER_ADDR/MASTER_PORT."""

    def on_pool_bundles(self, pool: str, placed: int, pending: int) -> None:
        """A pool's bundles: placed on a node, or pending (waiting, or being re-placed after a node loss)."""

    def on_standby_state(self, group: str, ready: int, starting: int, wanted: int) -> None:
        """A group's standbys: constructed and ready to take over, or still starting, of ``wanted``."""

    def on_restart_budget(self, group: str, in_window: int, max_restarts: int) -> None:
        """Restarts within the group's window, of the ``max_restarts`` allowed (at every change,
        including restarts ageing out of the window)."""

    def on_standby_failed(self, group: str, actor: str, detail: str) -> None:
        """A standby died, or its constructor raised (it is dropped and another one started)."""

    def on_group_removed(self, group: str) -> None:
        """The group is gone for good (its supervisor stopped, or the daemon tore it down)."""

    def on_pool_removed(self, pool: str) -> None:
        """The pool is gone for good (its placement groups were removed)."""

    def on_state_snapshot(self, group: str, step: int, seconds: float, nbytes: int) -> None:
        """A snapshot of the group at ``step`` was taken: its ranks held for ``seconds`` (the copy to host
        memory); ``nbytes``: one copy of the newest complete snapshot (0 before the first)."""

    def on_state_snapshot_skipped(self, group: str, step: int, reason: str) -> None:
        """A snapshot was not taken: it would pass the group's memory bound."""

    def on_state_boundary(self, group: str, step: int, steps_since_snapshot: int | None, held_bytes: int, diverged: int) -> None:
        """The driver reached the boundary before ``step``: the group's newest complete snapshot is
        ``steps_since_snapshot`` steps back (None: there is none), its snapshots hold ``held_bytes``,
        and ``diverged`` replicas differ from the others."""

    def on_state_restored(self, group: str, kind: str, seconds: float, ranks: tuple[int, ...]) -> None:
        """State was loaded into ``ranks`` (``kind``: ``peer``, ``snapshot`` or ``disk``)."""

    def on_rolled_back(self, group: str, groups: tuple[str, ...], step: int, medium: str, seconds: float, cause: str) -> None:
        """A failure of ``group`` took every stateful group (``groups``) back to the snapshot of ``step``."""

    def on_state_replayed(self, group: str, step: int, calls: int, seconds: float) -> None:
        """``group`` lost state, went back to its own snapshot of ``step`` and ran its ``calls`` logged
        mutating calls again (in ``seconds``): the driver saw nothing."""

    def on_replay_log(self, group: str, calls: int, nbytes: int) -> None:
        """``group``'s replay log now holds ``calls`` calls whose arguments take ``nbytes``."""

    def on_node_draining(self, group: str, node: str, deadline_in_s: float | None, ranks: list[int]) -> None:
        """``node``, where ``ranks`` of ``group`` run, is being drained (its deadline in ``deadline_in_s``; None: none)."""

    def on_drain_outcome(self, group: str, rank: int, node: str | None, outcome: StrEnum, detail: str) -> None:
        """What became of a rank's drain notice other than a hand-over (:class:`~supervisor.supervision.drain.DrainOutcome`)."""

    def on_rank_handed_over(self, group: str, rank: int, seconds: float, source_node: str | None, target_node: str | None) -> None:
        """``rank`` left its draining node: its successor serves ``seconds`` after the hand-over started."""


class ObservingHooks(LifecycleHooks):
    """Record metrics and structured logs for every lifecycle event."""

    def on_resource_wait_progress(self, pool: str, waited_s: float, diagnosis: ResourceDiagnosisView) -> None:
        log.info("waiting_for_resources", pool=pool, waited_s=round(waited_s, 1), **diagnosis.as_fields())

    def on_resource_wait_done(self, pool: str, waited_s: float, outcome: str) -> None:
        metrics.RESOURCE_WAIT.labels(pool=pool).observe(waited_s)
        log.info("resource_wait_done", pool=pool, waited_s=round(waited_s, 3), outcome=outcome)

    def on_init_attempt(self, group: str, attempt: InitAttemptView) -> None:
        metrics.INIT_ATTEMPTS.labels(group=group, outcome=attempt.outcome.value).inc()
        event = "init_attempt_ok" if attempt.outcome.ok else "init_attempt_failed"
        log.info(
            event,
            group=group,
            rank=attempt.rank,
            attempt=attempt.attempt,
            outcome=attempt.outcome.value,
            error=attempt.error,
            node_id=attempt.node_id,
            bundle=attempt.bundle,
            duration_s=round(attempt.duration_s, 3),
        )

    def on_worker_failed(self, group: str, rank: int, reason: FailureReason, detail: str, detection_s: float | None) -> None:
        if detection_s is not None:
            metrics.FAILURE_DETECTION.labels(group=group).observe(detection_s)
        log.warning("worker_failed", group=group, rank=rank, reason=reason, detail=detail, detection_s=detection_s)

    def on_worker_replaced(self, group: str, rank: int, reason: FailureReason) -> None:
        metrics.WORKER_RESTARTS.labels(group=group, reason=reason).inc()
        log.info("worker_replaced", group=group, rank=rank, reason=reason)

    def on_worker_recovered(self, group: str, rank: int, recovery_s: float | None) -> None:
        if recovery_s is not None:
            metrics.RECOVERY.labels(group=group).observe(recovery_s)
        log.info("worker_recovered", group=group, rank=rank, recovery_s=recovery_s)

    def on_placement_drift(self, group: str, rank: int, original_node: str, current_node: str) -> None:
        metrics.PLACEMENT_DRIFT_EVENTS.labels(group=group).inc()
        log.warning("placement_drift", group=group, rank=rank, original_node=original_node, current_node=current_node)

    def on_drift_state(self, group: str, drifted_workers: int) -> None:
        metrics.PLACEMENT_DRIFT_WORKERS.labels(group=group).set(drifted_workers)

    def on_worker_states(self, group: str, counts: Mapping[StrEnum, int]) -> None:
        for state, count in counts.items():
            metrics.WORKERS.labels(group=group, state=state).set(count)

    def on_group_states(self, group: str, states: Mapping[StrEnum, int]) -> None:
        for state, value in states.items():
            metrics.GROUP_STATE.labels(group=group, state=state).set(value)

    def on_group_failed(self, group: str, message: str) -> None:
        log.error("group_failed", group=group, message=message)

    def on_rendezvous_changed(self, group: str, master_addr: str, master_port: int) -> None:
        log.info("rendezvous_changed", group=group, master_addr=master_addr, master_port=master_port)

    def on_pool_bundles(self, pool: str, placed: int, pending: int) -> None:
        metrics.POOL_BUNDLES.labels(pool=pool, state="placed").set(placed)
        metrics.POOL_BUNDLES.labels(pool=pool, state="pending").set(pending)

    def on_standby_state(self, group: str, ready: int, starting: int, wanted: int) -> None:
        metrics.STANDBY_WORKERS.labels(group=group, state="ready").set(ready)
        metrics.STANDBY_WORKERS.labels(group=group, state="starting").set(starting)
        metrics.STANDBYS_WANTED.labels(group=group).set(wanted)

    def on_restart_budget(self, group: str, in_window: int, max_restarts: int) -> None:
        metrics.RESTARTS_IN_WINDOW.labels(group=group).set(in_window)
        metrics.MAX_RESTARTS.labels(group=group).set(max_restarts)

    def on_standby_failed(self, group: str, actor: str, detail: str) -> None:
        log.warning("standby_failed", group=group, actor=actor, detail=detail)

    def on_group_removed(self, group: str) -> None:
        # Its series would otherwise be exported, frozen, for as long as the process lives.
        metrics.forget_group(group)
        log.debug("group_metrics_removed", group=group)

    def on_pool_removed(self, pool: str) -> None:
        metrics.forget_pool(pool)
        log.debug("pool_metrics_removed", pool=pool)

    def on_state_snapshot(self, group: str, step: int, seconds: float, nbytes: int) -> None:
        import time

        metrics.STATE_SNAPSHOT.labels(group=group).observe(seconds)
        metrics.STATE_SNAPSHOT_STEP.labels(group=group).set(step)
        metrics.STATE_SNAPSHOT_TIME.labels(group=group).set(time.time())
        log.debug("state_snapshot", group=group, step=step, seconds=round(seconds, 4), nbytes=nbytes)

    def on_state_snapshot_skipped(self, group: str, step: int, reason: str) -> None:
        metrics.STATE_SNAPSHOT_SKIPPED.labels(group=group).inc()

    def on_state_boundary(self, group: str, step: int, steps_since_snapshot: int | None, held_bytes: int, diverged: int) -> None:
        # No snapshot at all counts every step so far: the alert on a stale snapshot covers a missing one.
        metrics.STATE_STEPS_SINCE_SNAPSHOT.labels(group=group).set(step if steps_since_snapshot is None else steps_since_snapshot)
        metrics.STATE_SNAPSHOT_BYTES.labels(group=group).set(held_bytes)
        metrics.STATE_DIVERGED_REPLICAS.labels(group=group).set(diverged)

    def on_state_restored(self, group: str, kind: str, seconds: float, ranks: tuple[int, ...]) -> None:
        metrics.STATE_RESTORE.labels(group=group, kind=kind).observe(seconds)
        log.info("state_restored", group=group, kind=kind, ranks=list(ranks), seconds=round(seconds, 3))

    def on_rolled_back(self, group: str, groups: tuple[str, ...], step: int, medium: str, seconds: float, cause: str) -> None:
        metrics.STATE_ROLLBACKS.labels(group=group, medium=medium).inc()
        for name in groups:
            metrics.STATE_RESTORE.labels(group=name, kind=metrics.restore_kind(medium)).observe(seconds)

    def on_state_replayed(self, group: str, step: int, calls: int, seconds: float) -> None:
        metrics.STATE_REPLAYED_CALLS.labels(group=group).inc(calls)
        metrics.STATE_REPLAY.labels(group=group).observe(seconds)

    def on_replay_log(self, group: str, calls: int, nbytes: int) -> None:
        metrics.STATE_REPLAY_LOG_BYTES.labels(group=group).set(nbytes)

    def on_node_draining(self, group: str, node: str, deadline_in_s: float | None, ranks: list[int]) -> None:
        log.warning("node_draining", group=group, node=node, deadline_in_s=None if deadline_in_s is None else round(deadline_in_s, 1), ranks=ranks)

    def on_drain_outcome(self, group: str, rank: int, node: str | None, outcome: StrEnum, detail: str) -> None:
        metrics.DRAINS.labels(group=group, outcome=outcome).inc()
        log.warning("drain_not_handed_over", group=group, rank=rank, node=node, outcome=outcome, detail=detail)

    def on_rank_handed_over(self, group: str, rank: int, seconds: float, source_node: str | None, target_node: str | None) -> None:
        metrics.DRAINS.labels(group=group, outcome="handed_over").inc()
        metrics.HANDOVER.labels(group=group).observe(seconds)
        log.info("rank_handed_over", group=group, rank=rank, seconds=round(seconds, 3), source_node=source_node, target_node=target_node)


def default_hooks() -> LifecycleHooks:
    return ObservingHooks()


class ConsoleProgressHooks(ObservingHooks):
    """The default hooks plus one progress line per report on a console stream (for CLIs and examples).

    Args:
        stream: where the lines go (default ``sys.stderr``).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr

    def on_resource_wait_progress(self, pool: str, waited_s: float, diagnosis: ResourceDiagnosisView) -> None:
        super().on_resource_wait_progress(pool, waited_s, diagnosis)
        print(f"[{waited_s:5.0f}s] waiting for resources: {diagnosis.summary()}", file=self.stream, flush=True)

    def on_resource_wait_done(self, pool: str, waited_s: float, outcome: str) -> None:
        super().on_resource_wait_done(pool, waited_s, outcome)
        if waited_s >= 1.0:
            print(f"[{waited_s:5.0f}s] pool {pool}: {outcome}", file=self.stream, flush=True)

    def on_init_attempt(self, group: str, attempt: InitAttemptView) -> None:
        super().on_init_attempt(group, attempt)
        if not attempt.outcome.ok:
            print(f"init of group {group}: {attempt.describe()}", file=self.stream, flush=True)
