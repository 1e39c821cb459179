"""create_group (lenient) and init_group (strict): two phases, two kinds of failure.

Waiting for GPUs can take minutes (a queue, an autoscaler) and is not an error until a long timeout;
a rank whose model load raises or whose collective init hangs must be caught fast and retried alone.
So they are separate calls with separate timeouts:

``create_group``
    reserves the pool's placement groups (the lenient wait of :mod:`supervisor.placement.resource_wait`:
    infeasible demands fail at once, progress names what is missing), places one actor per rank into
    its bundle and waits until each has started. No user initialisation runs. On any failure it
    removes the placement groups and actors it created.

``init_group``
    calls a named init method on every rank with a per-worker timeout, replacing and retrying only
    the ranks that fail (:mod:`supervisor.supervision.init_policy` decides), and raises :class:`InitGroupError`
    with every rank's outcome when a rank runs out of attempts (after killing the group's actors;
    the pool is left to its owner).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core.group.actor_class import ClassWithInitArgs
from ..core.group.group import DEFAULT_NAMESPACE, GroupPlacement, WorkerGroup
from ..core.worker.actor_heartbeat import Beat, read_beats
from ..core.worker.worker_base import send_probe
from ..core.worker.zygote import NodeZygotes
from ..errors import ActorStartError, SupervisorError, ray_error_line
from ..failure import ErrorKind, classify_error
from ..observability.hooks import LifecycleHooks, default_hooks
from ..observability.log import get_logger
from ..placement.layout import BundleRef
from ..placement.pool import ResourcePool
from ..placement.resource_wait import RESOURCE_TIMEOUT_S
from .init_policy import InitOutcome, InitPolicy, RankAttempt, plan_next_round
from .restart_policy import FailureReason

__all__ = [
    "create_group", "adopt_group", "init_group", "run_init_round", "announce_rendezvous", "InitGroupError", "ActorStartError",
    "ACTOR_START_TIMEOUT_S",
]  # fmt: skip

log = get_logger("lifecycle")


# How long a new actor may take to come up once its bundle is ready (its constructor, imports).
ACTOR_START_TIMEOUT_S = 120.0
# How often adoption looks at the heartbeats of adopted ranks that are busy (a heartbeat period's half).
ADOPT_BEAT_POLL_S = 0.5


class InitGroupError(SupervisorError):
    """A rank exhausted its init attempts. ``outcomes`` holds every rank's last attempt."""

    def __init__(self, message: str, outcomes: list[RankAttempt] | None = None) -> None:
        super().__init__(message)
        self.outcomes = outcomes or []

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.outcomes))


