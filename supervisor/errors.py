"""The exception hierarchy.

Every error the library raises on purpose derives from :class:`SupervisorError`, so callers can catch
one type. Subclasses say who is at fault and which knob to turn. All of them are plain exceptions with
a single message argument, so they pickle across Ray processes unchanged.
"""

from __future__ import annotations

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
