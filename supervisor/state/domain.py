"""The job-wide state domain: snapshots of every stateful group, and one consistent rollback.

A rollback cannot stop at the group that lost a rank: if the actor update goes back to step ``k``
while the critic already applied step ``k``, replaying ``k`` applies the critic's update twice. So the
stateful groups of a job share one :class:`StateDomain` (the daemon's, or one per supervisor in the
library), and a rollback takes every one of them to the newest step all of them can restore.

What exists is read from the keepers and the disk each time (level-based): a daemon restarted after
a crash, or a keeper lost with its node, needs no bookkeeping of its own.

The driver learns of a rollback once: the next supervised call of a stateful group (or step boundary)
raises :class:`~supervisor.errors.RolledBack`. Calls take :meth:`StateDomain.calls` around their
submission, and a rollback holds the same lock while it marks itself pending and submits its loads,
so no call can slip between the old state and the announcement.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.group import gcs_outages
from ..core.worker.state_endpoints import DISK_MARKER
from ..errors import ConfigError, RolledBack, StateLostError, first_line
from ..fencing import UNFENCED, Fence
from ..observability.log import get_logger
from ..observability.metrics import restore_kind
from .keeper import KeeperSet
from .kinds import KEEP_SNAPSHOTS, StateConfig, StateKind
from .planning import (
    CopyMedium,
    GroupCopies,
    RollbackTarget,
    ShardCopy,
    choose_peer,
    copy_nodes,
    held_bytes,
    latest_complete,
    plan_rollback,
    snapshot_ranks,
    steps_to_free,
)
from .replay_log import ReplayGap, ReplayLog

if TYPE_CHECKING:
    from ..core.group.group import WorkerGroup
    from ..observability.hooks import LifecycleHooks

__all__ = ["StateDomain", "Rollback", "StateLostError", "GroupStateStatus", "SnapshotSkipped", "CapturedPeer", "CapturedLive"]

log = get_logger("state")

HAND_OFF_WAIT_S = 30.0  # a restarted daemon's wait for the snapshots its predecessor left in flight
LOAD_TIMEOUT_S = 300.0  # a load of a large state into every rank of a group


@dataclass(frozen=True)
class Rollback:
    """A rollback that happened: to ``step``, of ``groups``, from ``medium``, because of ``cause``."""

    step: int
    groups: tuple[str, ...]
    medium: CopyMedium
    cause: str

    def error(self, method: str = "", failed: dict[int, str] | None = None) -> RolledBack:
        return RolledBack(self.step, self.groups, self.medium.value, self.cause, method, failed)


@dataclass(frozen=True)
class CapturedPeer:
    """A live rank's state being copied for a replica's replacement, and when (in rollbacks done)."""

    peer: int
    state_ref: Any
    digest_ref: Any
    rollbacks: int


@dataclass(frozen=True)
class CapturedLive:
    """Each rank's live state being copied across a hand-over: ``{rank: (state ref, digest ref)}``,
    and when (in rollbacks done)."""

    refs: dict[int, tuple[Any, Any]]
    rollbacks: int


@dataclass(frozen=True)
class SnapshotSkipped:
    """A snapshot not taken: it would pass the group's memory bound."""

    group: str
    step: int
    reason: str


@dataclass(frozen=True)
class GroupStateStatus:
    """What ``status`` and ``doctor`` show of a stateful group."""

    group: str
    kind: StateKind
    last_complete_step: int | None
    last_snapshot_age_s: float | None
    held_bytes: int
    bound_bytes: int
    steps_in_memory: tuple[int, ...]
    steps_on_disk: tuple[int, ...]
    snapshot_every: int = 0
    # Each rank's state digest at ``digest_step`` (sharded: each its own; replicated: all equal).
    digest_step: int | None = None
    replica_digests: dict[int, str] = field(default_factory=dict)
    # A group whose recovery replays: what its replay log holds, and its bound (replay_log_mb).
    replay_log_calls: int | None = None
    replay_log_bytes: int = 0
    replay_log_bound_bytes: int = 0

    @property
    def diverged_ranks(self) -> list[int]:
        """Replicas whose digest differs from the one most ranks have (empty: they agree)."""
        if self.kind is not StateKind.REPLICATED or len(self.replica_digests) < 2:
            return []
        counts = Counter(self.replica_digests.values())
        # The majority's digest; on a tie, rank 0's (the one snapshots keep).
        usual = self.replica_digests.get(0)
        if usual is None or counts[usual] < max(counts.values()):
            usual = counts.most_common(1)[0][0]
        return sorted(r for r, d in self.replica_digests.items() if d != usual)


