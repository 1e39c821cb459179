"""A cluster KV store for small shared state and service discovery, one per supervisor.

The store is a detached, named, zero-CPU async actor (:class:`_KVActor`, named :data:`KV_ACTOR_NAME`)
in the supervisor's Ray namespace ``supervisor.<name>``. Because it is detached it outlives the process
that created it (a crashed daemon, a finished driver); because it lives in that namespace the
supervisor's teardown, which kills every named actor there, removes it with the rest.

Users talk to it through :class:`KVStore`: ``put``/``get``/``wait``/``delete`` in string-named KV
namespaces (independent of Ray namespaces). ``get`` and ``wait`` block until the keys exist. The
waiting is event-driven inside the actor (one :class:`asyncio.Event` per awaited key, set by the put
that creates it), so a blocked reader costs one pending actor call and no polling, and many readers
wait concurrently. A read that times out raises :class:`KVTimeoutError`, whose one-line message says
whether anybody ever wrote to the namespace and which keys are nearest, because the usual cause is a
misspelt key or namespace.

Values are pickled (cloudpickle) by the client and stored as opaque bytes: the actor never imports user
code, and every reader gets its own copy. Keep them small (addresses, ports, flags, small configs): the
whole store lives in one process's memory. :class:`KVLimits` bounds it, so a job that leaks keys (one per
step, never deleted) over a multi-week run fails one put with :class:`KVLimitError` instead of growing the
head node's memory: keys per KV namespace, bytes per KV namespace (pickled values plus keys), and bytes
per value.

The actor runs with ``max_restarts=0`` and is pinned to the head node: a restart would come back empty
and readers would wait for keys their writers believe written, so a lost store fails loudly instead
(:class:`KVStoreNotFoundError`); and the head node's loss ends the cluster anyway, so pinning there adds
no failure mode that GPU nodes would.

Metrics, observed in the client process (the one that waited): every ``get``/``wait`` observes
``supervisor_kv_wait_seconds`` (timeouts included) and adds its wakeups to
``supervisor_kv_wait_wakeups_total`` once that counter is defined in :mod:`supervisor.observability.metrics`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterUnavailableError, ConfigError, SupervisorError, first_line
from ..observability import metrics
from ..observability.log import get_logger
from .ownership import HEAD_RESOURCE, namespace_of, start_head_actor

__all__ = [
    "KVStore",
    "KVLimits",
    "KVLimitError",
    "KVTimeoutError",
    "KVStoreNotFoundError",
    "KV_ACTOR_NAME",
    "DEFAULT_NAMESPACE",
]

log = get_logger("kv")

KV_ACTOR_NAME = "kv"
"""Name of the KV actor in its Ray namespace (a daemon must count it as expected when reconciling)."""

DEFAULT_NAMESPACE = "default"

# A blocked read is split into long polls of at most this long, so an actor-side wait whose caller
# died (killed driver, interrupted thread) is dropped within this time instead of holding a slot forever.
_LONG_POLL_S = 30.0
# How much longer than its own wait a long poll may take to answer (actor start-up on a busy node,
# scheduling) before the client gives up on the actor.
_ANSWER_GRACE_S = 60.0
# How long create_or_attach waits for a new actor to start.
_START_TIMEOUT_S = 120.0
# Pending reads each hold one slot of the async actor (a coroutine, cheap), and a put queued behind
# a full actor would wait for a long poll to end: room for thousands of ranks blocked on one key.
_MAX_CONCURRENCY = 10_000
# Caps on what a timeout message lists, to keep it one readable line.
_MAX_LISTED = 10
_MAX_NEAREST = 5

_MIB = 1024 * 1024
# The defaults of KVLimits. The store is for small shared state, and all of it lives in one process on
# the head node, whose loss ends the cluster. 10_000 keys per namespace leaves room for a few keys per
# rank at thousands of ranks (the same order as _MAX_CONCURRENCY); past that a namespace is far more
# likely a leak (a key per step, never deleted) than a design. 64 MiB per namespace keeps a handful of
# busy namespaces well under a GiB of head-node memory. 8 MiB per value: larger is data, not state (every
# reader gets its own copy; it belongs in the Ray object store), and a namespace still holds eight.
DEFAULT_MAX_KEYS = 10_000
DEFAULT_MAX_BYTES = 64 * _MIB
DEFAULT_MAX_VALUE_BYTES = 8 * _MIB


class KVTimeoutError(SupervisorError, TimeoutError):
    """A blocking ``get``/``wait`` timed out; the one-line message says what the store holds instead.

    Constructed from a single message, so it pickles across Ray processes unchanged.
    """


class KVStoreNotFoundError(SupervisorError, LookupError):
    """No KV store actor exists (or it died) in the given Ray namespace; the message names it."""


class KVLimitError(SupervisorError):
    """A put was refused because it would exceed a :class:`KVLimits` limit; the one-line message names
    the limit, the KV namespace and its usage. Nothing was written."""


@dataclass(frozen=True)
class KVLimits:
    """How much one KV store holds. Set when the store's actor is created; fixed for its lifetime.

    Attributes:
        max_keys: keys per KV namespace.
        max_bytes: bytes per KV namespace: pickled values plus UTF-8 keys.
        max_value_bytes: bytes of one pickled value.
    """

    max_keys: int = DEFAULT_MAX_KEYS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"KVLimits.{f.name} must be a positive integer, got {value!r}")


# -- the actor ----------------------------------------------------------------------------------------


class _Slot:
    """The event readers of one (namespace, key) wait on, and how many wait (to drop it when none do)."""

    __slots__ = ("event", "waiters")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiters = 0


class _KVActor:
    """The store itself. Every method is a coroutine on one event loop, so no locks are needed:
    state changes only between awaits.

    Keys and values arrive validated and pickled from :class:`KVStore`; values stay opaque bytes.
    """

    def __init__(self, supervisor: str, limits: KVLimits | None = None) -> None:
        self._supervisor = supervisor
        self._limits = limits if limits is not None else KVLimits()
        self._data: dict[str, dict[str, bytes]] = {}
        # Bytes held per namespace (values plus keys), kept with every change rather than summed per put.
        self._bytes: dict[str, int] = {}
        # Namespaces ever written, kept after their last key is deleted: a timeout can then tell
        # "never written" (a name mismatch) from "emptied" (a delete raced the reader).
        self._written: set[str] = set()
        self._slots: dict[tuple[str, str], _Slot] = {}
        # Reads that gave up, per namespace: {"count", "keys", "last_at", "diagnosis"} (for doctor).
        self._timeouts: dict[str, dict[str, Any]] = {}

    async def put(self, namespace: str, key: str, value: bytes) -> str | None:
        """Store ``value``, or refuse: returns why when it would exceed a limit (nothing is changed then).

        Refusals are returned rather than raised so that the client raises :class:`KVLimitError` with
        this message alone, not Ray's wrapping of a remote traceback.
        """
        entries = self._data.get(namespace, {})
        old = entries.get(key)
        # An overwrite counts only by how much it grows the namespace.
        grows = _entry_bytes(key, value) - (_entry_bytes(key, old) if old is not None else 0)
        refusal = self._refusal(namespace, key, len(value), old is None, grows)
        if refusal is not None:
            return refusal
        self._data.setdefault(namespace, {})[key] = value
        self._bytes[namespace] = self._bytes.get(namespace, 0) + grows
        self._written.add(namespace)
        # Popping the slot wakes exactly the readers of this key; later readers find the value.
        slot = self._slots.pop((namespace, key), None)
        if slot is not None:
            slot.event.set()
        return None

    def _refusal(self, namespace: str, key: str, value_bytes: int, new_key: bool, grows: int) -> str | None:
        """Why a put of ``key`` would exceed a limit, or None when it fits."""
        limits = self._limits
        if value_bytes > limits.max_value_bytes:
            return (
                f"kv value of {key!r} in namespace {namespace!r} is too large: {_size(value_bytes)} "
                f"(limit {_size(limits.max_value_bytes)} per value); share large data through the Ray "
                f"object store or raise KVLimits.max_value_bytes"
            )
        keys = len(self._data.get(namespace, {}))
        if new_key and keys >= limits.max_keys:
            return (
                f"kv namespace {namespace!r} is full: {keys} keys (limit {limits.max_keys} keys per "
                f"namespace); delete keys or raise KVLimits.max_keys"
            )
        used = self._bytes.get(namespace, 0)
        if used + grows > limits.max_bytes:
            return (
                f"kv namespace {namespace!r} is full: {_size(used)} used (limit {_size(limits.max_bytes)} "
                f"per namespace) and {key!r} needs {_size(grows)} more; delete keys or raise KVLimits.max_bytes"
            )
        return None

    async def delete(self, namespace: str, key: str) -> bool:
        entries = self._data.get(namespace)
        if entries is None or key not in entries:
            return False
        self._bytes[namespace] -= _entry_bytes(key, entries.pop(key))
        if not entries:
            del self._data[namespace]
            del self._bytes[namespace]
        return True

    async def peek(self, namespace: str, key: str) -> tuple[bool, bytes | None]:
        entries = self._data.get(namespace, {})
        return (True, entries[key]) if key in entries else (False, None)

    async def keys(self, namespace: str, prefix: str) -> list[str]:
        return sorted(k for k in self._data.get(namespace, {}) if k.startswith(prefix))

    async def namespaces(self) -> list[str]:
        return sorted(self._data)

    async def info(self) -> dict[str, Any]:
        return {
            "supervisor": self._supervisor,
            "namespaces": len(self._data),
            "keys": sum(len(entries) for entries in self._data.values()),
            "bytes": sum(self._bytes.values()),
            "usage": {ns: {"keys": len(e), "bytes": self._bytes[ns]} for ns, e in sorted(self._data.items())},
            "limits": dataclasses.asdict(self._limits),
            "waiting_keys": len(self._slots),
            "waiters": sum(slot.waiters for slot in self._slots.values()),
            "timeouts": {ns: dict(t) for ns, t in self._timeouts.items()},
        }

    async def wait(
        self, namespace: str, keys: list[str], timeout_s: float, final: bool = False
    ) -> tuple[dict[str, bytes], int, str | None]:
        """Wait up to ``timeout_s`` until every key exists (``final``: the reader gives up after this).

        Returns:
            ``(found, wakeups, diagnosis)``: the values of the keys that exist (all of them unless
            timed out), how often this call was woken, and on timeout why the rest may be missing.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        found: dict[str, bytes] = {}
        wakeups = 0
        for key in keys:
            # Sequential waits under one deadline: the total is the latest arrival, as with a gather.
            value, woke = await self._await_key(namespace, key, deadline)
            wakeups += woke
            if value is not None:
                found[key] = value
        # After the first timeout no await ran, so the keys looked at since are still missing: the
        # diagnosis describes one consistent state.
        missing = [k for k in keys if k not in found]
        diagnosis = self._diagnose(namespace, missing) if missing else None
        if missing and final:
            record = self._timeouts.setdefault(namespace, {"count": 0})
            record.update(count=record["count"] + 1, keys=missing[:_MAX_LISTED], last_at=time.time(), diagnosis=diagnosis)
        return found, wakeups, diagnosis

    async def _await_key(self, namespace: str, key: str, deadline: float) -> tuple[bytes | None, int]:
        loop = asyncio.get_running_loop()
        wakeups = 0
        while True:
            value = self._data.get(namespace, {}).get(key)
            if value is not None:
                return value, wakeups
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None, wakeups
            slot = self._slots.get((namespace, key))
            if slot is None:
                slot = self._slots[(namespace, key)] = _Slot()
            slot.waiters += 1
            try:
                await asyncio.wait_for(slot.event.wait(), remaining)
                # Woken by a put; the loop re-checks, as a delete may have followed it.
                wakeups += 1
            except TimeoutError:
                pass
            finally:
                slot.waiters -= 1
                # A slot nobody waits on any more would leak (a key that is never written).
                if slot.waiters == 0 and self._slots.get((namespace, key)) is slot:
                    del self._slots[(namespace, key)]

    def _diagnose(self, namespace: str, missing: Sequence[str]) -> str:
        """Why ``missing`` may be absent from ``namespace``: never written, emptied, or near keys."""
        entries = self._data.get(namespace, {})
        others = [n for n in self._data if n != namespace]
        if namespace not in self._written:
            if others:
                # The nearest namespace names first: a typo is the usual reason.
                text = f"nobody has written to namespace {namespace!r}; namespaces with keys: {_quoted(_ranked(namespace, others))}"
            else:
                text = f"nobody has written to namespace {namespace!r}; no namespace has keys"
        elif not entries:
            text = f"namespace {namespace!r} has no keys (all were deleted)"
        else:
            near: list[str] = []
            for key in missing:
                near.extend(n for n in _nearest(key, entries, _MAX_NEAREST) if n not in near)
            head = f"namespace {namespace!r} has {len(entries)} key(s)"
            text = f"{head}; nearest: {_quoted(near, _MAX_NEAREST)}" if near else f"{head}; none is near"
        # The exact key in another namespace is the other usual mistake.
        elsewhere = [n for n in sorted(others) if any(k in self._data[n] for k in missing)]
        if elsewhere:
            strays = [k for k in missing if any(k in self._data[n] for n in elsewhere)]
            text += f"; {_quoted(strays, 3)} found in namespace(s) {_quoted(elsewhere)}"
        return text


