"""Blocking group calls that survive rank failures.

When a supervised group runs a call and a rank dies (or does not answer within the call timeout), the
call has a defined outcome (:class:`InFlightPolicy`):

* RETRY: tell the supervisor, wait for the rank's replacement, run that rank's shard again on it, and
  return every rank's result in rank order;
* RAISE: let the other ranks finish, then raise :class:`WorkerFailedError` naming the failed ranks,
  their nodes and the cause, with the survivors' results attached.

User exceptions raised inside the method are not failures of the rank: they propagate as usual.

A *stateful* group (its supervisor has a state domain) is one collective: when a rank dies, the
others' calls fail too (their collective lost a peer), so their errors are collateral, not the
method's own. Its call collects every rank's outcome before judging; after a failure it waits until
the group has recovered (and its state restored), then re-runs idempotent shards or raises; if the
recovery rolled the job back, it raises :class:`~supervisor.errors.RolledBack` with the step to resume
from. A new call first raises a rollback the driver has not been told of.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import RolledBack, WorkerFailedError, first_line
from ..failure import ErrorKind, classify_error
from ..observability.log import get_logger
from .death_verdict import UnavailableClock
from .in_flight_policy import InFlightPolicy, resolve_in_flight_policy
from .restart_policy import FailureReason

if TYPE_CHECKING:
    from ..core.group.call_runner import PerRank
    from ..core.group.group import WorkerGroup
    from ..core.worker.registration import MethodSpec
    from ..state.domain import StateDomain
    from .config import SupervisionConfig
    from .gate import CallGate
    from .states import RankStatus

__all__ = [
    "InFlightPolicy", "WorkerFailedError", "RolledBack", "SupervisedCallRunner", "resolve_in_flight_policy", "run_supervised",
]  # fmt: skip

log = get_logger("supervised_call")


class Supervising(Protocol):
    """What a supervised call uses of its group's :class:`~supervisor.supervision.GroupSupervisor`
    (typed structurally: the supervisor module imports this one)."""

    config: SupervisionConfig
    gate: CallGate
    state_domain: StateDomain | None

    def ranks(self) -> list[RankStatus]: ...


class SupervisedCallRunner:
    """The :class:`~supervisor.core.group.call_runner.CallRunner` a ``GroupSupervisor`` installs on its
    group (``group.call_runner``): the group's blocking calls then run through :func:`run_supervised`,
    with the in-flight policy and the call timeout of the supervisor's config at the time of the call."""

    def __init__(self, supervisor: Supervising) -> None:
        self.supervisor = supervisor

    def run_call(self, group: WorkerGroup, spec: MethodSpec, method_name: str, per_rank: PerRank) -> list[Any]:
        config = self.supervisor.config
        policy = resolve_in_flight_policy(spec, config.in_flight)
        mutates = spec.mutates_state or method_name in config.state.mutating_methods
        return run_supervised(group, self.supervisor, method_name, per_rank, policy, config.call_timeout_s, mutates=mutates)


def run_supervised(
    group: WorkerGroup,
    supervisor: Supervising,
    method_name: str,
    per_rank: dict[int, tuple[tuple[Any, ...], dict[str, Any]]],
    policy: InFlightPolicy,
    call_timeout_s: float | None,
    poll_s: float = 0.25,
    unavailable_timeout_s: float | None = None,
    mutates: bool = False,
) -> list[Any]:
    """Run ``method_name`` on the ranks of ``per_rank`` and return their results in rank order.

    Each rank's shard is timed on its own, from its submission (to the rank, or to its replacement):
    time spent waiting for a replacement never counts, and a rank whose result is in is never declared
    hung. While one rank waits for its replacement, the others' results are collected and their
    timeouts keep running. A rank that Ray reports unavailable (unreachable, not known dead) is asked
    again for up to ``unavailable_timeout_s`` (default: the supervisor's ``probe_timeout_s``), after
    which it is hung.

    A stateful group whose recovery replays (``StateConfig.recovery``) runs the whole call again once
    the group has restored its own snapshot and replayed its logged calls: the caller gets that run's
    results, as if no rank had died. A completed ``mutates`` call is logged for a later replay.

    Raises:
        WorkerFailedError: a rank failed and ``policy`` is RAISE.
        GroupFailedError: a rank failed, ``policy`` is RETRY, and the group failed instead of replacing it.
        Exception: whatever the method itself raised (RayTaskError), unchanged.
    """
    return _SupervisedCall(
        group, supervisor, method_name, per_rank, call_timeout_s, poll_s,
        supervisor.config.probe_timeout_s if unavailable_timeout_s is None else unavailable_timeout_s,
        retry=policy is InFlightPolicy.RETRY, mutates=mutates,
    ).run()  # fmt: skip