@dataclass
class _Member:
    group: WorkerGroup
    config: StateConfig
    wait_running: Callable[[], None]
    # Ranks whose actor ran its init (None: every rank). A rollback loads only these in a group that is
    # recovering itself: its fresh replacements get the rollback's step from that group's own restore.
    running_ranks: Callable[[], Collection[int]] | None = None
    loaded_actors: set[str] = field(default_factory=set)  # actors that got a state from the domain (restores, rollbacks)
    last_nbytes: int = 0  # of one snapshot (all its shards, one copy)
    snapshot_at: dict[int, float] = field(default_factory=dict)  # step -> domain clock when taken
    # What the last inventory showed (taken at every snapshot anyway): status reads it without a call.
    seen: tuple[GroupCopies, frozenset[str]] | None = None
    digests: dict[int, dict[int, str]] = field(default_factory=dict)  # step -> rank -> digest, as the ranks report them
    in_flight: _Submitted | None = None  # a periodic snapshot whose acknowledgements are not read yet
    replay_log: ReplayLog = field(default_factory=ReplayLog)  # kept when the group's recovery replays


@dataclass(frozen=True)
class _Submitted:
    """A snapshot's calls, submitted to ``ranks`` (in rank order); ``refs`` their acknowledgements."""

    step: int
    ranks: tuple[int, ...]
    refs: tuple[Any, ...]


