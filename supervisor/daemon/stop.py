"""Why a daemon stops, what its exit code is, and what its teardown removes (pure)."""

from __future__ import annotations

import enum

__all__ = ["ExitCode", "StopReason", "TeardownScope", "teardown_scope"]


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a group FAILED, the driver raised, or start-up failed
    SPEC_INVALID = 2


class StopReason(enum.Enum):
    """Why the daemon tears down; decides the exit code."""

    SIGTERM = "SIGTERM"
    SIGINT = "SIGINT"
    STOP_COMMAND = "supervisor stop"
    DETACH_COMMAND = "supervisor stop --detach"  # e.g. to upgrade the daemon: the next start re-adopts
    SIGTERM_DETACH = "SIGTERM (on_sigterm = detach)"
    DRIVER_RETURNED = "driver returned"
    DRIVER_RAISED = "driver raised"
    GROUP_FAILED = "group failed"
    START_FAILED = "start failed"
    SUPERSEDED = "superseded"  # another daemon took the record over: leave everything to it
    GCS_UNREACHABLE = "GCS unreachable"  # past gcs_outage_grace_s: leave the job for a restart to re-adopt

    @property
    def exit_code(self) -> ExitCode:
        failed = (StopReason.DRIVER_RAISED, StopReason.GROUP_FAILED, StopReason.START_FAILED, StopReason.SUPERSEDED, StopReason.GCS_UNREACHABLE)
        return ExitCode.FAILED if self in failed else ExitCode.OK

    @property
    def detaches(self) -> bool:
        return self in (StopReason.DETACH_COMMAND, StopReason.SIGTERM_DETACH)


class TeardownScope(enum.Enum):
    EVERYTHING = "everything"  # shutdown methods, actors, placement groups, the record
    NOTHING = "nothing"  # leave the cluster as it is (someone else owns it, or it is a job to keep)


def teardown_scope(reason: StopReason, adopting: bool) -> TeardownScope:
    """What a teardown removes (pure).

    A daemon superseded by another leaves everything to it; one asked to detach leaves everything to
    the next start (an upgrade of the daemon). A daemon that failed to start while
    re-adopting a job that survived a crash leaves that job in place (a busy metrics port or a flaky
    init must not destroy a multi-day run): the next start re-adopts it, or `gc` collects it. A
    daemon whose GCS stayed away past its grace leaves everything too: the job may run on once the
    GCS is back, and nothing could be removed meanwhile.
    """
    if reason in (StopReason.SUPERSEDED, StopReason.GCS_UNREACHABLE) or reason.detaches or (reason is StopReason.START_FAILED and adopting):
        return TeardownScope.NOTHING
    return TeardownScope.EVERYTHING
