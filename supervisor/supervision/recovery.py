"""Recovery tasks: the Ray side effects a plan starts, each on a thread the supervisor owns.

A :class:`ReplacementTask` puts one rank's new actor in place (a standby takes over, or a fresh actor
goes into a spare bundle or, once Ray has re-placed it, the rank's own bundle) and waits until the
actor answers. An :class:`InitTask` carries out the steps of an :class:`~.reconcile.InitOrder` (the
new rendezvous, one round of the init method, the state restore) and replaces nothing. Each returns
its outcome as an observation (:mod:`.reconcile`), which the planner acts on; an error is judged
here, once (:func:`supervisor.failure.is_transient`): transient ones are retried by the loop and charged to
the restart budget, others fail the group.

:class:`TaskRunner` owns the threads: it reports each outcome to the loop, and :meth:`TaskRunner.stop`
tells every task to stop and joins them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.worker.worker_base import send_probe
from ..errors import StateLostError, SupersededError, first_line, ray_error_line
from ..failure import is_transient
from ..observability.log import get_logger
from ..placement.standby import Replacement, ReplacementKind
from .config import SupervisionConfig
from .init_policy import RankAttempt
from .lifecycle import announce_rendezvous, run_init_round
from .reconcile import (
    InitDone,
    InitOrder,
    Observation,
    RecoveryStep,
    ReplacementDone,
    StateRestore,
    TaskCrashed,
)

if TYPE_CHECKING:
    from ..core.group.interface import SupervisedGroup
    from ..observability.hooks import LifecycleHooks
    from ..state.domain import StateDomain

__all__ = ["TaskRunner", "ReplacementTask", "InitTask", "RecoveryStopped", "BundleWaiter"]

log = get_logger("recovery")


class RecoveryStopped(Exception):
    """The supervisor stopped while a task waited."""


class TaskRunner:
    """Runs recovery tasks on threads and hands their outcomes to ``report``."""

    def __init__(self, group_name: str, report: Callable[[Observation], None]) -> None:
        self.group_name = group_name
        self.report = report
        self.stopping = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, name: str, task: Callable[[], Observation], ranks: tuple[int, ...] = ()) -> None:
        """Run ``task`` on a thread of its own; its outcome goes to ``report``. A task that raises (a
        bug) is reported as :class:`TaskCrashed` for ``ranks``, the ranks it owns: the loop fails
        the group loudly instead of leaving them in recovery forever."""

        def run() -> None:
            outcome: Observation
            try:
                outcome = task()
            except RecoveryStopped:
                return
            except Exception as exc:  # a bug in a task: fail loudly through the loop, never hang it
                log.exception("recovery_task_crashed", group=self.group_name, task=name)
                outcome = TaskCrashed(name, ranks, f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._threads.pop(name, None)
            if not self.stopping.is_set():
                self.report(outcome)

        thread = threading.Thread(target=run, name=f"recovery-{self.group_name}-{name}", daemon=True)
        with self._lock:
            self._threads[name] = thread
        thread.start()

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._threads)

    def sleep(self, seconds: float) -> None:
        """Sleep, unless the supervisor stops first (then raise :class:`RecoveryStopped`)."""
        if self.stopping.wait(seconds):
            raise RecoveryStopped()

    def stop(self, timeout_s: float) -> list[str]:
        """Tell every task to stop and wait for them; returns the tasks still running after ``timeout_s``
        (blocked in a Ray call that ends at its own timeout)."""
        self.stopping.set()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.running()


@dataclass
class BundleWaiter:
    """Waits until Ray has re-placed a lost node's bundles, saying what it waits for every 5 s."""

    group: SupervisedGroup
    config: SupervisionConfig
    runner: TaskRunner
    report_progress: Callable[[float], None]

    def wait(self, pg_indexes: list[int]) -> None:
        from ray.util import placement_group_table

        started = time.monotonic()
        next_report = started + 5.0
        pgs = self.group.placement_groups
        while True:
            try:
                states = {i: placement_group_table(pgs[i]).get("state") for i in pg_indexes}
            except Exception as exc:  # transient GCS error: look again next round
                states = {i: f"unknown ({type(exc).__name__})" for i in pg_indexes}
            if all(s == "CREATED" for s in states.values()):
                return
            waited = time.monotonic() - started
            timeout = self.config.bundle_wait_timeout_s
            if timeout is not None and waited > timeout:
                raise TimeoutError(f"placement groups {states} not re-placed after {waited:.0f}s")
            if time.monotonic() >= next_report:
                log.info(
                    "waiting_for_bundles",
                    group=self.group.name,
                    placement_groups=states,
                    waited_s=round(waited, 1),
                )
                self.report_progress(waited)
                next_report = time.monotonic() + 5.0
            self.runner.sleep(0.1)