class StateDomain:
    """Snapshots and rollbacks of a job's stateful groups.

    Args:
        prefix, namespace: name prefix and Ray namespace of the keeper actors (a daemon's name and
            namespace, so a restarted daemon finds them).
        fence: through what keepers are ended (a daemon's owner fence).
        hooks: lifecycle hooks (metrics, logs, events).
        clock: monotonic clock.
    """

    def __init__(
        self, prefix: str, namespace: str, fence: Fence = UNFENCED, hooks: LifecycleHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        from ..observability.hooks import default_hooks

        self.keepers = KeeperSet(prefix, namespace, fence)
        self.fence = fence
        self.hooks = hooks if hooks is not None else default_hooks()
        self.clock = clock
        self._members: dict[str, _Member] = {}
        self._lock = threading.RLock()  # calls' submission vs a rollback's announcement and loads
        self._pending: Rollback | None = None
        self.last_boundary: int | None = None
        self.last_rollback: Rollback | None = None
        self._rollbacks = 0  # rollbacks done: a peer capture older than the last one is of a history undone
        # Updates counted by an integration whose program has no step boundaries (verl's update_actor
        # calls): None when nothing counts them.
        self.updates_done: int | None = None
        self.update_label = "update"

    # -- progress without step boundaries --------------------------------------------------------
    def count_updates(self, label: str) -> None:
        """Count the job's progress by update calls (``label``: what they are called) from now on."""
        with self._lock:
            if self.updates_done is None:
                self.updates_done = 0
            self.update_label = label

    def note_update(self) -> None:
        """One update call completed: the state has been trained."""
        with self._lock:
            self.updates_done = (self.updates_done or 0) + 1

    @property
    def untrained(self) -> bool:
        """Updates are counted and none has completed: every rank holds its initial state, which the
        init method recreates, so a replacement has nothing to restore."""
        return self.last_boundary is None and self.updates_done == 0

    # -- membership -----------------------------------------------------------------------------
    def register(
        self, group: WorkerGroup, config: StateConfig, wait_running: Callable[[], None] = lambda: None,
        running_ranks: Callable[[], Collection[int]] | None = None,
    ) -> None:  # fmt: skip
        if not config.stateful:
            return
        with self._lock:
            self._members[group.name] = _Member(group, config, wait_running, running_ranks)

    def unregister(self, group_name: str) -> None:
        with self._lock:
            self._members.pop(group_name, None)

    def config_of(self, group_name: str) -> StateConfig | None:
        member = self._members.get(group_name)
        return member.config if member is not None else None

    @property
    def groups(self) -> list[str]:
        return sorted(self._members)

    # -- the driver's side ----------------------------------------------------------------------
    @contextlib.contextmanager
    def calls(self) -> Iterator[None]:
        """Around a stateful group's call submission: raises the pending rollback (once).

        Raises:
            SupersededError: another daemon owns the job now (this one was paused and taken over):
                a call from here would apply a step its driver already replays.
        """
        with self._lock:
            self.fence.check()
            self.raise_pending()
            yield

    def raise_pending(self, method: str = "", failed: dict[int, str] | None = None) -> None:
        """Raise :class:`RolledBack` if a rollback has not been announced yet (then it has)."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            raise pending.error(method, failed)

    @property
    def pending(self) -> Rollback | None:
        return self._pending

    def step_boundary(self, step: int) -> list[SnapshotSkipped]:
        """The driver finished every step before ``step``: snapshot each group that is due.

        Raises:
            RolledBack: a rollback happened since the last call; nothing was snapshotted.
        """
        self.raise_pending()
        self.last_boundary = step
        skipped = []
        for _, member in sorted(self._members.items()):
            memory, disk = member.config.snapshot_due(step) or self._log_full(member), member.config.disk_due(step)
            if memory or disk:
                result = self.snapshot(member.group, step, memory=memory, disk=disk, wait=False)
                if result is not None:
                    skipped.append(result)
            status = self._status(member, *self._seen(member))
            since = None if status.last_complete_step is None else step - status.last_complete_step
            self.hooks.on_state_boundary(member.group.name, step, since, status.held_bytes, len(status.diverged_ranks))
        return skipped

    # -- snapshots ------------------------------------------------------------------------------
    def snapshot(
        self, group: WorkerGroup, step: int, memory: bool = True, disk: bool | None = None, wait: bool = True
    ) -> SnapshotSkipped | None:  # fmt: skip
        """Snapshot ``group`` at the boundary before ``step``: each snapshot rank copies its state to
        host memory and goes on; the copies reach the keepers (one on the shard's node, one on
        another) and, when ``disk`` (default: when due), the disk, beside the rank's next call.

        ``wait=False`` (the periodic snapshots of :meth:`step_boundary`): the calls are submitted and
        their answers read at the group's next snapshot; a rank runs them before the caller's next
        call to it (one caller's calls to an actor run in order), so the copy still precedes the
        next step, which waits only for the copy (and for the rank's previous hand-off, when that
        is slower than a step).

        Returns:
            None, or why the snapshot was skipped (the memory bound).

        Raises:
            ConfigError: the group is not stateful in this domain.
            RolledBack: a rollback is pending (the state is not the one of ``step``).
        """
        member = self._members.get(group.name)
        if member is None:
            raise ConfigError(f"group {group.name} declares no state (state = 'replicated' or 'sharded' to snapshot it)")
        member.wait_running()
        # The ranks as they were while RUNNING: a replacement swapped in meanwhile (a death seen while
        # the keepers are asked) must not get a snapshot before its init; the dead rank's call fails instead.
        workers = list(group.workers)
        cfg = member.config
        disk = cfg.disk_due(step) if disk is None else disk
        disk_dir = cfg.disk_dir if disk else None
        self._settle(member)
        with self._lock:
            self.fence.check()  # a superseded daemon's snapshot would overwrite its successor's
            self.raise_pending()
            ranks = snapshot_ranks(cfg.kind, group.world_size)
            # Every replica takes part, keeping only a digest: a replica that drifted from rank 0 shows.
            taking_part = range(group.world_size) if cfg.kind is StateKind.REPLICATED else ranks
            keepers: dict[str, Any] = {}
            if memory:
                nodes = _alive_nodes()
                keepers = self.keepers.ensure(nodes)
                skipped = self._make_room(member, step)
                if skipped is not None:
                    if disk_dir is None:
                        return skipped
                    keepers = {}  # the disk copy is still written
            refs = []
            for rank in taking_part:
                kept = rank in ranks
                targets = [keepers[n] for n in copy_nodes(group.rank_nodes.get(rank), keepers)] if keepers and kept else []
                refs.append(workers[rank]._supervisor_snapshot.remote(group.name, step, targets, disk_dir if kept else None))
            member.in_flight = _Submitted(step, tuple(taking_part), tuple(refs))
            member.snapshot_at[step] = self.clock()
            member.replay_log.snapshot_requested(step)
        return self._settle(member) if wait else None

    def _settle(self, member: _Member) -> None:
        """Read the answers of the group's snapshot in flight: the digests the ranks report (of their
        previous hand-off), how long it held them; a rank that died in it makes the step incomplete."""
        import ray

        submitted, member.in_flight = member.in_flight, None
        if submitted is None:
            return None
        group = member.group
        try:
            acks = ray.get(list(submitted.refs))
        except ray.exceptions.RayActorError as exc:
            return self._snapshot_interrupted(member, submitted.step, exc)
        # Copied, changed, then swapped in: the daemon's heartbeat thread reads them without a lock.
        digests = {s: dict(d) for s, d in member.digests.items()}
        for rank, ack in zip(submitted.ranks, acks, strict=True):
            previous = ack.get("previous")
            if previous and previous.get("error"):
                log.warning("state_snapshot_incomplete", group=group.name, rank=rank, step=previous["step"], error=previous["error"])
            elif previous and previous.get("digest"):
                digests.setdefault(int(previous["step"]), {})[rank] = previous["digest"]
        member.digests = digests
        self._check_replicas(member)
        self.hooks.on_state_snapshot(group.name, submitted.step, max(float(a["held_s"]) for a in acks), member.last_nbytes)
        return None

    def _snapshot_interrupted(self, member: _Member, step: int, error: Exception) -> None:
        """A rank died inside its snapshot: this step's snapshot is incomplete (a rollback never uses
        it). Not the driver's error: the group's supervisor replaces the rank and rolls back; wait for
        that and announce the rollback here (when the death is not seen yet, the next call announces it)."""
        log.warning("state_snapshot_interrupted", group=member.group.name, step=step, error=first_line(error))
        member.wait_running()
        self.raise_pending()

    def _make_room(self, member: _Member, step: int) -> SnapshotSkipped | None:
        """Free what the keep rule allows, then more if the new snapshot would pass the bound."""
        group, cfg = member.group, member.config
        copies = self._group_copies(member, self.keepers.inventory()[0].get(group.name, []))
        alive = set(self.keepers.handles())
        gone = steps_to_free(copies, alive, KEEP_SNAPSHOTS)
        latest = latest_complete(copies, alive)
        if latest is not None and member.config.replays:
            member.replay_log.snapshot_complete(latest)
            self.hooks.on_replay_log(group.name, len(member.replay_log), member.replay_log.nbytes)
        shards = [c for c in copies.copies if c.medium is CopyMedium.MEMORY and c.step == latest]
        if shards:  # one copy of every shard of the newest complete snapshot
            member.last_nbytes = sum(max(c.nbytes for c in shards if c.rank == r) for r in {c.rank for c in shards})
        bound = int(cfg.snapshot_memory_mb * 2**20)
        needed = 2 * member.last_nbytes  # two copies of every shard
        kept = [s for s in {c.step for c in copies.copies if c.medium is CopyMedium.MEMORY} if s not in gone]
        if held_bytes(copies, kept) + needed > bound and latest is not None:
            gone += [s for s in kept if s < latest]  # keep only the newest complete one
            kept = [s for s in kept if s >= latest]
        if gone:
            self.keepers.free(group.name, sorted(set(gone)))
        freed = set(gone)
        kept_copies = tuple(c for c in copies.copies if c.step not in freed or c.medium is CopyMedium.DISK)
        member.seen = (GroupCopies(copies.kind, copies.world_size, kept_copies), frozenset(alive))
        oldest = min((c.step for c in kept_copies), default=None)
        if oldest is not None:  # times of freed snapshots: a long run would keep one per step
            member.snapshot_at = {s: t for s, t in member.snapshot_at.items() if s >= oldest}
        if held_bytes(copies, kept) + needed > bound:
            reason = (
                f"snapshot of group {group.name} at step {step} skipped: it needs {needed / 2**20:.1f} MiB beside "
                f"{held_bytes(copies, kept) / 2**20:.1f} MiB kept, past snapshot_memory_mb = {cfg.snapshot_memory_mb:g}"
            )
            log.warning("state_snapshot_skipped", group=group.name, step=step, reason=reason)
            self.hooks.on_state_snapshot_skipped(group.name, step, reason)
            return SnapshotSkipped(group.name, step, reason)
        return None

    def wait_snapshots(self, group: WorkerGroup, timeout_s: float = 60.0) -> list[dict[str, Any] | None]:
        """Wait until the group's snapshot in flight reached the keepers (for callers that must know it is complete: tests, benchmarks)."""
        import ray

        member = self._members[group.name]
        ranks = snapshot_ranks(member.config.kind, group.world_size)
        return ray.get([group.workers[r]._supervisor_snapshot_wait.remote(timeout_s) for r in ranks])

    def _finish_hand_offs(self) -> None:
        """Let every rank's snapshot in flight reach the keepers: the ranks finish a hand-off on their
        own after the daemon that asked for it died, and the newest complete step counts it."""
        import ray

        refs = [w._supervisor_snapshot_wait.remote(HAND_OFF_WAIT_S) for m in self._members.values() for w in m.group.workers]
        ray.wait(refs, num_returns=len(refs), timeout=HAND_OFF_WAIT_S + 5.0)  # a rank busy or gone: its copies are what the keepers have

    # -- what exists ----------------------------------------------------------------------------
    def _group_copies(self, member: _Member, memory: list[ShardCopy]) -> GroupCopies:
        return GroupCopies(member.config.kind, member.group.world_size, tuple(memory) + tuple(_disk_copies(member)))

    def copies(self) -> tuple[dict[str, GroupCopies], set[str]]:
        """Every group's copies (memory and disk) and the nodes whose keeper answered."""
        memory, answered = self.keepers.inventory()
        return {name: self._group_copies(m, memory.get(name, [])) for name, m in self._members.items()}, answered

    def status(self) -> list[GroupStateStatus]:
        """Every group's snapshots as the keepers and the disk hold them now (asks every keeper)."""
        copies, alive = self.copies()
        return [self._status(member, copies[name], alive) for name, member in sorted(self._members.items())]

    def cached_status(self) -> list[GroupStateStatus]:
        """The same, as the last snapshot's inventory showed it (no call: the daemon's record writes
        read it every heartbeat). A group not snapshotted yet shows what its disk holds."""
        # Read by the heartbeat thread beside the driver's: a copy of the members, and each member's
        # inventory and digests are only ever replaced, never changed in place.
        return [self._status(member, *self._seen(member)) for _, member in sorted(dict(self._members).items())]

    def _seen(self, member: _Member) -> tuple[GroupCopies, frozenset[str]]:
        return member.seen or (self._group_copies(member, []), frozenset())

    def _status(self, member: _Member, group_copies: GroupCopies, alive: frozenset[str] | set[str]) -> GroupStateStatus:
        latest = latest_complete(group_copies, alive)
        taken = member.snapshot_at.get(latest) if latest is not None else None
        digest_step = max((s for s, d in member.digests.items() if len(d) >= member.group.world_size), default=None)
        return GroupStateStatus(
            member.group.name, member.config.kind, latest, None if taken is None else self.clock() - taken,
            held_bytes(group_copies), int(member.config.snapshot_memory_mb * 2**20),
            tuple(sorted({c.step for c in group_copies.copies if c.medium is CopyMedium.MEMORY})),
            tuple(sorted({c.step for c in group_copies.copies if c.medium is CopyMedium.DISK})),
            member.config.snapshot_every, digest_step, dict(member.digests[digest_step]) if digest_step is not None else {},
            len(member.replay_log) if member.config.replays else None, member.replay_log.nbytes,
            int(member.config.replay_log_mb * 2**20),
        )  # fmt: skip

    def _check_replicas(self, member: _Member) -> None:
        """Keep the digests of the newest step every rank reported; log replicas that differ."""
        complete = [step for step, by_rank in member.digests.items() if len(by_rank) >= member.group.world_size]
        if not complete:
            return
        newest = max(complete)
        member.digests = {step: d for step, d in member.digests.items() if step >= newest}
        diverged = self._status(member, *self._seen(member)).diverged_ranks
        if diverged:
            log.error("state_replicas_diverged", group=member.group.name, step=newest, ranks=diverged, digests=member.digests[newest])

    # -- recovery -------------------------------------------------------------------------------
    def capture_peer(self, group: WorkerGroup, survivors: list[int], targets: list[int]) -> CapturedPeer | None:
        """Start copying the state of a live rank (on another node than ``targets`` where possible),
        into refs owned by this process so they outlive the peer's process. Queued behind the peer's
        current call, so the copy is taken at a call boundary."""
        nodes = {r: group.rank_nodes.get(r) for r in survivors}
        peer = choose_peer(nodes, [group.rank_nodes.get(r) for r in targets])
        if peer is None:
            return None
        state_ref, digest_ref = group.workers[peer]._supervisor_capture_state.options(num_returns=2).remote()
        return CapturedPeer(peer, state_ref, digest_ref, self._rollbacks)

    def capture_live(self, group: WorkerGroup, ranks: list[int], survivors: list[int]) -> CapturedLive:
        """Start copying the live state of every rank of a re-formation around a hand-over: a
        handed-over rank's from its predecessor (still alive), a survivor's from itself, and a
        replaced replica's (a failure beside the hand-over) from a survivor. Queued behind each
        actor's current call, so taken at a call boundary, before anyone re-initialises.

        Raises:
            StateLostError: a rank has no live source (a sharded rank that failed: a rollback's case).
        """
        refs: dict[int, tuple[Any, Any]] = {}
        sources: dict[int, Any] = {}
        for rank in ranks:
            predecessor = group.predecessors.get(rank)
            if predecessor is not None:
                sources[rank] = predecessor.handle
            elif rank in survivors:
                sources[rank] = group.workers[rank]
        for rank, handle in sources.items():
            refs[rank] = tuple(handle._supervisor_capture_state.options(num_returns=2).remote())  # type: ignore[assignment]
        missing = [r for r in ranks if r not in refs]
        if missing:
            config = self._members[group.name].config
            peer = choose_peer({r: group.rank_nodes.get(r) for r in survivors}, [group.rank_nodes.get(r) for r in missing])
            if config.kind is not StateKind.REPLICATED or peer is None:
                raise StateLostError(f"group {group.name}: rank(s) {missing} have no live state to copy across the hand-over")
            for rank in missing:
                refs[rank] = refs[peer]
        return CapturedLive(refs, self._rollbacks)

    def restore_live(self, group: WorkerGroup, captured: CapturedLive) -> float:
        """Load each rank of a re-formation with the state :meth:`capture_live` copied for it; the
        seconds it took. A job-wide rollback since the capture wins (as in :meth:`restore_from_peer`).

        Raises:
            StateLostError: a source died before its state was copied, or a digest did not match.
        """
        ranks = sorted(captured.refs)
        what = f"the live state of rank(s) {ranks} could not be carried across the hand-over"
        return self._load_captured(group, ranks, captured.refs.__getitem__, captured.rollbacks, "live", what)

    def restore_from_peer(self, group: WorkerGroup, captured: CapturedPeer, ranks: list[int]) -> float:
        """Load a captured peer state into ``ranks`` (each checks the digest); the seconds it took.

        A job-wide rollback since the capture (another group's failure, recovering beside this one)
        took the peer back too: the capture is of a history undone, and ``ranks`` load the rollback's
        step from its snapshot instead.

        Raises:
            StateLostError: the peer died before its state was copied, or a digest did not match.
        """
        what = f"the state of rank {captured.peer} could not be copied to rank(s) {ranks}"
        return self._load_captured(group, ranks, lambda _: (captured.state_ref, captured.digest_ref), captured.rollbacks, "peer", what)

    def _load_captured(
        self, group: WorkerGroup, ranks: list[int], source: Callable[[int], tuple[Any, Any]], rollbacks: int, kind: str, what: str,
    ) -> float:  # fmt: skip
        """Load into each of ``ranks`` the ``(state ref, digest ref)`` captured for it, under the lock a
        rollback holds; a rollback since the capture (``rollbacks``) wins. ``what`` says what was lost."""
        import ray

        with self._lock:  # never interleaved with a rollback's loads
            self.fence.check()  # the ranks belong to whoever owns the job now
            if rollbacks != self._rollbacks and self.last_rollback is not None:
                return self._restore_to_last_rollback(group, ranks)
            started = time.perf_counter()
            try:
                ray.get([group.workers[r]._supervisor_load_state.remote(*source(r)) for r in ranks], timeout=LOAD_TIMEOUT_S)
            except Exception as exc:
                raise StateLostError(f"group {group.name}: {what}: {first_line(exc)}") from exc
            self._note_loaded(group, ranks)
        seconds = time.perf_counter() - started
        self.hooks.on_state_restored(group.name, kind, seconds, tuple(ranks))
        return seconds

    def _restore_to_last_rollback(self, group: WorkerGroup, ranks: list[int]) -> float:
        """Load ``ranks`` of ``group`` with the step the job last rolled back to (caller holds the lock)."""
        import ray

        assert self.last_rollback is not None
        step = self.last_rollback.step
        copies, alive = self.copies()
        target = plan_rollback({group.name: copies[group.name]}, alive, not_after=step)
        if target is None or target.step != step:
            raise StateLostError(f"group {group.name}: rank(s) {ranks} must rejoin the job at step {step}, and no snapshot of that step is left")
        started = time.perf_counter()
        refs = self._load_refs(self._members[group.name], target, ranks)
        try:
            ray.get(refs, timeout=LOAD_TIMEOUT_S)
        except Exception as exc:
            raise StateLostError(f"group {group.name}: rank(s) {ranks} could not load step {step}: {first_line(exc)}") from exc
        self._note_loaded(group, ranks)
        seconds = time.perf_counter() - started
        log.info("state_restored_to_rollback", group=group.name, ranks=ranks, step=step, medium=target.medium.value)
        self.hooks.on_state_restored(group.name, restore_kind(target.medium.value), seconds, tuple(ranks))
        return seconds

    # -- replay: recovery inside one group --------------------------------------------------------
    def log_call(self, group: WorkerGroup, method: str, per_rank: Mapping[int, tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        """A mutating call of ``group`` completed: log it for a replay (a group whose recovery replays)."""
        member = self._members.get(group.name)
        if member is None or not member.config.replays:
            return
        with self._lock:
            member.replay_log.append(method, per_rank)
            calls, nbytes = len(member.replay_log), member.replay_log.nbytes
        self.hooks.on_replay_log(group.name, calls, nbytes)

    def _log_full(self, member: _Member) -> bool:
        return member.config.replays and member.replay_log.nbytes > member.config.replay_log_mb * 2**20

    def restore_own(self, group: WorkerGroup, cause: str) -> int:
        """Load ``group``'s own newest complete snapshot into every one of its ranks (no other group is
        touched, nothing is announced to the driver); the step it restored.

        Raises:
            StateLostError: the group has no complete snapshot, or the log cannot replay from it.
        """
        import ray

        with self._lock:
            self.fence.check()  # the ranks belong to whoever owns the job now
            member = self._members[group.name]
            copies, alive = self.copies()
            target = plan_rollback({group.name: copies[group.name]}, alive)
            if target is None:
                raise StateLostError(self._lost_message(group.name, cause, {group.name: copies[group.name]}, alive))
            try:
                member.replay_log.since(target.step)
            except ReplayGap as gap:
                raise StateLostError(f"state of group {group.name} lost: {cause}; {gap}") from None
            refs = self._load_refs(member, target)
        # Not under the lock: the other groups' calls go on (this group's wait at its gate meanwhile).
        started = time.perf_counter()
        try:
            ray.get(refs, timeout=LOAD_TIMEOUT_S)
        except Exception as exc:
            raise StateLostError(f"group {group.name}: restore of step {target.step} failed while loading: {first_line(exc)}") from exc
        with self._lock:
            self._note_loaded(group, range(group.world_size))
        seconds = time.perf_counter() - started
        log.warning("state_restored_for_replay", group=group.name, step=target.step, medium=target.medium.value, cause=cause, seconds=round(seconds, 3))
        self.hooks.on_state_restored(group.name, restore_kind(target.medium.value), seconds, tuple(range(group.world_size)))
        return target.step

    def replay(self, group: WorkerGroup, step: int) -> int:
        """Run the mutating calls logged since ``step`` again, in order, on the ranks they ran on
        (``group`` was just restored to ``step``); the number of calls replayed.

        Raises:
            StateLostError: a replayed call failed (one line: the group, the step, the call, the cause).
        """
        import ray

        member = self._members[group.name]
        with self._lock:
            calls = member.replay_log.since(step)
        started = time.perf_counter()
        for i, call in enumerate(calls, 1):
            self.fence.check()
            refs = [group.call_actor(group.workers[r], call.method, args, kwargs) for r, (args, kwargs) in sorted(call.per_rank.items())]
            try:
                ray.get(refs, timeout=LOAD_TIMEOUT_S)
            except Exception as exc:
                raise StateLostError(
                    f"group {group.name}: replay from step {step} failed at call {i} of {len(calls)} ({call.method}): {first_line(exc)}"
                ) from exc
        seconds = time.perf_counter() - started
        log.warning("state_replayed", group=group.name, step=step, calls=len(calls), seconds=round(seconds, 3))
        self.hooks.on_state_replayed(group.name, step, len(calls), seconds)
        return len(calls)

    def roll_back(self, group: WorkerGroup, cause: str) -> Rollback:
        """Take every stateful group to the newest step all of them can restore, and announce it.

        ``group`` (the one that failed) has been re-initialised; the others are live and get their
        loads queued behind whatever call they run (a survivor re-initialising: behind its init).
        Another group that is recovering at the same time gets no load on its fresh replacements: one
        whose init has not run cannot load a state, and that group's own init restores the rollback's
        step into it afterwards (a peer copy or live state captured before this rollback is of a
        history undone, and is not used; one captured after it is of the rolled-back survivors).

        Raises:
            StateLostError: no step is restorable by every group (one line: the group, the rank, the
                lost step and the setting that would have saved it).
        """
        import ray

        with self._lock:
            self.fence.check()  # a superseded daemon's rollback would load old state into its successor's ranks
            copies, alive = self.copies()
            target = plan_rollback(copies, alive)
            if target is None:
                raise StateLostError(self._lost_message(group.name, cause, copies, alive))
            rollback = Rollback(target.step, tuple(sorted(self._members)), target.medium, cause)
            self._pending = rollback  # before any load: no call submitted from now on sees old state unannounced
            started = time.perf_counter()
            refs, loading = [], {}
            for _, member in sorted(self._members.items()):
                loading[member.group.name] = ranks = self._loadable(member, everyone=member.group is group)
                refs += self._load_refs(member, target, ranks)
            try:
                ray.get(refs, timeout=LOAD_TIMEOUT_S)
            except Exception as exc:
                self._pending = None
                raise StateLostError(f"rollback to step {target.step} failed while loading: {first_line(exc)}") from exc
            for _, member in sorted(self._members.items()):
                self._note_loaded(member.group, loading[member.group.name])
        seconds = time.perf_counter() - started
        self.last_rollback = rollback
        self._rollbacks += 1
        for member in self._members.values():  # digests of steps past the target are of a history undone
            member.digests = {s: d for s, d in member.digests.items() if s <= target.step}
            member.replay_log.rolled_back(target.step)  # the driver makes those calls again
            member.in_flight = None  # and so are the answers of a snapshot taken before the rollback
        log.warning("rolled_back", step=target.step, groups=list(rollback.groups), medium=target.medium.value, cause=cause, seconds=round(seconds, 3))
        self.hooks.on_rolled_back(group.name, rollback.groups, target.step, target.medium.value, seconds, cause)
        return rollback

    def restore_all(self, cause: str, snapshotted_before: Collection[str] = ()) -> Rollback | None:
        """On a daemon's restart: take every stateful group to the newest complete step (their live
        state may be a step past the progress the driver saved). None, the live state kept, while a
        group has no complete snapshot yet (the earlier daemon died before its first one: at the
        job's first step boundary, the groups snapshot in turn, so one may have its first and another
        not): there is no step to go back to, as with no snapshot at all.

        ``snapshotted_before``: groups the earlier daemon recorded a complete snapshot of; one of them
        without a snapshot now has lost its copies, which is a loss, never kept quietly."""
        with self._lock:
            self.keepers.ensure(_alive_nodes())  # adopts the earlier incarnation's keepers by name: the inventory asks only known ones
            self._finish_hand_offs()
            copies, alive = self.copies()
            unsnapshotted = sorted(n for n in self._members if latest_complete(copies[n], alive) is None)
            if unsnapshotted and not set(unsnapshotted) & set(snapshotted_before):
                log.warning("state_not_restored", groups=unsnapshotted, reason="no complete snapshot yet: the live state is kept")
                return None
            anyone = next(iter(self._members.values()))
            rollback = self.roll_back(anyone.group, cause)
            self._pending = None  # the driver starts from it: nothing to announce
            return rollback

    def _loadable(self, member: _Member, everyone: bool) -> list[int]:
        """The ranks of a member a rollback loads: every one (``everyone``: the group that failed, just
        re-initialised), else those whose actor ran its init or already got a state from this domain.
        A fresh replacement of a group that is recovering too is left to that group's own restore."""
        ranks = range(member.group.world_size)
        if everyone or member.running_ranks is None:
            return list(ranks)
        initialised = set(member.running_ranks())
        workers = member.group.workers
        return [r for r in ranks if r in initialised or workers[r]._actor_id.hex() in member.loaded_actors]

    def _note_loaded(self, group: WorkerGroup, ranks: Collection[int]) -> None:
        """``ranks`` of ``group`` hold a state this domain gave them (caller holds the lock)."""
        member = self._members.get(group.name)
        if member is None:
            return
        current = {w._actor_id.hex() for w in group.workers}
        member.loaded_actors = (member.loaded_actors & current) | {group.workers[r]._actor_id.hex() for r in ranks}

    def _load_refs(self, member: _Member, target: RollbackTarget, ranks: Collection[int] | None = None) -> list[Any]:
        """Load ``target``'s step into ``ranks`` of the member's group (default: every rank)."""
        group, cfg = member.group, member.config
        sources = target.sources[group.name]
        keepers = self.keepers.handles()
        fetched: dict[int, Any] = {}
        refs = []
        for rank in sorted(ranks) if ranks is not None else range(group.world_size):
            src_rank = rank if cfg.kind is StateKind.SHARDED else 0
            source = sources[src_rank]
            worker = group.workers[rank]
            if source.medium is CopyMedium.DISK:
                assert cfg.disk_dir is not None
                refs.append(worker._supervisor_load_disk_state.remote(cfg.disk_dir, group.name, target.step, src_rank, source.digest))
                continue
            if src_rank not in fetched:  # one fetch per shard, whatever the number of ranks loading it
                fetched[src_rank] = keepers[source.node].fetch.remote(group.name, target.step, src_rank)
            refs.append(worker._supervisor_load_state.remote(fetched[src_rank], source.digest))
        return refs

    def _lost_message(self, failed_group: str, cause: str, copies: dict[str, GroupCopies], alive: set[str]) -> str:
        if self.last_boundary is not None:
            when = f"at step {self.last_boundary}"
        elif self.updates_done is not None:
            when = f"after {self.updates_done} {self.update_label} call(s)"
        else:
            when = "at an unknown step"
        missing = []
        for name, member in sorted(self._members.items()):
            if latest_complete(copies[name], alive) is None:
                if member.config.lost_hint:
                    remedy = member.config.lost_hint
                elif member.config.snapshot_every == 0:
                    remedy = "set snapshot_every"
                else:
                    remedy = "set disk_dir and disk_snapshot_every (both in-memory copies were lost)"
                missing.append(f"{name} ({member.config.kind.value}: no complete snapshot; {remedy})")
        why = "; ".join(missing) or "no step is complete in every stateful group at once"
        return f"state of group {failed_group} lost {when}: {cause}; cannot roll back: {why}"

    def close(self, kill_keepers: bool = True) -> None:
        """End the keepers (and every snapshot they hold)."""
        if kill_keepers:
            self.keepers.kill()


_last_alive: list[str] = []  # the GCS's last answer (kept for a snapshot taken while it restarts)
NODES_TIMEOUT_S = 1.0


def _alive_nodes() -> list[str]:
    """The nodes the GCS calls alive. While the GCS is away (a restart under GCS fault tolerance) or
    does not answer within :data:`NODES_TIMEOUT_S`, its last answer: snapshots go on meanwhile, and
    a node lost during the outage is seen once the GCS is back."""
    global _last_alive
    import ray
    from ray.core.generated import gcs_pb2

    if not (gcs_outages.state()[1] and _last_alive):
        try:
            infos = ray._private.worker.global_worker.gcs_client.get_all_node_info(timeout=NODES_TIMEOUT_S)
        except Exception:
            if not _last_alive:
                raise
        else:
            _last_alive = sorted(node_id.hex() for node_id, info in infos.items() if info.state == gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE)
    return list(_last_alive)


def _disk_copies(member: _Member) -> list[ShardCopy]:
    disk_dir = member.config.disk_dir
    if not disk_dir:
        return []
    out = []
    for marker in glob.glob(os.path.join(disk_dir, member.group.name, "step-*", "rank-*", DISK_MARKER)):
        try:
            with open(marker) as f:
                meta = json.load(f)
            out.append(ShardCopy(int(meta["step"]), int(meta["rank"]), CopyMedium.DISK, "", int(meta["nbytes"]), str(meta["digest"])))
        except (OSError, ValueError, KeyError):  # a half-written marker: that shard is not on disk
            continue
    return out
