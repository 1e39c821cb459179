"""The owner fence: one generation per supervisor, and every record write and destructive action
checked against it atomically.

A daemon paused past its grace period (SIGSTOP, a VM freeze, a GCS stall) is taken over by a new
start. When it resumes it may do anything before it notices: a SIGTERM tears down, a driver saves its
progress, a call timeout that passed during the pause marks a rank hung and replaces it. None of
that may touch the job the new daemon now owns.

So one small actor per supervisor, :class:`_FenceActor` (named :data:`FENCE_ACTOR_NAME` in the
supervisor's Ray namespace, detached, pinned to the head node like the KV store), holds the owner
generation. A claim that wins increments it. Every record write, actor kill, placement-group removal
and the record's deletion is a call to that actor carrying the caller's generation; the actor runs one
call at a time, so the check and the action cannot be separated: a superseded daemon's calls are
refused, whatever it does next, and it learns so from the refusal (:class:`OwnerFence`).

The fence is also the one reader that sees every heartbeat, on its own monotonic clock
(:class:`~.liveness.HeartbeatWatch`): it judges a claim's "is the owner gone?" there, and tells
``status``, ``stop`` and ``gc`` how long the daemon has been silent, with no cross-host clock compared.

A fence created over an existing record (the first start of this version, or a fence somebody
killed) takes the record's owner and generation and counts the owner as heard from at its own start,
so it never grants a takeover sooner than the grace period.
"""

from __future__ import annotations

import enum
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterUnavailableError, SupersededError, first_line
from ..fencing import UNFENCED
from ..observability.log import get_logger
from ..retrying import Backoff, poll
from .liveness import HeartbeatWatch, Liveness, ProcessIdentity, judge
from .ownership import (
    HEAD_RESOURCE,
    Owned,
    kill_named,
    namespace_of,
    remove_placement_group_ids,
    start_head_actor,
)
from .record import RecordStore, SupervisorRecord

__all__ = [
    "FENCE_ACTOR_NAME",
    "ClaimVerdict",
    "ClaimRequest",
    "FenceState",
    "FenceStatus",
    "decide_claim",
    "OwnerFence",
    "fence_status",
    "observed_silence",
    "answer_is_fresh",
]

log = get_logger("fence")

FENCE_ACTOR_NAME = "fence"
"""Name of the fence actor in its supervisor's Ray namespace (expected there, like the KV store)."""

# A fence call is a few milliseconds; one that takes this long means the GCS or the head is in trouble.
FENCE_CALL_TIMEOUT_S = 30.0
# The fence's calls that only read its state run in a group of their own: a write waiting for the GCS
# (restarting) must not hold a stateful group's check, and with it the driver's steps. A claim still
# runs one at a time with writes; a check racing a claim is the same race as a claim right after it.
READS_GROUP = "reads"
READ_ONLY = frozenset({"check", "status"})
# How long a new fence may take to start (a worker process on the head node).
_START_TIMEOUT_S = 120.0


class ClaimVerdict(enum.Enum):
    GRANTED = "granted"
    ALIVE = "alive"  # the current owner was heard from within its grace period
    RETIRED = "retired"  # the supervisor was just torn down: its fence goes away; make a new one


class Refusal(enum.Enum):
    SUPERSEDED = "superseded"
    RETIRED = "retired"


@dataclass(frozen=True)
class ClaimRequest:
    """A claim of the supervisor for ``owner``.

    Attributes:
        owner: the claimer's id.
        judged_owner: the owner whose record the claimer read (None: it found no record).
        judged_gone: the claimer proved that owner's process gone (same pid space, no such pid).
        grace_s: the claimer's own grace period (how long it may be silent before others take over).
        interval_s: its heartbeat interval.
        process: where the claimer runs (so a later claimer on the same host can prove it gone).
        grace_override_s: take over an owner silent for this long instead of its own grace period
            (``gc --grace``); never below three beats.
    """

    owner: str
    judged_owner: str | None
    judged_gone: bool
    grace_s: float
    interval_s: float
    process: ProcessIdentity | None = None
    grace_override_s: float | None = None


@dataclass
class FenceState:
    """What a fence holds."""

    generation: int = 0
    owner: str | None = None
    owner_process: ProcessIdentity | None = None
    grace_s: float = 0.0
    interval_s: float = 1.0
    detached: bool = False
    retired: bool = False