@dataclass
class ReplacementTask:
    """Put a new actor in place for one rank and wait until it answers."""

    replacement: Replacement
    group: SupervisedGroup
    config: SupervisionConfig
    hooks: LifecycleHooks
    bundles: BundleWaiter

    def __call__(self) -> ReplacementDone:
        rank = self.replacement.rank
        if self.replacement.handover:
            return self._hand_over()
        try:
            handle = self._place()
            info = _ask_node(handle, self.config.actor_start_timeout_s, f"replacement of rank {rank}", self.bundles.runner)
            self.group.rank_nodes[rank] = info
            return ReplacementDone(rank)
        except RecoveryStopped:
            raise
        except SupersededError:
            raise RecoveryStopped() from None  # another daemon owns the group now: its owner stops this one
        except Exception as exc:
            if is_transient(exc):
                return ReplacementDone(rank, error=ray_error_line(exc))
            return ReplacementDone(
                rank, fatal=f"replacement of rank {rank} failed: {type(exc).__name__}: {exc}"
            )

    def _hand_over(self) -> ReplacementDone:
        """The standby takes the rank while the old actor lives on (a predecessor, ended once the
        successor serves). Any failure leaves the old actor the rank: the hand-over is aborted."""
        group, replacement, rank = self.group, self.replacement, self.replacement.rank
        standby = group.standbys.get(replacement.bundle)
        try:
            handle = group.take_over(rank, replacement.bundle, timeout_s=self.config.probe_timeout_s, keep_old=True)
            group.rank_nodes[rank] = _ask_node(handle, self.config.actor_start_timeout_s, f"successor of rank {rank}", self.bundles.runner)
            return ReplacementDone(rank)
        except RecoveryStopped:
            raise
        except SupersededError:
            raise RecoveryStopped() from None
        except Exception as exc:
            name = standby.name if standby is not None else str(replacement.bundle)
            self.hooks.on_standby_failed(group.name, name, f"hand-over of rank {rank} failed: {ray_error_line(exc)}")
            if rank in group.predecessors:  # taken over, then lost: the old actor is the rank again
                group.restore_predecessor(rank)
            return ReplacementDone(rank, error=f"hand-over failed: {ray_error_line(exc)}")

    def _place(self) -> Any:
        group, replacement, rank = self.group, self.replacement, self.replacement.rank
        if replacement.kind is ReplacementKind.STANDBY:
            standby = group.standbys.get(replacement.bundle)
            try:
                return group.take_over(rank, replacement.bundle, timeout_s=self.config.probe_timeout_s)
            except (
                Exception
            ) as exc:  # the standby died meanwhile: fall back to a fresh actor in the own bundle
                name = standby.name if standby is not None else str(replacement.bundle)
                self.hooks.on_standby_failed(
                    group.name, name, f"take-over of rank {rank} failed: {ray_error_line(exc)}"
                )
            self.bundles.wait([group.rank_bundles[rank].pg_index])
            return group.replace_worker(rank, fork=False)  # plainly: a fork may be what failed
        if replacement.kind is ReplacementKind.SPARE_BUNDLE:
            log.info(
                "replacement_to_spare_bundle",
                group=group.name,
                rank=rank,
                bundle=str(replacement.bundle),
            )
            return group.replace_worker(rank, bundle=replacement.bundle, fork=replacement.fork)
        self.bundles.wait([group.rank_bundles[rank].pg_index])
        return group.replace_worker(rank, fork=replacement.fork)