def create_group(
    resource_pool: ResourcePool,
    cls_with_init: ClassWithInitArgs,
    name_prefix: str | None = None,
    detached: bool = False,
    worker_env: dict[str, str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    resource_timeout_s: float | None = RESOURCE_TIMEOUT_S,
    progress_interval_s: float = 10.0,
    actor_start_timeout_s: float = ACTOR_START_TIMEOUT_S,
    autoscaling: bool = False,
    hooks: LifecycleHooks | None = None,
    group_factory: Callable[..., WorkerGroup] = WorkerGroup,
    zygotes: NodeZygotes | None = None,
) -> WorkerGroup:
    """Reserve the pool and place one started actor per rank; run no user initialisation.

    Args:
        resource_pool: the pool (its placement groups are created or adopted here if needed).
        cls_with_init: worker class and constructor arguments.
        name_prefix: as for :class:`WorkerGroup`.
        detached: as for :class:`WorkerGroup`.
        worker_env: as for :class:`WorkerGroup`.
        namespace: as for :class:`WorkerGroup`.
        resource_timeout_s: how long to wait for resources (default 10 minutes; None: forever).
        progress_interval_s: cadence of the "waiting for resources" reports.
        actor_start_timeout_s: how long each actor may take to start once its bundle is ready.
        autoscaling: the cluster may grow, so no demand is judged infeasible.
        hooks: lifecycle hooks (default: metrics and structured logs).
        group_factory: builds the group (called as :class:`WorkerGroup` is); an integration passes
            its WorkerGroup subclass (verl's env contract and registrations).
        zygotes: per-node zygotes (:class:`~supervisor.core.worker.zygote.NodeZygotes`, shared by the
            caller's groups and owned by it) to fork the ranks from instead of starting each as a
            fresh process: waited for on the pool's nodes first; fresh replacements fork too.

    Returns:
        The group, with every rank's node recorded in ``group.rank_nodes``.

    Raises:
        InfeasibleResourcesError: no node could ever hold the pool (raised within seconds).
        ResourceWaitTimeout: resources not available in time; the message says what is missing
            and which placement groups hold it.
        ActorStartError: an actor's constructor raised or it did not start in time.

    Nothing created by this call survives a failure.
    """
    hooks = hooks if hooks is not None else default_hooks()
    owned_pgs = resource_pool.pgs is None
    resource_pool.get_placement_groups(
        timeout_s=resource_timeout_s, progress_interval_s=progress_interval_s, autoscaling=autoscaling, hooks=hooks
    )
    group: WorkerGroup | None = None
    try:
        forking = {"zygotes": zygotes} if zygotes is not None else {}  # an integration's factory may not take it
        group = group_factory(
            resource_pool, cls_with_init, name_prefix=name_prefix, detached=detached, worker_env=worker_env, namespace=namespace, **forking
        )
        group.rank_nodes = _wait_started(group, actor_start_timeout_s)
        return group
    except BaseException:
        if group is not None:
            group.kill()
        if owned_pgs:
            resource_pool.release_created()
        raise


def adopt_group(
    resource_pool: ResourcePool,
    cls_with_init: ClassWithInitArgs,
    name_prefix: str,
    namespace: str,
    master_addr: str | None,
    master_port: int | None,
    worker_env: dict[str, str] | None = None,
    actor_start_timeout_s: float = ACTOR_START_TIMEOUT_S,
    hooks: LifecycleHooks | None = None,
    placement: GroupPlacement | None = None,
    zygotes: NodeZygotes | None = None,
) -> tuple[WorkerGroup, list[int]]:
    """Re-attach to a detached group an earlier supervisor left, leaving every healthy actor untouched.

    The pool's placement groups must be ready (adopted). Ranks whose actor is gone, or that do not
    answer within ``actor_start_timeout_s``, get a fresh actor in their own bundle; if rank 0 is among
    them the rendezvous rule applies (new MASTER_ADDR/PORT, given to every live rank). ``placement``
    is where the earlier supervisor recorded the actors (names and bundles after standby takeovers, and
    its standbys, which are adopted too); default: the layout's.

    Returns:
        The group (``rank_nodes`` filled) and the ranks whose actor is new: their init has not run
        (every rank needs init again when rank 0 is new: the others joined the old rendezvous).

    Raises:
        ActorStartError: a new actor did not start; the new actors are killed, adopted ones left alone.
    """
    hooks = hooks if hooks is not None else default_hooks()
    group = WorkerGroup(
        resource_pool,
        cls_with_init,
        name_prefix=name_prefix,
        detached=True,
        worker_env=worker_env,
        namespace=namespace,
        master_addr=master_addr,
        master_port=master_port,
        adopt=True,
        placement=placement,
        zygotes=zygotes,
    )
    new = {r for r in range(group.world_size) if r not in group.adopted_ranks}
    nodes, problems = _adopted_nodes(group, sorted(group.adopted_ranks), actor_start_timeout_s)
    for rank in sorted(problems):  # rank 0 first: its replacement picks the new rendezvous
        log.warning("adopted_worker_unresponsive", group=group.name, rank=rank, problem=problems[rank])
        group.replace_worker(rank)
        hooks.on_worker_replaced(group.name, rank, FailureReason.DIED)
        new.add(rank)
    if 0 in new or master_addr is None:  # a new rank 0, or a rendezvous nobody recorded: give out the current one
        for rank in group.propagate_rendezvous(sorted(set(range(group.world_size)) - new)):
            group.replace_worker(rank)
            hooks.on_worker_replaced(group.name, rank, FailureReason.DIED)
            new.add(rank)
        announce_rendezvous(group, hooks)
    try:
        group.rank_nodes = {**nodes, **_wait_started(group, actor_start_timeout_s, sorted(new))}
    except BaseException:
        group.fence.kill_actors([group.workers[rank] for rank in new])
        raise
    log.info("group_adopted_ready", group=group.name, kept=group.world_size - len(new), new=sorted(new))
    return group, sorted(new)


def _adopted_nodes(group: WorkerGroup, ranks: list[int], timeout_s: float) -> tuple[dict[int, str], dict[int, str]]:
    """Which adopted ``ranks`` are alive: ``{rank: node}`` and ``{rank: why not}``.

    A rank is alive when it answers where it runs, or, while it is busy in a long call (the answer
    queues behind it), when its heartbeat moves on; it is not when the question fails (it died) or
    neither happens within ``timeout_s``.
    """
    import ray

    refs = {send_probe(group.workers[rank]): rank for rank in ranks}
    ids = {rank: group.workers[rank]._actor_id.hex() for rank in ranks}
    first = _beats_quietly(ids.values())
    nodes: dict[int, str] = {}
    problems: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=min(ADOPT_BEAT_POLL_S, max(0.0, deadline - time.monotonic())))
        for ref in ready:
            rank = refs.pop(ref)
            try:
                nodes[rank] = ray.get(ref)["node_id"]
            except ray.exceptions.RayError as exc:
                problems[rank] = ray_error_line(exc)  # it names the kind: constructor raised, died, unavailable
        beats = _beats_quietly(ids[rank] for rank in refs.values())
        for ref, rank in list(refs.items()):
            beat, before = beats.get(ids[rank]), first.get(ids[rank])
            if beat is not None and (before is None or beat.seq != before.seq):
                nodes[rank] = beat.node_id  # busy, and beating: alive
                del refs[ref]
        if refs and time.monotonic() >= deadline:
            problems.update({rank: f"no answer and no heartbeat in {timeout_s:.0f}s" for rank in refs.values()})
            break
    return nodes, problems


