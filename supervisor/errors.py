"""The exception hierarchy.

Every error the library raises on purpose derives from :class:`SupervisorError`, so callers can catch
one type. Subclasses say who is at fault and which knob to turn. All of them are plain exceptions with
a single message argument, so they pickle across Ray processes unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GroupFailedError",
    "ActorStartError",
    "SupervisorError",
    "ConfigError",
    "WorkerEnvError",
    "DispatchError",
    "UnknownMethodError",
    "PlacementError",
    "ClusterUnavailableError",
    "SupersededError",
    "WorkerFailedError",
    "RolledBack",
    "StateLostError",
    "first_line",
    "ray_error_line",
]


class SupervisorError(Exception):
    """Base class of every error raised by ray-supervisor."""


class ConfigError(SupervisorError, ValueError):
    """The caller passed an invalid argument or specification (the user's input is at fault)."""


class WorkerEnvError(ConfigError):
    """The worker environment contract is violated: a reserved variable overridden, or one missing."""


class DispatchError(SupervisorError, ValueError):
    """Arguments of a group call do not fit its dispatch mode (wrong length, not chunkable, ...)."""


class UnknownMethodError(SupervisorError, AttributeError):
    """A group was asked to run a method its worker class does not define."""


class PlacementError(SupervisorError):
    """Placement groups could not be created or found as requested."""


class ClusterUnavailableError(SupervisorError, ConnectionError):
    """Ray is not initialised or the cluster cannot be reached."""


def first_line(exc: BaseException, limit: int | None = 200) -> str:
    """``"Type: first non-empty line of the message"`` (cut to ``limit`` characters): Ray's exception
    messages run to many lines, and logs and error messages want one."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line[:limit] if limit is not None else line}"


def ray_error_line(exc: BaseException) -> str:
    """One line for an error from Ray that names the user's exception when there is one: a remote
    call's cause, or what an actor's constructor raised (the last line of Ray's message)."""
    import ray

    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[-1] if text else ''}"
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, ray.exceptions.RayActorError) and "creation task" in str(exc) and text:
        return f"constructor raised {text[-1].strip()}"
    return first_line(exc, limit=None)


class GroupFailedError(SupervisorError):
    """The group is FAILED: its restart budget is exhausted or a replacement could not initialise."""


class ActorStartError(SupervisorError):
    """A rank's actor did not start (its constructor raised, or it did not come up in time)."""


class SupersededError(SupervisorError):
    """Another daemon took this supervisor over (this one was paused or cut off past its grace
    period): what it asked for was refused, and it must touch nothing more."""


class WorkerFailedError(SupervisorError):
    """Ranks died during a call whose policy is RAISE (or of a stateful group, whose shards are never
    re-run alone).

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


class RolledBack(WorkerFailedError):
    """Every stateful group of the job went back to the snapshot of ``step``: the driver resumes there.

    Raised once, by the first supervised call (or step boundary) after the rollback, so steps after
    ``step`` are applied again exactly once.

    Attributes:
        step: the step to resume from (the snapshot holds the state from before it ran).
        groups: the groups rolled back.
        medium: ``"memory"`` or ``"disk"`` (both in-memory copies of a shard were gone).
        cause: the failure that made the rollback necessary.
    """

    def __init__(self, step: int, groups: tuple[str, ...], medium: str, cause: str, method: str = "", failed: dict[int, str] | None = None) -> None:
        SupervisorError.__init__(self, f"rolled back to step {step} ({medium} snapshot) of group(s) {list(groups)}: {cause}")
        self.method, self.failed, self.partial_results = method, failed or {}, {}
        self.step, self.groups, self.medium, self.cause = step, groups, medium, cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.step, self.groups, self.medium, self.cause, self.method, self.failed))


class StateLostError(GroupFailedError):
    """A stateful group's state could not be restored (no complete snapshot anywhere, a digest that
    does not match): the group fails instead of re-initialising the rank silently."""