@dataclass
class InitTask:
    """Carry out an :class:`InitOrder`'s steps on ``order.ranks``, in order (:attr:`InitOrder.steps`):
    capture the state a restore will load, give out the new rendezvous, run one round of the init
    method, restore the state. It replaces nothing: a rank that cannot take the rendezvous, or whose
    init fails, ends the task with that outcome (:class:`InitDone`), and the planner decides what
    the rank gets. ``carried``: what an earlier round of the same recovery captured."""

    order: InitOrder
    group: SupervisedGroup
    config: SupervisionConfig
    hooks: LifecycleHooks
    runner: TaskRunner
    state: StateDomain | None = None
    carried: Any = None

    def __call__(self) -> InitDone:
        order = self.order
        captured: Any = self.carried
        attempts: list[RankAttempt] = []
        restored: int | None = None  # the step of the group's own snapshot a replay starts from
        try:
            for step in order.steps:
                if step is RecoveryStep.CAPTURE:
                    captured = self._capture()
                elif step is RecoveryStep.RENDEZVOUS:
                    unreachable = self._give_rendezvous()
                    if unreachable:
                        return InitDone(order.ranks, unreachable=tuple(unreachable), carried=captured)
                elif step is RecoveryStep.INIT:
                    attempts = self._init_round()
                    if not all(a.outcome.ok for a in attempts):
                        return InitDone(order.ranks, attempts=tuple(attempts), carried=captured)
                elif step is RecoveryStep.RESTORE:
                    restored = self._restore(captured)
                elif step is RecoveryStep.REPLAY:
                    self._replay(restored)
            return InitDone(order.ranks, attempts=tuple(attempts))
        except RecoveryStopped:
            raise
        except SupersededError:
            raise RecoveryStopped() from None
        except StateLostError as exc:  # never a silent re-initialisation: the group fails, saying why
            return InitDone(order.ranks, fatal=str(exc))
        except Exception as exc:
            if is_transient(exc):
                return InitDone(order.ranks, error=first_line(exc), carried=captured)
            return InitDone(order.ranks, fatal=f"init of rank(s) {list(order.ranks)} failed: {type(exc).__name__}: {exc}")

    def _capture(self) -> Any:
        # Before any rank re-initialises: the survivors' state is the one to copy.
        order, group, state = self.order, self.group, self.state
        assert state is not None
        if order.restore is StateRestore.LIVE:
            return state.capture_live(group, list(order.ranks), list(order.survivors))
        survivors = list(order.survivors)
        return state.capture_peer(group, survivors, [r for r in order.ranks if r not in survivors])

    def _give_rendezvous(self) -> list[int]:
        """The ranks that could not take the new rendezvous (dead or stuck)."""
        group, order = self.group, self.order
        if order.fresh_rendezvous:  # rank 0 lives on, the collective re-forms: a port never used before
            group.pick_new_rendezvous(rank_zero=group.workers[0])
            unreachable = group.propagate_rendezvous([0])
            if unreachable:
                return unreachable
        if order.propagate:
            unreachable = group.propagate_rendezvous([r for r in order.ranks if r != 0])
            announce_rendezvous(group, self.hooks)  # the others have it; the unreachable get it as new actors
            return unreachable
        return []

    def _init_round(self) -> list[RankAttempt]:
        cfg, order = self.config, self.order
        assert cfg.init_method is not None
        calls = dict(zip(order.ranks, order.prior_calls or (0,) * len(order.ranks), strict=True))
        return run_init_round(
            self.group, order.ranks, cfg.init_method, cfg.init_args, cfg.init_kwargs, cfg.init_policy, calls, self.hooks,
            collective=cfg.collective,
        )  # fmt: skip

    def _restore(self, captured: Any) -> int | None:
        """Load the state back; the step of the group's own snapshot when a replay follows."""
        order, group = self.order, self.group
        if self.state is None or self.state.untrained:
            return None
        cause = _cause(group, order)
        if order.restore is StateRestore.LIVE:
            self.state.restore_live(group, captured)
            return None
        if order.restore is StateRestore.REPLAY:
            return self.state.restore_own(group, cause)
        if order.restore is StateRestore.PEER:
            if captured is not None:
                try:
                    self.state.restore_from_peer(group, captured, list(order.ranks))
                    return None
                except StateLostError as exc:  # the peer went too: a snapshot may still have it
                    log.warning("peer_restore_failed", group=group.name, error=str(exc))
            cause += " (no live peer to copy from)"
        self.state.roll_back(group, cause)
        return None

    def _replay(self, restored: int | None) -> None:
        if self.state is None or restored is None:  # nothing trained yet: nothing was restored or logged
            return
        self.state.replay(self.group, restored)


def _cause(group: SupervisedGroup, order: InitOrder) -> str:
    replaced = [r for r in order.ranks if r not in order.survivors]
    return f"rank(s) {replaced} of group {group.name} replaced" if replaced else f"group {group.name} re-formed"


def _ask_node(handle: Any, timeout_s: float, what: str, runner: TaskRunner) -> str:
    """Wait until a new actor answers its probe (its constructor ran); returns its node. Gives up
    (:class:`RecoveryStopped`) as soon as the supervisor stops."""
    import ray

    ref = send_probe(handle)
    deadline = time.monotonic() + timeout_s
    while not ray.wait([ref], timeout=min(0.25, max(0.0, deadline - time.monotonic())))[0]:
        if runner.stopping.is_set():
            raise RecoveryStopped()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: the actor did not come up within {timeout_s:g}s")
    return str(ray.get(ref)["node_id"])
