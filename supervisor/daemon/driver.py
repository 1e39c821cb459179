"""The driver: user code the daemon runs once its groups are ready (``[driver] function = "mod:fn"``).

The function receives a :class:`DriverContext` and runs the job's loop (rollout, reference log-probs,
reward, update...) against the supervised groups. When it returns the daemon tears everything down and
exits 0; when it raises, the daemon tears down and exits 1. A daemon restarted after a crash runs the
driver again on the re-adopted groups, with the progress it last saved, so a step loop can resume.

A job with stateful groups (``state = "replicated"`` or ``"sharded"``) drives its loop by steps: it
calls :meth:`DriverContext.step_boundary` after each step (snapshots, when due), starts from
:attr:`DriverContext.resume_step`, and on :class:`~supervisor.errors.RolledBack` goes back to the
step it names::

    step = ctx.resume_step or 0
    while step < steps:
        try:
            ctx.step_boundary(step)
            run_step(step)
            step += 1
        except RolledBack as rolled_back:
            step = rolled_back.step
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.group.group import WorkerGroup
from ..observability.log import get_logger
from ..placement.pool import ResourcePool

__all__ = ["DriverContext", "DriverRun"]


@dataclass
class DriverContext:
    """What a driver function gets.

    Attributes:
        name: the supervisor's name.
        groups: the supervised worker groups by their spec name; blocking calls survive rank failures.
        pools: the resource pools by their spec name.
        args: the spec's ``[driver.args]`` table.
        progress: what the driver last passed to :meth:`save_progress` (empty on a first run); it
            survives daemon restarts, so ``progress.get("step", 0)`` is where to resume.
        resumed: True when this daemon re-adopted groups left by an earlier incarnation.
        stop_requested: set when the daemon was asked to stop (SIGTERM, SIGINT, ``supervisor stop``);
            a loop should check it between steps and return.
        kv: the supervisor's KV store (small shared state, service discovery); workers reach the same
            store with ``KVStore.attach(ray.get_runtime_context().namespace)``.
        state: the job's state domain (None: no stateful group).
        resume_step: the step the stateful groups hold now: 0 on a first run; on a re-adopted job,
            the newest complete snapshot's (every stateful group was taken back to it); after a
            rollback, its step. None without stateful groups (or without a snapshot yet).
    """

    name: str
    groups: dict[str, WorkerGroup]
    pools: dict[str, ResourcePool]
    args: dict[str, Any]
    progress: dict[str, Any]
    resumed: bool
    stop_requested: threading.Event
    kv: Any = None
    state: Any = None
    resume_step: int | None = None
    _save: Callable[[dict[str, Any]], None] = field(repr=False, default=lambda progress: None)

    def save_progress(self, progress: dict[str, Any]) -> None:
        """Persist small JSON-serialisable progress (e.g. ``{"step": 12}``) in the state record."""
        self.progress = dict(progress)
        self._save(self.progress)

    def step_boundary(self, step: int) -> None:
        """Every step before ``step`` is done: snapshot the stateful groups that are due
        (``snapshot_every``, ``disk_snapshot_every``). A no-op without stateful groups.

        Raises:
            RolledBack: a rollback happened since the last call (``resume_step`` is its step).
        """
        if self.state is None:
            return
        from ..errors import RolledBack

        try:
            self.state.step_boundary(step)
        except RolledBack as rolled_back:
            self.resume_step = rolled_back.step
            raise

    def rolled_back(self, error: Any) -> int:
        """Note a :class:`~supervisor.errors.RolledBack` caught from a group call; the step to resume from."""
        self.resume_step = int(error.step)
        return self.resume_step

    @property
    def log(self) -> Any:
        return get_logger("driver").bind(supervisor=self.name)


class DriverRun:
    """Runs the driver function in a thread owned by the daemon, and keeps its outcome."""

    def __init__(self, function: Callable[[DriverContext], Any], context: DriverContext) -> None:
        self._function = function
        self._context = context
        self.error: BaseException | None = None
        self.done = threading.Event()
        # A daemon thread: teardown kills the actors it calls, so it cannot outlive the process stuck.
        self._thread = threading.Thread(target=self._run, name="supervisor-driver", daemon=True)

    def start(self) -> DriverRun:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._function(self._context)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the driver to return; True if it did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()