def _beats_quietly(actor_ids: Any) -> dict[str, Beat]:
    try:
        return read_beats(actor_ids)
    except Exception:  # the GCS is away for now: the answers still count, and the next read may work
        return {}


def _started_nodes(group: WorkerGroup, ranks: list[int], timeout_s: float) -> tuple[dict[int, str], dict[int, str]]:
    """Ask ``ranks`` for their node; returns ``{rank: node}`` and ``{rank: why it did not answer}``."""
    import ray

    refs = {send_probe(group.workers[rank]): rank for rank in ranks}
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    nodes: dict[int, str] = {}
    problems: dict[int, str] = {refs[r]: f"not started after {timeout_s:.0f}s" for r in pending}
    for ref in ready:
        rank = refs[ref]
        try:
            nodes[rank] = ray.get(ref)["node_id"]
        except ray.exceptions.RayError as exc:
            problems[rank] = ray_error_line(exc)  # it names the kind: constructor raised, died, unavailable
    return nodes, problems


def replace_ranks(group: WorkerGroup, ranks: list[int], reason: FailureReason, actor_start_timeout_s: float, hooks: LifecycleHooks) -> None:
    """Fresh actors for ``ranks`` of an adopted group, each in its own bundle, started before this
    returns (their init has not run). A new rank 0 brings a new rendezvous; the caller gives it out."""
    for rank in sorted(ranks):  # rank 0 first: its replacement picks the rendezvous
        group.replace_worker(rank)
        hooks.on_worker_replaced(group.name, rank, reason)
    try:
        group.rank_nodes = {**group.rank_nodes, **_wait_started(group, actor_start_timeout_s, sorted(ranks))}
    except BaseException:
        group.fence.kill_actors([group.workers[rank] for rank in ranks])
        raise


def _wait_started(group: WorkerGroup, timeout_s: float, ranks: list[int] | None = None) -> dict[int, str]:
    nodes, problems = _started_nodes(group, list(range(group.world_size)) if ranks is None else ranks, timeout_s)
    if problems:
        lines = "; ".join(f"rank {rank}: {problem}" for rank, problem in sorted(problems.items()))
        raise ActorStartError(f"group {group.name}: actors did not start: {lines}")
    return nodes