def decide_claim(state: FenceState, request: ClaimRequest, silent_s: float) -> ClaimVerdict:
    """Whether ``request`` may take the supervisor over from ``state``'s owner, silent for ``silent_s``
    on the fence's clock (pure)."""
    if state.retired:
        return ClaimVerdict.RETIRED
    if state.owner is None or state.detached:
        return ClaimVerdict.GRANTED
    if request.owner == state.owner:
        # The owner claiming again with a new generation, fencing off every process that holds the old
        # one: `supervisor run` hands the job to the process that makes its groups and takes it back when
        # the command ends (an owner id is a fresh uuid per incarnation: nobody else presents it).
        return ClaimVerdict.GRANTED
    if request.judged_gone and request.judged_owner == state.owner:
        return ClaimVerdict.GRANTED  # the claimer saw this owner's process gone: no need to wait
    grace = state.grace_s
    if request.grace_override_s is not None:
        grace = max(request.grace_override_s, 3 * state.interval_s)
    return ClaimVerdict.GRANTED if silent_s > grace else ClaimVerdict.ALIVE


@dataclass(frozen=True)
class FenceStatus:
    """A fence's answer to readers."""

    generation: int
    owner: str | None
    owner_process: ProcessIdentity | None
    silent_s: float  # since the owner's last write, on the fence's monotonic clock
    detached: bool
    retired: bool
    interval_s: float
    grace_s: float

    @property
    def liveness(self) -> Liveness:
        return judge(self.silent_s, self.interval_s, self.grace_s, self.detached)


class _FenceActor:
    """The fence itself. Ray runs its methods one at a time (``max_concurrency=1``): each check and
    the action it guards happen with no other call between them."""

    def __init__(self, supervisor: str) -> None:
        self._supervisor = supervisor
        self._store = RecordStore()
        self._state = FenceState()
        self._watch = HeartbeatWatch()
        record = self._store.get(supervisor)
        if record is not None:  # the owner is heard from now: no takeover before its grace period
            self._state = FenceState(
                record.generation, record.owner, record.process, record.orphan_grace_s, record.heartbeat_interval_s, record.detached
            )
        self._watch.observe(-1 if record is None else record.heartbeat_seq, time.monotonic())

    def claim(self, request: ClaimRequest) -> tuple[ClaimVerdict, int, FenceStatus]:
        now = time.monotonic()
        verdict = decide_claim(self._state, request, self._watch.silent_for(now))
        status = self.status()
        if verdict is ClaimVerdict.GRANTED:
            self._state = FenceState(self._state.generation + 1, request.owner, request.process, request.grace_s, request.interval_s)
            self._watch = HeartbeatWatch()
            self._watch.observe(0, now)  # the claim itself is the new owner's first sign of life
        return verdict, self._state.generation, status

    def write(
        self, generation: int, data: bytes, seq: int, detached: bool, events: bytes | None = None
    ) -> Refusal | None:
        refusal = self._check(generation)
        if refusal is None:
            self._store.put_raw(self._supervisor, data)
            if events is not None:
                self._store.put_events_raw(self._supervisor, events)
            self._watch.observe(seq, time.monotonic())
            self._state.detached = detached
        return refusal

    def check(self, generation: int) -> Refusal | None:
        return self._check(generation)

    def kill_actors(self, generation: int, pickled: list[bytes]) -> Refusal | None:
        refusal = self._check(generation)
        if refusal is None:
            UNFENCED.kill_actors([h for h in map(_unpickle_handle, pickled) if h is not None])
        return refusal

    def kill_named(self, generation: int, names: list[str]) -> Refusal | None:
        refusal = self._check(generation)
        if refusal is None:
            kill_named(self._supervisor, names)
        return refusal

    def remove_placement_groups(self, generation: int, pg_ids: list[str]) -> Refusal | None:
        refusal = self._check(generation)
        if refusal is None:
            remove_placement_group_ids(pg_ids)
        return refusal

    def retire(self, generation: int, events: bytes | None = None) -> Refusal | None:
        """Delete the record (writing the last ``events``, which outlive it) and refuse everything from
        now on (the caller then kills this actor; a later claimer that finds it retired does so too)."""
        refusal = self._check(generation)
        if refusal is None:
            if events is not None:
                self._store.put_events_raw(self._supervisor, events)
            self._store.delete(self._supervisor)
            self._state.retired = True
        return refusal

    def status(self) -> FenceStatus:
        s = self._state
        silent = self._watch.silent_for(time.monotonic())
        return FenceStatus(s.generation, s.owner, s.owner_process, silent, s.detached, s.retired, s.interval_s, s.grace_s)

    def _check(self, generation: int) -> Refusal | None:
        if self._state.retired:
            return Refusal.RETIRED
        return None if generation == self._state.generation else Refusal.SUPERSEDED


def _method(handle: Any, name: str) -> Any:
    """``handle``'s method ``name``; a read-only one runs in the fence's reads group, beside a write."""
    method = getattr(handle, name)
    return method.options(concurrency_group=READS_GROUP) if name in READ_ONLY else method