def _entry_bytes(key: str, value: bytes) -> int:
    """What one entry counts against its namespace's bytes."""
    return len(key.encode()) + len(value)


def _size(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``64 MiB``."""
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.4g} KiB" if n < _MIB else f"{n / _MIB:.4g} MiB"


def _nearest(word: str, candidates: Iterable[str], limit: int) -> list[str]:
    """Up to ``limit`` candidates like ``word``: close spellings (best first), then prefix relations."""
    pool = sorted(candidates)
    close = difflib.get_close_matches(word, pool, n=limit, cutoff=0.6)
    prefixed = [c for c in pool if c not in close and (c.startswith(word) or word.startswith(c))]
    return (close + prefixed)[:limit]


def _ranked(word: str, candidates: Iterable[str]) -> list[str]:
    """All candidates, the ones like ``word`` first (so a capped list still shows the likely typo)."""
    pool = sorted(candidates)
    near = _nearest(word, pool, len(pool))
    return near + [c for c in pool if c not in near]


def _quoted(items: Sequence[str], limit: int = _MAX_LISTED) -> str:
    """``'a', 'b' (+3 more)``."""
    text = ", ".join(repr(i) for i in items[:limit])
    return f"{text} (+{len(items) - limit} more)" if len(items) > limit else text


# -- the client ---------------------------------------------------------------------------------------


def _check_name(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"kv {what} must be a non-empty string, got {value!r}")


def _check_timeout(timeout_s: float | None) -> None:
    if timeout_s is not None and not timeout_s >= 0:  # `not >=` also rejects NaN
        raise ConfigError(f"kv timeout_s must be None (wait forever) or >= 0, got {timeout_s!r}")


def _require_ray() -> Any:
    import ray

    if not ray.is_initialized():
        raise ClusterUnavailableError("Ray is not initialised: call ray.init(address=...) before using the KV store")
    return ray


def _count_wakeups(wakeups: int) -> None:
    # All metrics are defined in supervisor/observability/metrics.py; until supervisor_kv_wait_wakeups_total is
    # defined there this counts nothing, and it counts automatically once it is.
    counter = getattr(metrics, "KV_WAIT_WAKEUPS", None)
    if counter is not None and wakeups:
        counter.inc(wakeups)


class KVStore:
    """Client of a supervisor's KV store: cheap, thread-safe, and picklable (a copy re-attaches by name,
    so a handle can be passed to Ray tasks and actors).

    KV namespaces (the ``namespace`` argument of every method) are free-form, independent of Ray
    namespaces, and isolated from each other. Keys are non-empty strings; values any small picklable
    object.
    """

    def __init__(self, actor_namespace: str, handle: Any | None = None) -> None:
        """Prefer :meth:`create_or_attach` or :meth:`attach`; this resolves the actor lazily.

        Args:
            actor_namespace: Ray namespace of the KV actor (``supervisor.<name>``).
            handle: the actor's handle, when the caller already has it.
        """
        _check_name("Ray namespace", actor_namespace)
        self._actor_namespace = actor_namespace
        self._handle = handle

    def __reduce__(self) -> tuple[Any, ...]:
        # Actor handles are tied to the process that holds them; a copy finds the actor by name.
        return (KVStore, (self._actor_namespace,))

    def __repr__(self) -> str:
        return f"KVStore(actor_namespace={self._actor_namespace!r})"

    @property
    def actor_namespace(self) -> str:
        """Ray namespace of the KV actor."""
        return self._actor_namespace

    # -- creation -----------------------------------------------------------------------------------
    @classmethod
    def create_or_attach(
        cls, supervisor_name: str, namespace_of_actors: str | None = None, limits: KVLimits | None = None
    ) -> KVStore:
        """Create the supervisor's KV actor, or attach to it when it exists (a restarted daemon).

        The actor is detached, named :data:`KV_ACTOR_NAME`, needs no CPU and is pinned to the head
        node. Concurrent callers end up with the same actor.

        Args:
            supervisor_name: the supervisor the store belongs to (kept by the actor for ``info``).
            namespace_of_actors: Ray namespace for the actor; defaults to ``supervisor.<name>``.
            limits: what the store may hold (default :class:`KVLimits`). They are the actor's: an
                existing actor keeps the ones it was created with (a warning says so when they differ).

        Returns:
            A client whose actor has started.

        Raises:
            ClusterUnavailableError: Ray is not initialised.
            SupervisorError: the actor did not start within 120 s.
        """
        ray = _require_ray()
        _check_name("supervisor name", supervisor_name)
        namespace = namespace_of_actors or namespace_of(supervisor_name)
        try:
            handle = ray.get_actor(KV_ACTOR_NAME, namespace=namespace)
            created = False
        except ValueError:
            handle = start_head_actor(_KVActor, KV_ACTOR_NAME, namespace, _MAX_CONCURRENCY, supervisor_name, limits)
            created = True
        store = cls(namespace, handle)
        try:
            info = ray.get(handle.info.remote(), timeout=_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise SupervisorError(
                f"the KV store in Ray namespace {namespace!r} did not start within {_START_TIMEOUT_S:g}s "
                f"(it needs a sliver of the head node's {HEAD_RESOURCE!r} resource)"
            ) from None
        log.info(
            "kv_store_ready", supervisor=supervisor_name, ray_namespace=namespace, created=created, keys=info["keys"],
            bytes=info["bytes"], limits=info["limits"],
        )  # fmt: skip
        requested = dataclasses.asdict(limits) if limits is not None else None
        if requested is not None and info["limits"] != requested:
            # The actor's limits stand: changing them under existing data could strand it over a limit.
            log.warning("kv_limits_kept", ray_namespace=namespace, requested=requested, kept=info["limits"])
        return store

    @classmethod
    def attach(cls, namespace_of_actors: str) -> KVStore:
        """Attach to an existing KV store by name (workers, drivers).

        Raises:
            KVStoreNotFoundError: no KV actor lives in ``namespace_of_actors``.
            ClusterUnavailableError: Ray is not initialised.
        """
        store = cls(namespace_of_actors)
        store._actor()
        return store

    def _actor(self) -> Any:
        if self._handle is None:
            ray = _require_ray()
            try:
                self._handle = ray.get_actor(KV_ACTOR_NAME, namespace=self._actor_namespace)
            except ValueError:
                raise KVStoreNotFoundError(
                    f"no KV store in Ray namespace {self._actor_namespace!r}: is its supervisor running? "
                    f"(KVStore.create_or_attach creates it)"
                ) from None
        return self._handle

    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Call an actor method and wait for its answer; a dead actor becomes :class:`KVStoreNotFoundError`."""
        ray = _require_ray()
        try:
            return ray.get(getattr(self._actor(), method).remote(*args), timeout=timeout_s)
        except ray.exceptions.RayActorError as exc:
            self._handle = None  # a re-created store is found by name on the next call
            raise KVStoreNotFoundError(
                f"the KV store in Ray namespace {self._actor_namespace!r} is gone ({first_line(exc, 120)})"
            ) from exc

    # -- operations -------------------------------------------------------------------------------
    def put(self, key: str, value: Any, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Set ``key`` to ``value`` and wake every reader waiting for it. Returns once stored, so any
        later read, from any process, sees it.

        Raises:
            KVLimitError: the put would exceed one of the store's :class:`KVLimits` (nothing was written).
            ConfigError: ``key`` or ``namespace`` is not a non-empty string.
            KVStoreNotFoundError: the store is gone.
        """
        import ray.cloudpickle as cloudpickle

        _check_name("key", key)
        _check_name("namespace", namespace)
        refusal = self._call("put", namespace, key, cloudpickle.dumps(value))
        if refusal is not None:
            raise KVLimitError(refusal)

    def get(self, key: str, timeout_s: float | None = None, namespace: str = DEFAULT_NAMESPACE) -> Any:
        """The value of ``key``, waiting until it exists.

        Args:
            timeout_s: how long to wait; None waits forever, 0 looks once.

        Returns:
            The value (a fresh copy).

        Raises:
            KVTimeoutError: ``key`` did not appear in time; the message says what the namespace holds.
            ConfigError: invalid key, namespace or timeout.
            KVStoreNotFoundError: the store is gone.
        """
        _check_name("key", key)
        return self._wait([key], timeout_s, namespace, f"kv get {key!r}")[key]

    def wait(self, keys: Iterable[str], timeout_s: float | None = None, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any]:
        """The values of all ``keys``, waiting until every one exists.

        Returns:
            ``{key: value}`` in the order of ``keys`` (duplicates once). Each value is the one seen
            when its key was first found present.

        Raises:
            KVTimeoutError: some keys did not appear in time; the message names them.
            ConfigError: invalid keys, namespace or timeout.
            KVStoreNotFoundError: the store is gone.
        """
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            _check_name("key", key)
        return self._wait(wanted, timeout_s, namespace, f"kv wait for {len(wanted)} key(s)")

    def get_nowait(self, key: str, default: Any = None, namespace: str = DEFAULT_NAMESPACE) -> Any:
        """The value of ``key``, or ``default`` when absent (never waits, observes no wait metric)."""
        import ray.cloudpickle as cloudpickle

        _check_name("key", key)
        _check_name("namespace", namespace)
        present, value = self._call("peek", namespace, key)
        return cloudpickle.loads(value) if present else default

    def contains(self, key: str, namespace: str = DEFAULT_NAMESPACE) -> bool:
        """Whether ``key`` exists now."""
        _check_name("key", key)
        _check_name("namespace", namespace)
        return bool(self._call("peek", namespace, key)[0])

    def delete(self, key: str, namespace: str = DEFAULT_NAMESPACE) -> bool:
        """Remove ``key``; later reads wait for it again. Returns whether it existed."""
        _check_name("key", key)
        _check_name("namespace", namespace)
        return bool(self._call("delete", namespace, key))

    def keys(self, namespace: str = DEFAULT_NAMESPACE, prefix: str = "") -> list[str]:
        """The keys of ``namespace`` that start with ``prefix``, sorted."""
        _check_name("namespace", namespace)
        return list(self._call("keys", namespace, prefix))

    def namespaces(self) -> list[str]:
        """The KV namespaces that hold at least one key, sorted."""
        return list(self._call("namespaces"))

    def info(self) -> dict[str, Any]:
        """Counts for status output: ``supervisor``, ``namespaces``, ``keys``, ``bytes``, ``usage``
        (``{namespace: {"keys", "bytes"}}``), ``limits`` (:class:`KVLimits` as a dict), ``waiting_keys``,
        ``waiters``, ``timeouts``."""
        return dict(self._call("info"))

    def _wait(self, keys: list[str], timeout_s: float | None, namespace: str, what: str) -> dict[str, Any]:
        import ray.cloudpickle as cloudpickle

        _check_name("namespace", namespace)
        _check_timeout(timeout_s)
        ray = _require_ray()
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        found: dict[str, bytes] = {}
        pending = list(keys)
        wakeups = 0
        try:
            while pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                poll_s = _LONG_POLL_S if remaining is None else min(remaining, _LONG_POLL_S)
                final = remaining is not None and poll_s >= remaining
                try:
                    got, woke, diagnosis = self._call("wait", namespace, pending, poll_s, final, timeout_s=poll_s + _ANSWER_GRACE_S)
                except ray.exceptions.GetTimeoutError:
                    raise KVTimeoutError(
                        f"{what} in namespace {namespace!r} timed out: the KV store in Ray namespace "
                        f"{self._actor_namespace!r} did not answer within {poll_s + _ANSWER_GRACE_S:g}s"
                    ) from None
                found.update(got)
                wakeups += woke
                pending = [k for k in pending if k not in found]
                if not pending:
                    break
                if remaining is not None and poll_s >= remaining:  # that poll ran to the deadline
                    prefix = f"{what} in namespace {namespace!r} timed out after {timeout_s:g}s: "
                    if len(keys) > 1:
                        prefix += f"{len(pending)} missing: {_quoted(pending)}; "
                    log.debug("kv_wait_timed_out", namespace=namespace, missing=pending[:_MAX_LISTED], timeout_s=timeout_s)
                    raise KVTimeoutError(prefix + str(diagnosis))
                wakeups += 1  # the long poll ended and is renewed: the reader looked again
        finally:
            metrics.KV_WAIT.observe(time.monotonic() - start)
            _count_wakeups(wakeups)
        return {k: cloudpickle.loads(found[k]) for k in keys}