def _classify(ref: Any, ready: bool, timeout_s: float) -> tuple[InitOutcome, str | None]:
    import ray

    if not ready:
        return InitOutcome.TIMED_OUT, f"timed out after {timeout_s:g}s without an answer (hung?)"
    try:
        ray.get(ref)
    except Exception as exc:
        kind = classify_error(exc)
        if kind is ErrorKind.USER_ERROR:
            return InitOutcome.RAISED, ray_error_line(exc)
        if not kind.rank_failed:
            raise
        # Unreachable counts as dead here: the init's own timeout already bounds how long it may take.
        return InitOutcome.DIED, f"actor {'unreachable' if kind is ErrorKind.UNAVAILABLE else 'died'}: {ray_error_line(exc)}"
    return InitOutcome.OK, None


def init_group(
    group: WorkerGroup,
    method: str = "init_model",
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    policy: InitPolicy | None = None,
    hooks: LifecycleHooks | None = None,
    sleep: Callable[[float], None] = time.sleep,
    ranks: list[int] | None = None,
    kill_on_failure: bool = True,
    rejoin_new_rank_zero: bool = True,
    collective: bool = False,
) -> list[RankAttempt]:
    """Run ``method(*args, **kwargs)`` on every rank, strictly: per-worker timeout, per-rank retries.

    A failed rank (raised, timed out, died) is replaced by a fresh actor in the same bundle with the
    same rank and environment, then its init runs again; other ranks are untouched unless rank 0 was
    replaced, in which case every rank learns the new MASTER_ADDR/PORT and re-runs init.

    Args:
        group: a group made by :func:`create_group` (or a WorkerGroup that created its actors).
        method: the worker method to call on every rank.
        args: its positional arguments (the same for every rank).
        kwargs: its keyword arguments (the same for every rank).
        policy: timeout, attempts and backoff (default: 5 minutes, 3 attempts).
        hooks: lifecycle hooks (default: metrics and structured logs).
        sleep: how to wait between rounds (injectable for tests).
        ranks: initialise only these ranks (replacements); default every rank. The rendezvous rule
            still re-runs every rank when rank 0 is replaced.
        kill_on_failure: kill the group's actors when a rank runs out of attempts (a supervisor
            that escalates instead passes False and leaves the decision to its owner).
        rejoin_new_rank_zero: False: a replaced rank 0 leaves the other ranks alone (independent
            replicas; see :class:`~supervisor.supervision.config.SupervisionConfig`).
        collective: the ranks of a round join one rendezvous: once one of them dies or raises, the
            calls still running are abandoned (:attr:`InitOutcome.ABANDONED`) instead of waited for.

    Returns:
        Every attempt, in order.

    Raises:
        InitGroupError: a rank exhausted its attempts; the message lists every rank's outcome. The
            group's actors are killed; the pool is left for its owner.
    """

    policy = policy or InitPolicy()
    hooks = hooks if hooks is not None else default_hooks()
    kwargs = kwargs or {}
    world = group.world_size
    history: list[RankAttempt] = []
    calls = dict.fromkeys(range(world), 0)
    while True:
        plan = plan_next_round(history, world, policy, ranks, rejoin_new_rank_zero)
        if plan.done:
            return history
        if plan.failed_ranks:
            latest = {a.rank: a for a in history}
            lines = [latest[r].describe(policy.attempts) for r in range(world) if r in latest]
            if kill_on_failure:
                group.kill()
            raise InitGroupError(
                f"{method} failed on group {group.name}: rank(s) {list(plan.failed_ranks)} out of attempts; " + "; ".join(lines),
                outcomes=[latest[r] for r in sorted(latest)],
            )
        if plan.replace:
            log.info("init_backoff", group=group.name, ranks=list(plan.replace), backoff_s=round(plan.backoff_s, 2))
            sleep(plan.backoff_s)
            latest = {a.rank: a.outcome for a in history}
            for rank in plan.replace:  # rank 0 first: its replacement picks the new rendezvous
                reason = latest.get(rank, InitOutcome.RAISED).failure_reason
                group.replace_worker(rank, fork=False)  # a retry starts plainly: a fork may be what failed
                hooks.on_worker_replaced(group.name, rank, reason)
            if plan.new_rendezvous:
                survivors = [r for r in range(world) if r not in plan.replace]
                # A survivor that cannot even take the new rendezvous (dead or stuck) is replaced now
                # rather than burning an init attempt on it.
                for rank in group.propagate_rendezvous(survivors):
                    group.replace_worker(rank)
                    hooks.on_worker_replaced(group.name, rank, FailureReason.DIED)
                announce_rendezvous(group, hooks)
        history += run_init_round(group, plan.run, method, args, kwargs, policy, calls, hooks, collective)