def _unpickle_handle(data: bytes) -> Any:
    """An actor handle sent as bytes, or None when Ray can no longer describe its class.

    Handles travel pickled, one by one, rather than as call arguments: Ray rebuilds a handle from its
    class in the GCS function table of the job that created the actor, and drops that table once the
    job and all its detached actors are gone. A dead replacement started by a daemon that died since
    is such an actor; as an argument it would fail the whole call, here it is skipped (it is dead).
    """
    try:
        return pickle.loads(data)
    except Exception as exc:
        log.debug("actor_handle_unavailable", error=first_line(exc))
        return None


def _fence_handle(supervisor: str, create: bool) -> Any:
    """The supervisor's fence actor (created when ``create``; None when absent)."""
    import ray

    namespace = namespace_of(supervisor)
    try:
        return ray.get_actor(FENCE_ACTOR_NAME, namespace=namespace)
    except ValueError:
        if not create:
            return None
    # One call at a time (see the class), but for the read-only calls in a group of their own.
    return start_head_actor(_FenceActor, FENCE_ACTOR_NAME, namespace, 1, supervisor, concurrency_groups={READS_GROUP: 1})


def fence_status(supervisor: str, timeout_s: float = 5.0) -> FenceStatus | None:
    """What the supervisor's fence says (None: it has no fence, or it does not answer in time)."""
    import ray

    handle = _fence_handle(supervisor, create=False)
    if handle is None:
        return None
    try:
        return ray.get(_method(handle, "status").remote(), timeout=timeout_s)  # type: ignore[no-any-return]
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
        log.debug("fence_unreachable", supervisor=supervisor, error=first_line(exc))
        return None


def answer_is_fresh(waited_s: float, grace_s: float | None) -> bool:
    """Whether a "you still own it" that took ``waited_s`` to arrive still holds when it arrives (pure).

    A successor may claim once the fence has not heard from the owner for ``grace_s``, and a running
    owner beats more than twice per grace period, so no claim can come within half a grace period of
    the fence's answer. An answer that arrived within a quarter of it leaves the other quarter for
    the act it guards and for a late beat; a slower one (the asker was paused while it waited) may
    predate a takeover. An owner that never claimed (no grace) gets no fresh answer.
    """
    return grace_s is not None and waited_s <= grace_s / 4


def observed_silence(record: SupervisorRecord, now: float) -> tuple[float, bool]:
    """For how long ``record``'s daemon has not been heard from, and whether its fence measured it
    (on one monotonic clock) rather than the fallback: the record's wall-clock age by the reader's
    clock, which another host's skew distorts."""
    status = fence_status(record.name)
    if status is not None:
        return status.silent_s, True
    return record.heartbeat_age(now), False


