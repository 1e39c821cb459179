"""Recovery tasks: the Ray side effects a plan starts, each on a thread the supervisor owns.

A :class:`ReplacementTask` puts one rank's new actor in place (a standby takes over, or a fresh actor
goes into a spare bundle or, once Ray has re-placed it, the rank's own bundle) and waits until the
actor answers. An :class:`InitTask` gives the ranks of a recovery the new rendezvous and runs the init
method on them. Each returns its outcome as an observation (:mod:`.reconcile`); an error is judged
here, once (:func:`~supervisor.transient.is_transient`): transient ones are retried by the loop and
charged to the restart budget, others fail the group.

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
from ..observability.log import get_logger
from ..placement.standby import Replacement, ReplacementKind
from .config import SupervisionConfig
from .failures import is_transient
from .lifecycle import InitGroupError, init_group
from .reconcile import InitDone, InitOrder, Observation, ReplacementDone, StateRestore
from .restart_policy import FailureReason

if TYPE_CHECKING:
    from ..core.group.group import WorkerGroup
    from ..observability.hooks import LifecycleHooks
    from ..state.domain import CapturedPeer, StateDomain

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

    def start(self, name: str, task: Callable[[], Observation]) -> None:
        def run() -> None:
            try:
                outcome = task()
            except RecoveryStopped:
                return
            except BaseException:  # a bug in a task: fail loudly through the loop, never hang it
                log.exception("recovery_task_crashed", group=self.group_name, task=name)
                raise
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

    group: WorkerGroup
    config: SupervisionConfig
    runner: TaskRunner
    report_progress: Callable[[float], None]

    def wait(self, pg_indexes: list[int]) -> None:
        from ray.util import placement_group_table

        started = time.monotonic()
        next_report = started + 5.0
        while True:
            try:
                states = {i: placement_group_table(self.group._pgs[i]).get("state") for i in pg_indexes}
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
    group: WorkerGroup
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
            return group.replace_worker(rank, bundle=replacement.bundle)
        self.bundles.wait([group.rank_bundles[rank].pg_index])
        return group.replace_worker(rank)


@dataclass
class InitTask:
    """Give ``order.ranks`` the new rendezvous (when rank 0 changed) and run the init method on them;
    then, for a stateful group, restore the state (:class:`StateRestore`) before any of them serves."""

    order: InitOrder
    group: WorkerGroup
    config: SupervisionConfig
    hooks: LifecycleHooks
    runner: TaskRunner
    state: StateDomain | None = None

    def __call__(self) -> InitDone:
        group, cfg, order = self.group, self.config, self.order
        # Every actor this task replaces (a rank that cannot take the new rendezvous, an init that
        # failed and runs again on a fresh actor, init_group's own rendezvous fallout) is a restart.
        hooks = _CountingHooks(self.hooks)
        try:
            captured: Any = None
            if order.restore is StateRestore.PEER:
                captured = self._capture_peer()
            elif order.restore is StateRestore.LIVE:
                assert self.state is not None
                captured = self.state.capture_live(group, list(order.ranks), list(order.survivors))
            if order.fresh_rendezvous:  # rank 0 lives on, the collective re-forms: a port never used before
                group._pick_new_rendezvous(rank_zero=group.workers[0])
                group.propagate_rendezvous([0])
            if order.propagate:
                for r in group.propagate_rendezvous([r for r in order.ranks if r != 0]):
                    hooks.on_worker_replaced(group.name, r, FailureReason.DIED.value)
                assert group._rendezvous is not None
                hooks.on_rendezvous_changed(group.name, group._rendezvous.master_addr, group._rendezvous.master_port)
            if order.run_init and cfg.init_method:
                init_group(
                    group, cfg.init_method, cfg.init_args, cfg.init_kwargs, cfg.init_policy, hooks,  # type: ignore[arg-type]
                    sleep=self.runner.sleep, ranks=list(order.ranks), kill_on_failure=False,
                    rejoin_new_rank_zero=cfg.rejoin_new_rank_zero, collective=cfg.collective,
                )  # fmt: skip
            self._restore(captured)
            return InitDone(order.ranks, hooks.rebuilt())
        except RecoveryStopped:
            raise
        except SupersededError:
            raise RecoveryStopped() from None
        except StateLostError as exc:  # never a silent re-initialisation: the group fails, saying why
            return InitDone(order.ranks, hooks.rebuilt(), fatal=str(exc))
        except InitGroupError as exc:
            return InitDone(
                order.ranks,
                hooks.rebuilt(),
                fatal=f"replacement of rank(s) {list(order.ranks)} failed to initialise: {exc}",
            )
        except Exception as exc:
            if is_transient(exc):
                return InitDone(order.ranks, hooks.rebuilt(), error=first_line(exc))
            return InitDone(
                order.ranks,
                hooks.rebuilt(),
                fatal=f"init of rank(s) {list(order.ranks)} failed: {type(exc).__name__}: {exc}",
            )


    def _capture_peer(self) -> CapturedPeer | None:
        # Before the survivors re-initialise: their state is the one to copy.
        assert self.state is not None
        survivors = list(self.order.survivors)
        targets = [r for r in self.order.ranks if r not in survivors]
        return self.state.capture_peer(self.group, survivors, targets)

    def _restore(self, captured: Any) -> None:
        order, group = self.order, self.group
        if order.restore is StateRestore.NONE or self.state is None or self.state.untrained:
            return
        cause = _cause(group, order)
        if order.restore is StateRestore.LIVE:
            self.state.restore_live(group, captured)
            return
        if order.restore is StateRestore.PEER:
            if captured is not None:
                try:
                    self.state.restore_from_peer(group, captured, list(order.ranks))
                    return
                except StateLostError as exc:  # the peer went too: a snapshot may still have it
                    log.warning("peer_restore_failed", group=group.name, error=str(exc))
            cause += " (no live peer to copy from)"
        self.state.roll_back(group, cause)


def _cause(group: WorkerGroup, order: InitOrder) -> str:
    replaced = [r for r in order.ranks if r not in order.survivors]
    return f"rank(s) {replaced} of group {group.name} replaced" if replaced else f"group {group.name} re-formed"


class _CountingHooks:
    """The hooks an init task reports through, counting the actors it replaced (each one a restart)."""

    def __init__(self, hooks: LifecycleHooks) -> None:
        self._hooks = hooks
        self._replaced: list[tuple[int, FailureReason]] = []

    def on_worker_replaced(self, group: str, rank: int, reason: str) -> None:
        self._replaced.append((rank, FailureReason(reason)))
        self._hooks.on_worker_replaced(group, rank, reason)

    def rebuilt(self) -> dict[int, tuple[FailureReason, int]]:
        """``{rank: (reason of its last replacement, replacements)}``."""
        out: dict[int, tuple[FailureReason, int]] = {}
        for rank, reason in self._replaced:
            out[rank] = (reason, out.get(rank, (reason, 0))[1] + 1)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hooks, name)


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