class _SupervisedCall:
    """One blocking call: shards in flight, ranks waiting for their replacement, results."""

    def __init__(
        self, group: WorkerGroup, supervisor: Supervising, method_name: str, per_rank: dict[int, tuple[tuple[Any, ...], dict[str, Any]]],
        call_timeout_s: float | None, poll_s: float, unavailable_timeout_s: float, retry: bool, mutates: bool = False,
    ) -> None:  # fmt: skip
        self.group, self.supervisor, self.method_name, self.per_rank = group, supervisor, method_name, per_rank
        self.call_timeout_s, self.poll_s, self.unavailable_timeout_s, self.retry = call_timeout_s, poll_s, unavailable_timeout_s, retry
        self.mutates = mutates
        # A call that may change state (not idempotent, or marked so): a death inside it leaves the
        # group at an unknown step.
        self.may_update = mutates or not retry
        # The group restores and replays its own state: the whole call runs again, never one shard.
        self.replays = supervisor.state_domain is not None and supervisor.config.state.replays
        if self.replays:
            self.retry = False
        self.in_flight: dict[Any, tuple[int, int, float]] = {}  # ref -> (rank, generation, submitted at)
        self.awaiting: dict[int, _Awaiting] = {}  # ranks whose shard waits to be submitted again
        self.unavailable = UnavailableClock(unavailable_timeout_s, time.monotonic)  # keyed by (rank, generation)
        self.results: dict[int, Any] = {}
        self.failed: dict[int, str] = {}
        self.domain = supervisor.state_domain  # None: a group without state
        self.errors: dict[int, tuple[int, BaseException]] = {}  # stateful: rank -> (generation, its own error)
        self.rank_failed = False  # a rank of this call failed (a stateful group's other errors are collateral)
        self.failed_generations: dict[int, int] = {}  # rank -> the generation that failed

    def run(self) -> list[Any]:
        gate = self.supervisor.gate
        gate.enter_call()
        try:
            return self._run()
        finally:
            gate.exit_call()

    def _run(self) -> list[Any]:
        gate = self.supervisor.gate
        if self.replays:
            return self._run_replaying()
        if self.domain is None:
            for rank in self.per_rank:
                self._submit(rank, *gate.acquire(rank))  # waits out a recovery; raises if the group failed
            return self._finish()
        with self._submitted_to_every_rank(update=not self.retry):
            return self._finish()

    @contextlib.contextmanager
    def _submitted_to_every_rank(self, update: bool) -> Iterator[None]:
        """A stateful group's call: every rank's shard submitted under the domain's lock (nothing
        reaches a rank unannounced after a rollback); while ``update``, the loop knows a failure now
        leaves the group at an unknown step. The body collects the outcomes."""
        gate = self.supervisor.gate
        assert self.domain is not None
        acquired = {rank: gate.acquire(rank) for rank in self.per_rank}
        if update:
            gate.update_started()
        try:
            with self.domain.calls():
                for rank, (generation, actor) in acquired.items():
                    self._submit(rank, generation, actor)
            yield
        finally:
            if update:
                gate.update_ended()

    @property
    def _lost_a_rank(self) -> bool:
        """A rank of this call failed (a stateful group's other errors are then collateral)."""
        return bool(self.failed or (self.errors and self.rank_failed))

    def _run_replaying(self) -> list[Any]:
        gate = self.supervisor.gate
        assert self.domain is not None
        while True:
            with self._submitted_to_every_rank(update=self.may_update):
                self._collect_all()
            if not self._lost_a_rank:
                break
            # A rank died: wait until the group serves again, restored and replayed, then run it all again.
            for rank, generation in self.failed_generations.items():
                gate.await_replacement(rank, generation)  # raises GroupFailedError if the state could not come back
            gate.wait_running()
            self.domain.raise_pending(self.method_name, self.failed)  # another group's job-wide rollback
            log.info("call_rerun_after_replay", group=self.group.name, method=self.method_name, failed=self.failed)
            self.results, self.failed, self.errors, self.failed_generations, self.rank_failed = {}, {}, {}, {}, False
        if self.errors:  # the method's own error, no rank failed: unchanged, the lowest rank's
            raise self.errors[min(self.errors)][1]
        if self.mutates:
            self.domain.log_call(self.group, self.method_name, self.per_rank)
        return [self.results[r] for r in sorted(self.per_rank)]

    def _finish(self) -> list[Any]:
        self._collect_all()
        if self.domain is not None and self._lost_a_rank:
            self._after_stateful_failure()
        if self.failed:
            raise WorkerFailedError(self.method_name, self.failed, self.results)
        if self.errors:  # the method's own error, no rank failed: unchanged, the lowest rank's
            raise self.errors[min(self.errors)][1]
        return [self.results[r] for r in sorted(self.per_rank)]

    def _collect_all(self) -> None:
        """Until every shard's outcome is in (a shard that waits for its replacement runs again on it)."""
        import ray

        while self.in_flight or self.awaiting:
            self._resubmit_replaced()
            if not self.in_flight:
                self._wait_for_a_replacement()
                continue
            ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=self._wait_s())
            for ref in ready:
                self._collect(ref)
            self._judge_timeouts()
            if self.retry and self.rank_failed and self.errors and not self.in_flight:
                for rank, (generation, _) in self.errors.items():  # collateral: run again with the group
                    self.awaiting[rank] = _Awaiting(generation - 1, None, time.monotonic())
                self.errors.clear()

    def _after_stateful_failure(self) -> None:
        """Wait until the group runs again with its state restored; raise the rollback if there was one."""
        for rank, (_, exc) in self.errors.items():
            self.failed.setdefault(rank, f"collateral: {first_line(exc)}")
        self.errors.clear()
        assert self.domain is not None
        gate = self.supervisor.gate
        for rank, generation in self.failed_generations.items():  # the loop may not have seen it yet
            gate.await_replacement(rank, generation)  # raises GroupFailedError if the state could not be restored
        gate.wait_running()
        self.domain.raise_pending(self.method_name, self.failed)

    def _submit(self, rank: int, generation: int, actor: Any) -> None:
        args, kwargs = self.per_rank[rank]
        self.in_flight[self.group.call_actor(actor, self.method_name, args, kwargs)] = (rank, generation, time.monotonic())

    def _wait_s(self) -> float:
        if self.call_timeout_s is None:
            return self.poll_s
        oldest = min(submitted for _, _, submitted in self.in_flight.values())
        return max(0.0, min(self.poll_s, oldest + self.call_timeout_s - time.monotonic()))

    def _collect(self, ref: Any) -> None:
        import ray

        rank, generation, _ = self.in_flight.pop(ref)
        try:
            self.results[rank] = ray.get(ref)
            self.unavailable.answered((rank, generation))
        except Exception as exc:
            kind = classify_error(exc)
            if kind is ErrorKind.UNAVAILABLE:
                self._unavailable(rank, generation, first_line(exc))
            elif kind.rank_failed:
                self._rank_failed(rank, generation, FailureReason.DIED, first_line(exc))
            elif self.domain is not None:
                self.errors[rank] = (generation, exc)  # judged once every rank's outcome is in
            else:
                raise  # the method's own exception (or not the rank's fault): unchanged

    def _unavailable(self, rank: int, generation: int, cause: str) -> None:
        # Unreachable for now, maybe not dead (a partition, a busy raylet): ask again, for a while.
        if not self.retry:  # the shard may have run: it is not re-run
            self.failed[rank] = f"unavailable on node {self.supervisor.ranks()[rank].node_id or '?'}: {cause}"
            return
        now = time.monotonic()
        lasted = self.unavailable.unavailable((rank, generation))
        if lasted is not None:
            self._rank_failed(rank, generation, FailureReason.HUNG, f"unavailable for {lasted:.0f}s: {cause}")
            return
        # The same incarnation again (or its replacement, if the supervisor judged it meanwhile), after a pause.
        self.awaiting[rank] = _Awaiting(generation - 1, None, now, not_before=now + self.poll_s)

    def _judge_timeouts(self) -> None:
        import ray

        if self.call_timeout_s is None or not self.in_flight:
            return
        now = time.monotonic()
        late = [ref for ref, (_, _, submitted) in self.in_flight.items() if now - submitted > self.call_timeout_s]
        if not late:
            return
        done, _ = ray.wait(late, num_returns=len(late), timeout=0)  # a result that is in is never a hang
        for ref in done:
            self._collect(ref)
        for ref in set(late) - set(done):
            rank, generation, _ = self.in_flight.pop(ref)  # abandoned: the supervisor kills the hung actor
            self._rank_failed(rank, generation, FailureReason.HUNG, f"{self.method_name} did not answer within {self.call_timeout_s:g}s")

    def _rank_failed(self, rank: int, generation: int, reason: FailureReason, cause: str) -> None:
        self.rank_failed = True
        self.failed_generations[rank] = generation
        node = self.supervisor.ranks()[rank].node_id
        self.supervisor.gate.report_failure(rank, generation, reason, cause)
        if not self.retry:
            self.failed[rank] = f"{reason.value} on node {node or '?'}: {cause}"
            return
        self.awaiting[rank] = _Awaiting(generation, reason, time.monotonic())

    def _resubmit_replaced(self) -> None:
        now = time.monotonic()
        for rank, waiting in list(self.awaiting.items()):
            if now < waiting.not_before:
                continue
            acquired = self.supervisor.gate.try_acquire(rank, newer_than=waiting.newer_than)  # raises if the group failed
            if acquired is None:
                continue
            if self.domain is not None:  # the recovery rolled the job back: no shard runs on that state
                self.domain.raise_pending(self.method_name, self.failed)
            del self.awaiting[rank]
            self._submit(rank, *acquired)
            if waiting.reason is not None:
                log.info(
                    "call_shard_rerun", group=self.group.name, method=self.method_name, rank=rank, reason=waiting.reason.value,
                    waited_s=round(now - waiting.since, 3),
                )  # fmt: skip

    def _wait_for_a_replacement(self) -> None:
        rank, waiting = min(self.awaiting.items(), key=lambda item: item[1].not_before)
        pause = waiting.not_before - time.monotonic()
        if pause > 0:  # an unavailable rank is asked again after a pause
            time.sleep(min(pause, self.poll_s))
            return
        try:
            self.supervisor.gate.await_replacement(rank, waiting.newer_than, timeout_s=self.poll_s)
        except TimeoutError:
            pass


@dataclass(frozen=True)
class _Awaiting:
    """A rank whose shard is submitted again once it runs a generation newer than ``newer_than``."""

    newer_than: int
    reason: FailureReason | None  # why it failed (None: it was only unavailable; the same actor is asked again)
    since: float
    not_before: float = 0.0
