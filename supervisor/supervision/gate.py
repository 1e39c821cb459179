"""The call gate: what blocking group calls see of a supervised group, and how they report failures.

Calls in flight (:mod:`.supervised_call`) ask the gate which incarnation of a rank may take a shard
now, wait here while the group recovers, and report ranks that died or did not answer. The loop
publishes its one :class:`~.plan.LoopState` here (under :attr:`CallGate.cond`), with the nodes the
ranks were observed on, and takes the reports on its next pass. Everything published about a rank
(:class:`~.states.RankStatus`: its state, generation, restarts, last failure, node) is read off
those two: there is no second copy to keep in step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import GroupFailedError
from .detection import Detected
from .plan import LoopState
from .restart_policy import Failure, FailureReason
from .states import GroupState, RankStatus, WorkerState

__all__ = ["CallGate"]


class CallGate:
    """The published state of one group, shared by its loop (the writer) and its calls (readers)."""

    def __init__(
        self,
        group_name: str,
        loop: LoopState,
        nodes: list[str | None],
        original_nodes: list[str | None],
        workers: Callable[[], list[Any]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group_name = group_name
        self.cond = threading.Condition()
        self.loop = loop  # the loop's state, as its last plan left it (replaced whole, under cond)
        self.nodes = nodes  # the node each rank's current actor was last seen on
        self.original_nodes = original_nodes  # the node each rank's bundle had at pool creation
        self.stopped = False
        self.failure: GroupFailedError | None = None
        self.reports: list[Detected] = []  # failures reported by calls, taken by the loop
        self.updates_in_flight = 0  # calls that change state (not idempotent) running now
        self.calls_in_flight = 0  # blocking calls between entry and their last result
        self.hold_new_calls = False  # a hand-over waits for a call boundary: new calls wait at entry
        self._workers = workers
        self.clock = clock

    @property
    def group_state(self) -> GroupState:
        return self.loop.group

    @property
    def state(self) -> GroupState:
        with self.cond:
            return (
                GroupState.STOPPED if self.stopped and not self.group_state.is_terminal else self.group_state
            )

    def status(self, rank: int) -> RankStatus:
        """What is published about ``rank`` (a rank not running in a FAILED group is shown failed)."""
        with self.cond:
            view = self.loop.ranks[rank]
            state = WorkerState.FAILED if self.loop.group is GroupState.FAILED and view.state is not WorkerState.RUNNING else view.state
            return RankStatus(rank, state, view.generation, self.nodes[rank], self.original_nodes[rank], view.restarts, view.last_failure)

    def statuses(self) -> list[RankStatus]:
        with self.cond:
            return [self.status(r) for r in range(len(self.loop.ranks))]

    def generation(self, rank: int) -> int:
        with self.cond:
            return self.loop.ranks[rank].generation

    def acquire(self, rank: int) -> tuple[int, Any]:
        """Wait until the group is not recovering and ``rank`` runs; return ``(generation, actor)``.

        New calls must not reach a replacement before its init method has run.

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self.cond:
            while True:
                acquired = self.try_acquire(rank)
                if acquired is not None:
                    return acquired
                self.cond.wait(0.5)

    def try_acquire(self, rank: int, newer_than: int = -1) -> tuple[int, Any] | None:
        """``(generation, actor)`` of ``rank`` when it runs a generation newer than ``newer_than`` and
        the group is not recovering, else None (never blocks).

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self.cond:
            self._raise_if_terminal()
            view = self.loop.ranks[rank]
            if self.group_state is GroupState.RUNNING and view.state is WorkerState.RUNNING and view.generation > newer_than:
                return view.generation, self._workers()[rank]
            return None

    def wait_running(self) -> None:
        """Block while the group recovers (a snapshot waits for that).

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self.cond:
            while True:
                self._raise_if_terminal()
                if self.group_state is GroupState.RUNNING:
                    return
                self.cond.wait(0.5)

    def enter_call(self) -> None:
        """A blocking call starts: it waits while a hand-over holds new calls (those in flight end
        first, so the hand-over starts at a call boundary), then counts as in flight.

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self.cond:
            while True:
                self._raise_if_terminal()
                if not self.hold_new_calls:
                    self.calls_in_flight += 1
                    return
                self.cond.wait(0.5)

    def exit_call(self) -> None:
        with self.cond:
            self.calls_in_flight -= 1
            self.cond.notify_all()

    def at_boundary(self) -> bool:
        """New calls are held and none is in flight: a hand-over may start now."""
        with self.cond:
            return self.hold_new_calls and self.calls_in_flight == 0

    def update_started(self) -> None:
        with self.cond:
            self.updates_in_flight += 1

    def update_ended(self) -> None:
        with self.cond:
            self.updates_in_flight -= 1

    def report_failure(self, rank: int, generation: int, reason: FailureReason, detail: str = "") -> None:
        """Tell the supervisor a rank failed (called by in-flight calls; duplicates are ignored)."""
        with self.cond:
            if self.loop.ranks[rank].generation != generation:
                return  # already replaced
            failure = Failure(rank, reason, detail, self.nodes[rank])
            self.reports.append(Detected(failure, generation, self.clock(), None))
            self.cond.notify_all()

    def await_replacement(self, rank: int, generation: int, timeout_s: float | None = None) -> int:
        """Block until ``rank`` runs a generation newer than ``generation``; return it.

        Raises:
            GroupFailedError: the group failed (or stopped) instead.
            TimeoutError: not replaced within ``timeout_s``.
        """
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self.cond:
            while True:
                view = self.loop.ranks[rank]
                if view.generation > generation and view.state is WorkerState.RUNNING:
                    return view.generation
                self._raise_if_terminal()
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"rank {rank} of group {self.group_name} not replaced within {timeout_s:g}s"
                    )
                self.cond.wait(0.5 if remaining is None else min(remaining, 0.5))

    def _raise_if_terminal(self) -> None:
        state = GroupState.STOPPED if self.stopped and not self.group_state.is_terminal else self.group_state
        if state.is_terminal:
            raise self.failure or GroupFailedError(f"group {self.group_name} is {state.value}")