class OwnerFence:
    """One process's hold on a supervisor: the generation its claim won, and the fenced calls.

    Implements :class:`supervisor.fencing.Fence`, so pools and groups kill and remove through it.
    The first refusal marks it superseded for good, tells ``on_superseded`` (once), and raises
    :class:`~supervisor.errors.SupersededError`; every later call raises at once.
    """

    def __init__(self, supervisor: str, on_superseded: Callable[[SupersededError], None] | None = None) -> None:
        self.supervisor = supervisor
        self.on_superseded = on_superseded
        self.generation: int | None = None
        self.superseded: SupersededError | None = None
        self.grace_s: float | None = None  # the grace period the claim was granted with
        self._handle: Any = None
        self._lock = threading.Lock()

    # -- the claim ------------------------------------------------------------------------------
    def claim(
        self, owner: str, grace_s: float, interval_s: float, record: SupervisorRecord | None = None, grace_override_s: float | None = None
    ) -> tuple[ClaimVerdict, FenceStatus]:
        """Try to become the supervisor's owner, taking it over from an owner that is gone: one whose
        process this one can prove gone, one detached, or one the fence has not heard from for its
        grace period (``grace_override_s``: for this long instead).

        Args:
            record: the supervisor's record as the caller read it (its owner's process is judged when
                the fence knows no other).

        Returns:
            The verdict, and the fence's status just before the claim (whom a refusal is about).
        """
        import ray

        me = ProcessIdentity.current()

        def ask() -> tuple[Any, ClaimVerdict, int, FenceStatus] | None:
            handle = _fence_handle(self.supervisor, create=True)
            try:
                status: FenceStatus = ray.get(handle.status.remote(), timeout=_START_TIMEOUT_S)
                process = status.owner_process or (record.process if record is not None and record.owner == status.owner else None)
                gone = process is not None and process.provably_gone(me)
                request = ClaimRequest(owner, status.owner, gone, grace_s, interval_s, me, grace_override_s)
                verdict, generation, status = ray.get(handle.claim.remote(request), timeout=_START_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise ClusterUnavailableError(
                    f"the owner fence of supervisor {self.supervisor} did not answer within {_START_TIMEOUT_S:g}s "
                    f"(it needs a sliver of the head node's {HEAD_RESOURCE!r} resource)"
                ) from None
            except ray.exceptions.RayActorError:
                verdict = ClaimVerdict.RETIRED  # killed as we called it: make a new one
            if verdict is not ClaimVerdict.RETIRED:
                return handle, verdict, generation, status
            # A torn-down supervisor's fence that its daemon did not get to kill: it refuses
            # everything, so ending it harms nobody.
            ray.kill(handle, no_restart=True)
            return None

        answered = poll(ask, Backoff.fixed(0.1), timeout_s=_START_TIMEOUT_S)
        if answered is None:
            raise ClusterUnavailableError(f"the retired owner fence of supervisor {self.supervisor} did not go away")
        handle, verdict, generation, status = answered
        if verdict is ClaimVerdict.GRANTED:
            self._handle, self.generation, self.grace_s = handle, generation, grace_s
        return verdict, status

    # -- fenced calls ---------------------------------------------------------------------------
    def write_record(
        self, data: bytes, seq: int, detached: bool = False, events: bytes | None = None
    ) -> None:
        """Write the record (and, when given, the event history) unless superseded."""
        self._call("write", data, seq, detached, events)

    def check(self) -> None:
        """Raise :class:`SupersededError` unless this process still owns the supervisor.

        The act the check guards happens after the answer arrives, so an answer is trusted only when
        it came back quickly (:func:`answer_is_fresh`): a slow one (this process was paused while it
        waited, and a successor may have taken over since the fence said yes) is asked for again.
        """
        while True:
            asked = time.monotonic()
            self._call("check")
            waited = time.monotonic() - asked
            if answer_is_fresh(waited, self.grace_s):
                return
            log.warning("fence_answer_stale", supervisor=self.supervisor, waited_s=round(waited, 3), grace_s=self.grace_s)

    def kill_actors(self, actors: Sequence[Any]) -> None:
        if actors:
            self._call("kill_actors", [pickle.dumps(a) for a in actors])

    def kill_named(self, names: Sequence[str]) -> None:
        if names:
            self._call("kill_named", list(names))

    def remove_placement_groups(self, pgs: Sequence[Any]) -> None:
        if pgs:
            self._call("remove_placement_groups", [pg.id.hex() for pg in pgs])

    def remove_placement_group_ids(self, pg_ids: Sequence[str]) -> None:
        if pg_ids:
            self._call("remove_placement_groups", list(pg_ids))

    def remove_owned(self, owned: Owned) -> None:
        """Kill ``owned``'s named actors (the fence itself aside) and remove its placement groups."""
        self.kill_named([a for a in owned.actors if a != FENCE_ACTOR_NAME])
        self.remove_placement_group_ids(list(owned.placement_groups.values()))
        if owned:
            log.info("owned_resources_removed", supervisor=self.supervisor, placement_groups=sorted(owned.placement_groups), actors=owned.actors)

    def retire(self, events: bytes | None = None) -> None:
        """Delete the record and end the fence: the supervisor is gone. ``events``, the history with
        its last event, is written first and stays."""
        import ray

        self._call("retire", events)
        handle, self._handle = self._handle, None
        try:
            ray.kill(handle, no_restart=True)
        except Exception as exc:  # gone already; a later claimer would end it anyway
            log.debug("fence_kill_failed", error=first_line(exc))

    def _call(self, method: str, *args: Any) -> None:
        import ray

        if self.superseded is not None:
            raise self.superseded
        if self.generation is None:
            raise SupersededError(f"supervisor {self.supervisor}: this process never claimed it")
        try:
            refusal = ray.get(_method(self._handle, method).remote(self.generation, *args), timeout=FENCE_CALL_TIMEOUT_S)
        except ray.exceptions.RayActorError:
            # The fence died (somebody killed it): a new one takes the generation from the record,
            # so this owner goes on only if the record still names it.
            self._handle = _fence_handle(self.supervisor, create=True)
            refusal = ray.get(_method(self._handle, method).remote(self.generation, *args), timeout=FENCE_CALL_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ClusterUnavailableError(
                f"the owner fence of supervisor {self.supervisor} did not answer {method} within {FENCE_CALL_TIMEOUT_S:g}s"
            ) from None
        if refusal is not None:
            self._refused(refusal)

    def _refused(self, refusal: Refusal) -> None:
        error = SupersededError(
            f"supervisor {self.supervisor} was taken over by another daemon (generation {self.generation} is no longer the owner)"
            if refusal is Refusal.SUPERSEDED
            else f"supervisor {self.supervisor} was torn down: its record is gone"
        )
        with self._lock:
            first = self.superseded is None
            self.superseded = self.superseded or error
        if first:
            log.error("superseded", supervisor=self.supervisor, generation=self.generation, refusal=refusal.value)
            if self.on_superseded is not None:
                self.on_superseded(error)
        raise self.superseded  # type: ignore[misc]
