"""Standbys of a supervised group: started in free, placed bundles, watched until they are ready, and
reserved by the loop for a failed rank (where they go is decided by :mod:`supervisor.placement.standby`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.worker.worker_base import Worker
from ..core.worker.zygote import check_preload_names, runtime_env_problem
from ..errors import ConfigError, first_line, ray_error_line
from ..failure import ErrorKind
from ..observability.log import get_logger
from ..placement.standby import BundleRef, free_bundles, standby_bundles
from . import death_watch
from .config import STANDBY_FAILURE_LIMIT, SupervisionConfig

if TYPE_CHECKING:
    from ..core.group.group import Standby, WorkerGroup
    from ..observability.hooks import LifecycleHooks

__all__ = ["StandbyKeeper", "check_standby_config"]

log = get_logger("supervision")


def check_standby_config(group: WorkerGroup, wanted: int, warmup_method: str | None = None, preload: tuple[str, ...] = ()) -> None:
    """Raise ConfigError when ``wanted`` standbys (warmed up by ``warmup_method``, forked from zygotes
    that imported ``preload``) cannot be kept for ``group``."""
    if wanted <= 0:
        return
    problems = check_preload_names(preload)
    if preload and group.cls_with_init is not None:
        problems += filter(None, [runtime_env_problem(group.cls_with_init.options.get("runtime_env"))])
    if problems:
        raise ConfigError(f"group {group.name}: standby_preload: {problems[0]}")
    spares = group.resource_pool.spare_bundle_count if group.resource_pool is not None else 0
    if wanted > spares:
        raise ConfigError(
            f"group {group.name} wants {wanted} standby(s) but its pool reserves {spares} spare bundle(s): "
            "raise the pool's capacity_factor"
        )
    if group.cls_with_init is None or not issubclass(group.cls_with_init.user_cls, Worker):
        raise ConfigError(
            f"group {group.name}: standbys need a supervisor.Worker subclass (it adopts the failed rank's identity)"
        )
    if warmup_method and not callable(getattr(group.cls_with_init.user_cls, warmup_method, None)):
        raise ConfigError(
            f"group {group.name}: standby warm-up method {warmup_method!r}: "
            f"{group.cls_with_init.user_cls.__name__} has no such method"
        )


class StandbyKeeper:
    """Keeps ``config.standbys`` standbys for one group (runs on the loop's thread)."""

    def __init__(
        self, group: WorkerGroup, config: SupervisionConfig, hooks: LifecycleHooks, clock: Callable[[], float]
    ) -> None:
        check_standby_config(group, config.standbys, config.standby_warmup_method, config.standby_preload)
        self.group, self.config, self.hooks, self.clock = group, config, hooks, clock
        self._lock = threading.Lock()
        self._ready: dict[BundleRef, str] = {}  # ready standbys and their node
        self._starting: dict[Any, BundleRef] = {}  # readiness call -> bundle
        self._watches: dict[Any, BundleRef] = {}  # death watch -> bundle of a ready standby
        self._rewatch_at: dict[BundleRef, float] = {}  # standbys whose watch is started again then
        self._ready_by: dict[BundleRef, float] = {}  # starting standbys: dropped if not ready by then
        self.consecutive_failures = 0  # standbys that died before they were ready, in a row
        self._next_check = 0.0
        # Hand-overs: successors to start beyond config.standbys, never on a draining node.
        self._successors = 0
        self._draining: frozenset[str] = frozenset()

    @property
    def enabled(self) -> bool:
        return self.config.standbys > 0 or bool(self.group.standbys) or self._successors > 0

    @property
    def can_start(self) -> bool:
        """Whether this group's actors can be pre-started at all (a Worker subclass that created its actors)."""
        cls = self.group.cls_with_init
        return self.group.resource_pool is not None and cls is not None and issubclass(cls.user_cls, Worker)

    def want_successors(self, count: int, draining: frozenset[str]) -> None:
        """Keep ``count`` more standbys than configured, off ``draining`` nodes (ranks to hand over)."""
        if count > self._successors or draining != self._draining:
            self._next_check = 0.0  # a notice is acted on now, not at the next periodic check
        self._successors, self._draining = count, draining

    def ready_nodes(self) -> dict[BundleRef, str]:
        with self._lock:
            return dict(self._ready)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._ready), len(self._starting)

    def adopt(self) -> None:
        """Watch the standbys the group already has (adopted from an earlier supervisor)."""
        for bundle in list(self.group.standbys):
            self._watch_starting(bundle)

    def reserve(self, bundle: BundleRef) -> None:
        """A failed rank takes the standby in ``bundle``: it is no longer kept, and its successor is due."""
        self._forget(bundle)
        self._next_check = 0.0

    def tend(self, starting_allowed: bool) -> None:
        """Learn which standbys became ready or died, and start missing ones in free, placed bundles
        (not while ranks are recovered: a free spare is theirs first)."""
        import ray

        if not self.enabled:
            return
        now = self.clock()
        for bundle, at in list(self._rewatch_at.items()):
            if now >= at:
                del self._rewatch_at[bundle]
                if bundle in self.group.standbys:
                    self._watch_death(bundle)
        refs = [*self._starting, *self._watches]
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                self._on_ref(ref)
        self._drop_late(now)
        if self.group.zygotes is not None:  # a zygote that fails is reported when it does, not at the next start
            self.group.zygotes.poll()
        if not starting_allowed or self.clock() < self._next_check:
            return
        self._next_check = self.clock() + self.config.standby_check_s
        if self.consecutive_failures >= STANDBY_FAILURE_LIMIT:
            return  # the limit was reported once when reached; standbys would only crash-loop
        if self.config.standbys + self._successors - len(self.group.standbys) <= 0 and not self._draining:
            return
        try:
            placed = self.group.placed_bundles()
        except Exception as exc:  # look again next time
            log.debug("standby_placement_unknown", group=self.group.name, error=first_line(exc))
            return
        # A standby on a draining node counts for nothing: it goes with the node, and none starts there.
        missing = self.config.standbys + self._successors - sum(1 for b in self.group.standbys if placed.get(b) not in self._draining)
        placed = {b: n for b, n in placed.items() if n not in self._draining}
        if missing <= 0:
            return
        free = free_bundles(self.group.all_bundles(), self.group.rank_bundles, dict(self.group.standbys))
        bundles = standby_bundles(free, placed, self.ready_nodes().values(), missing)
        # A successor for a rank on a draining node is due before a deadline, not speculative: it starts
        # at the ranks' own CPU priority (a standby niced under SCHED_IDLE waits for idle cores).
        urgent = self._successors > 0
        started = self.group.start_standbys(
            bundles, 0 if urgent else self.config.standby_nice, False if urgent else self.config.standby_sched_idle,
            self.config.standby_preload, placed,
        )  # fmt: skip
        for standby in started:
            self._watch_starting(standby.bundle)
            log.info(
                "standby_started", group=self.group.name, actor=standby.name, node=placed.get(standby.bundle), forked=standby.zygote is not None
            )
        self.publish()

    @property
    def ready_timeout_s(self) -> float:
        """How long a standby may take to be ready: its constructor, then its warm-up (the
        rank-independent part of the init), each given what a rank's would be."""
        return self.config.actor_start_timeout_s + self.config.init_policy.timeout_s

    def _drop_late(self, now: float) -> None:
        # A constructor or warm-up that never returns (a hung download, a deadlock) would hold the
        # spare bundle for good and leave the group without a standby, silently.
        with self._lock:
            late = [b for b, by in self._ready_by.items() if now >= by and b in self._starting.values()]
        for bundle in late:
            standby = self.group.standbys.get(bundle)
            if standby is not None:
                self._drop(standby, f"not ready within {self.ready_timeout_s:g}s (constructor and warm-up)", before_ready=True)

    def _watch_starting(self, bundle: BundleRef) -> None:
        handle = self.group.standbys[bundle].handle
        warmup = self.config.standby_warmup_method
        # Calls run in order on the actor's main thread: the answer comes once the constructor (and the warm-up) ran.
        ready = handle._supervisor_warm_up.remote(warmup) if warmup else handle.node_info.remote()
        with self._lock:
            self._starting[ready] = bundle
            self._ready_by.setdefault(bundle, self.clock() + self.ready_timeout_s)  # asked again: same deadline

    def _on_ref(self, ref: Any) -> None:
        """A standby's readiness call answered, or its death watch resolved."""
        with self._lock:
            starting = ref in self._starting
            bundle = self._starting.pop(ref, None) or self._watches.pop(ref, None)
        standby = self.group.standbys.get(bundle) if bundle is not None else None
        if standby is None:
            return  # it took over a rank meanwhile
        if starting:
            self._on_readiness(standby, ref)
        else:
            self._on_death_watch(standby, ref)

    def _on_readiness(self, standby: Standby, ref: Any) -> None:
        import ray

        try:
            result = ray.get(ref)
        except ray.exceptions.ActorUnavailableError:  # unreachable for now, not dead: ask again
            self._watch_starting(standby.bundle)
            return
        except ray.exceptions.RayError as exc:
            self._drop(standby, ray_error_line(exc), before_ready=True)
            return
        self.consecutive_failures = 0
        with self._lock:
            self._ready[standby.bundle] = result["node_id"]
            self._ready_by.pop(standby.bundle, None)
        log.info("standby_ready", group=self.group.name, actor=standby.name, node=result["node_id"])
        self.publish()
        self._watch_death(standby.bundle)

    def _on_death_watch(self, standby: Standby, ref: Any) -> None:
        notice = death_watch.notice_of(ref, group=self.group.name, actor=standby.name)
        # The watch was lost (not the standby), or the standby is unreachable for now, not known dead.
        if notice is None or notice.kind is ErrorKind.UNAVAILABLE:
            self._rewatch_at[standby.bundle] = self.clock() + death_watch.REWATCH_PAUSE_S
            return
        self._drop(standby, notice.detail, before_ready=False)

    def _drop(self, standby: Standby, why: str, before_ready: bool) -> None:
        self._forget(standby.bundle)
        self.group.drop_standby(standby.bundle)
        self._next_check = 0.0
        if before_ready:
            self.consecutive_failures += 1
            if self.consecutive_failures == STANDBY_FAILURE_LIMIT:
                log.error("standbys_disabled", group=self.group.name, failures=STANDBY_FAILURE_LIMIT, last_error=why)
        self.hooks.on_standby_failed(self.group.name, standby.name, why)

    def _watch_death(self, bundle: BundleRef) -> None:
        with self._lock:
            self._watches[death_watch.watch(self.group.standbys[bundle].handle)] = bundle

    def _forget(self, bundle: BundleRef) -> None:
        with self._lock:
            self._ready.pop(bundle, None)
            self._rewatch_at.pop(bundle, None)
            self._ready_by.pop(bundle, None)
            for ref in [r for r, b in self._starting.items() if b == bundle]:
                del self._starting[ref]
            for ref in [r for r, b in self._watches.items() if b == bundle]:
                del self._watches[ref]
                death_watch.unwatch(ref)
        self.publish()

    def close(self) -> None:
        """Stop watching the standbys (the supervisor stops; they are left alone)."""
        with self._lock:
            watches, self._watches = list(self._watches), {}
            self._rewatch_at.clear()
        for ref in watches:
            death_watch.unwatch(ref)

    def publish(self) -> None:
        # Also for a group without standbys (0 of 0): its panels show that rather than no data.
        ready, starting = self.counts()
        self.hooks.on_standby_state(self.group.name, ready, starting, self.config.standbys)
