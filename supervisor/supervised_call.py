"""Blocking group calls that survive rank failures.

When a supervised group runs a call and a rank dies (or does not answer within the call timeout), the
call has a defined outcome (:class:`~supervisor.supervision.InFlightPolicy`):

* RETRY: tell the supervisor, wait for the rank's replacement, run that rank's shard again on it, and
  return every rank's result in rank order;
* RAISE: let the other ranks finish, then raise :class:`WorkerFailedError` naming the failed ranks,
  their nodes and the cause, with the survivors' results attached.

User exceptions raised inside the method are not failures of the rank: they propagate as usual.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .errors import SupervisorError, first_line
from .log import get_logger
from .restart_policy import FailureReason

if TYPE_CHECKING:
    from .decorator import MethodSpec
    from .group import WorkerGroup
    from .supervision import GroupSupervisor, InFlightPolicy

__all__ = ["WorkerFailedError", "resolve_in_flight_policy", "run_supervised"]

log = get_logger("supervised_call")


class WorkerFailedError(SupervisorError):
    """Ranks died during a call whose policy is RAISE.

    Attributes:
        method: the group method.
        failed: ``{rank: "reason on node ...: cause"}``.
        partial_results: ``{rank: result}`` of the ranks that finished.
    """

    def __init__(self, method: str, failed: dict[int, str], partial_results: dict[int, Any]) -> None:
        detail = "; ".join(f"rank {r}: {why}" for r, why in sorted(failed.items()))
        super().__init__(f"{method}: rank(s) {sorted(failed)} failed during the call: {detail}")
        self.method = method
        self.failed = failed
        self.partial_results = partial_results

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.method, self.failed, self.partial_results))


def resolve_in_flight_policy(spec: MethodSpec, group_default: InFlightPolicy | None) -> InFlightPolicy:
    """The method's own choice wins, then the group's, then RETRY for idempotent methods, else RAISE."""
    from .supervision import InFlightPolicy

    if spec.on_rank_failure is not None:
        return InFlightPolicy(spec.on_rank_failure)
    if group_default is not None:
        return group_default
    return InFlightPolicy.RETRY if spec.idempotent else InFlightPolicy.RAISE


def run_supervised(
    group: WorkerGroup,
    supervisor: GroupSupervisor,
    method_name: str,
    per_rank: dict[int, tuple[tuple[Any, ...], dict[str, Any]]],
    policy: InFlightPolicy,
    call_timeout_s: float | None,
    poll_s: float = 0.25,
) -> list[Any]:
    """Run ``method_name`` on the ranks of ``per_rank`` and return their results in rank order.

    Raises:
        WorkerFailedError: a rank failed and ``policy`` is RAISE.
        GroupFailedError: a rank failed, ``policy`` is RETRY, and the group failed instead of replacing it.
        Exception: whatever the method itself raised (RayTaskError), unchanged.
    """
    import ray

    from .supervision import InFlightPolicy

    def submit(rank: int) -> tuple[Any, int, float]:
        generation, actor = supervisor.acquire(rank)  # waits out a recovery; raises if the group failed
        args, kwargs = per_rank[rank]
        return group._remote(actor, method_name, args, kwargs), generation, time.monotonic()

    pending: dict[Any, tuple[int, int, float]] = {}
    for rank in per_rank:
        ref, gen, started = submit(rank)
        pending[ref] = (rank, gen, started)
    results: dict[int, Any] = {}
    failed: dict[int, str] = {}

    def rank_failed(rank: int, generation: int, reason: FailureReason, cause: str) -> None:
        node = supervisor.ranks()[rank].node_id
        supervisor.report_failure(rank, generation, reason, cause)
        if policy is InFlightPolicy.RAISE:
            failed[rank] = f"{reason.value} on node {node or '?'}: {cause}"
            return
        waited = time.monotonic()
        supervisor.await_replacement(rank, generation)
        ref, gen, started = submit(rank)
        pending[ref] = (rank, gen, started)
        log.info("call_shard_rerun", group=group.name, method=method_name, rank=rank, reason=reason.value, waited_s=round(time.monotonic() - waited, 3))

    while pending:
        wait_s = poll_s
        if call_timeout_s is not None:
            oldest = min(started for _, _, started in pending.values())
            wait_s = max(0.0, min(poll_s, oldest + call_timeout_s - time.monotonic()))
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)
        for ref in ready:
            rank, gen, _ = pending.pop(ref)
            try:
                results[rank] = ray.get(ref)
            except ray.exceptions.ActorUnavailableError as exc:
                # Unreachable for now, maybe not dead: never report a death for it.
                if policy is InFlightPolicy.RAISE:
                    failed[rank] = f"unavailable: {first_line(exc)}"
                else:
                    time.sleep(poll_s)
                    new_ref, new_gen, started = submit(rank)
                    pending[new_ref] = (rank, new_gen, started)
            except ray.exceptions.RayActorError as exc:
                rank_failed(rank, gen, FailureReason.DIED, first_line(exc))
        if call_timeout_s is not None:
            now = time.monotonic()
            for ref, (rank, gen, started) in list(pending.items()):
                if now - started > call_timeout_s:
                    del pending[ref]  # abandoned: the supervisor kills the hung actor
                    rank_failed(rank, gen, FailureReason.HUNG, f"{method_name} did not answer within {call_timeout_s:g}s")
    if failed:
        raise WorkerFailedError(method_name, failed, results)
    return [results[r] for r in sorted(per_rank)]