def announce_rendezvous(group: WorkerGroup, hooks: LifecycleHooks) -> None:
    """Tell the hooks the rendezvous every rank now has (after rank 0 got a new one)."""
    rendezvous = group.current_rendezvous
    assert rendezvous is not None
    hooks.on_rendezvous_changed(group.name, rendezvous.master_addr, rendezvous.master_port)


def run_init_round(
    group: WorkerGroup,
    ranks: tuple[int, ...],
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: InitPolicy,
    calls: dict[int, int],
    hooks: LifecycleHooks,
    collective: bool = False,
) -> list[RankAttempt]:
    """One round of ``method`` on ``ranks`` at once, each call bounded by ``policy.timeout_s``; every
    call's outcome, reported through ``hooks.on_init_attempt`` (``calls``: init calls per rank so
    far, counted up here). In a ``collective`` round the first failure abandons the calls still
    running. Replaces nothing: the caller decides what a failed rank gets."""
    import ray

    bundles, rank_nodes = group.rank_bundles, group.rank_nodes
    node_refs = {r: group.workers[r].node_info.remote() for r in ranks if r not in rank_nodes}
    started = time.monotonic()
    refs = {group.call_actor(group.workers[r], method, args, kwargs): r for r in ranks}
    # Each call's outcome as it ends; in a collective round the first failure ends the round.
    ended: dict[Any, tuple[InitOutcome, str | None, float]] = {}
    pending = list(refs)
    failed_first: tuple[int, InitOutcome] | None = None  # the rank whose failure doomed a collective round
    while pending and failed_first is None:
        remaining = started + policy.timeout_s - time.monotonic()
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, remaining))
        if not ready:
            break
        for ref in ready:
            outcome, error = _classify(ref, True, policy.timeout_s)
            ended[ref] = (outcome, error, time.monotonic() - started)
            if collective and not outcome.ok and pending:
                failed_first = (refs[ref], outcome)
    for ref in pending:
        if failed_first is not None:
            why = f"rank {failed_first[0]}'s init {failed_first[1].value} first: this collective init cannot complete"
            ended[ref] = (InitOutcome.ABANDONED, why, time.monotonic() - started)
        else:
            ended[ref] = (*_classify(ref, False, policy.timeout_s), time.monotonic() - started)
    for rank, node_ref in node_refs.items():
        done, _ = ray.wait([node_ref], timeout=0)
        if done:
            try:
                rank_nodes[rank] = ray.get(node_ref)["node_id"]
            except ray.exceptions.RayError:
                pass
    attempts: list[RankAttempt] = []
    for ref, rank in sorted(refs.items(), key=lambda kv: kv[1]):
        outcome, error, elapsed = ended[ref]
        calls[rank] = calls.get(rank, 0) + 1
        bundle = bundles[rank] if rank < len(bundles) else None
        attempt = RankAttempt(
            rank=rank,
            attempt=calls[rank],
            outcome=outcome,
            error=error,
            node_id=rank_nodes.get(rank) or _bundle_node(group, bundle),
            bundle=str(bundle) if bundle else None,
            duration_s=elapsed,
        )
        hooks.on_init_attempt(group.name, attempt)
        attempts.append(attempt)
    return attempts


def _bundle_node(group: WorkerGroup, bundle: BundleRef | None) -> str | None:
    if bundle is None or group.resource_pool is None:
        return None
    try:
        return group.resource_pool.bundle_node(bundle.pg_index, bundle.bundle_index)
    except SupervisorError:
        return None
