"""What kind of state a group's ranks hold, and how it is kept (one place for the defaults)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["StateKind", "StateRecovery", "StateConfig", "KEEP_SNAPSHOTS", "DEFAULT_SNAPSHOT_MEMORY_MB", "DEFAULT_REPLAY_LOG_MB"]

# Complete snapshots kept per group: the newest may be the one a failure interrupted on another group
# of the job, so a job-wide rollback needs the one before it too.
KEEP_SNAPSHOTS = 2
DEFAULT_SNAPSHOT_MEMORY_MB = 1024.0
# The driver-side replay log holds references to the arguments of the mutating calls since the newest
# snapshot (no copy): the bound only forces an earlier snapshot when a step's batches are large.
DEFAULT_REPLAY_LOG_MB = 512.0


class StateKind(enum.StrEnum):
    """What a rank of the group holds that training changed.

    NONE: nothing (rollout with weights resynced each step, reference, reward): a replacement only
        re-runs the init method.
    REPLICATED: every rank holds the same state (DDP replicas, a replicated critic): a replacement
        receives a live peer's state, checked by digest, before it serves.
    SHARDED: each rank holds its own part (FSDP, ZeRO): no peer holds it, so the group is rolled back
        to the newest snapshot complete on every rank.
    """

    NONE = "none"
    REPLICATED = "replicated"
    SHARDED = "sharded"

    @property
    def stateful(self) -> bool:
        return self is not StateKind.NONE


class StateRecovery(enum.StrEnum):
    """What a stateful group does when a rank's state is lost at an unknown step (a death inside a
    call that changes state, or a shard no peer holds).

    ROLLBACK: every stateful group of the job goes back to the newest snapshot they all hold, and the
        driver is told (:class:`~supervisor.errors.RolledBack`) and re-drives from that step.
    REPLAY: only this group goes back to its own newest snapshot, the calls that changed its state
        since then (its replay log) run again in order on every rank, and the call in flight is
        retried: the driver sees its results as if nothing had happened.
    """

    ROLLBACK = "rollback"
    REPLAY = "replay"


@dataclass(frozen=True)
class StateConfig:
    """How a group's state is kept.

    Attributes:
        kind: see :class:`StateKind`.
        snapshot_every: take an in-memory snapshot at every this many step boundaries
            (``DriverContext.step_boundary`` in the daemon); 0: only explicit ``group.snapshot(step)``.
        snapshot_memory_mb: bound on what the group's kept snapshots take in the keepers (both copies
            of every shard, all kept steps); a snapshot that would pass it is skipped and says so.
        disk_dir: directory of the disk fallback (``torch.distributed.checkpoint``, one directory per
            step and rank); shared storage on a real cluster. None: no disk snapshots.
        disk_snapshot_every: write a disk snapshot at every this many step boundaries (0: never).
        lost_hint: what would have saved the state, said when it is lost (default: the snapshot
            settings); an integration whose ranks cannot be snapshotted (verl's FSDP workers) names
            its own remedy.
        recovery: see :class:`StateRecovery`.
        mutating_methods: methods that change the state, besides those registered with
            ``mutates_state=True``: the calls a replay runs again.
        replay_log_mb: bound on the arguments the replay log holds; past it, the group's next step
            boundary takes a snapshot (which empties the log) even when none is due.
    """

    kind: StateKind = StateKind.NONE
    snapshot_every: int = 0
    snapshot_memory_mb: float = DEFAULT_SNAPSHOT_MEMORY_MB
    disk_dir: str | None = None
    disk_snapshot_every: int = 0
    lost_hint: str | None = None
    recovery: StateRecovery = StateRecovery.ROLLBACK
    mutating_methods: tuple[str, ...] = ()
    replay_log_mb: float = DEFAULT_REPLAY_LOG_MB

    def __post_init__(self) -> None:
        from ..errors import ConfigError

        if self.snapshot_every < 0 or self.disk_snapshot_every < 0:
            raise ConfigError("snapshot_every and disk_snapshot_every must be >= 0")
        if self.snapshot_memory_mb <= 0:
            raise ConfigError(f"snapshot_memory_mb must be > 0, got {self.snapshot_memory_mb}")
        if self.disk_snapshot_every and not self.disk_dir:
            raise ConfigError("disk_snapshot_every needs disk_dir")
        if self.replay_log_mb <= 0:
            raise ConfigError(f"replay_log_mb must be > 0, got {self.replay_log_mb}")
        object.__setattr__(self, "recovery", StateRecovery(self.recovery))
        object.__setattr__(self, "mutating_methods", tuple(self.mutating_methods))

    @property
    def replays(self) -> bool:
        """A lost state is replayed in this group alone (see :class:`StateRecovery`)."""
        return self.kind.stateful and self.recovery is StateRecovery.REPLAY

    @property
    def stateful(self) -> bool:
        return self.kind.stateful

    def snapshot_due(self, step: int) -> bool:
        return self.snapshot_every > 0 and step % self.snapshot_every == 0

    def disk_due(self, step: int) -> bool:
        return self.disk_snapshot_every > 0 and step % self.disk_snapshot_every == 0
