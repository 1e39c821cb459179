"""Replacing the ranks of a :class:`~supervisor.core.group.group.WorkerGroup`: a fresh actor into a rank's
bundle (forked from its node's zygote where one is ready), a standby taking a rank over, a hand-over
that keeps the old actor until its successor serves, and the new rendezvous a new rank 0 brings.

:class:`RankReplacement` is a component the group holds (composition, not a base class): it works on
the group's state and gets each rank's environment from the group's
:class:`~.rank_environment.RankEnvironment` strategy, which an integration supplies.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, first_line
from ...observability.log import get_logger
from ...placement.layout import BundleRef
from ...retrying import Backoff, poll
from ..worker.actor_heartbeat import clear_beats_once_ended, clear_beats_once_ended_later
from ..worker.env import Rendezvous, standby_env_vars
from ..worker.worker_base import send_rendezvous
from ..worker.zygote import NodeZygotes, ZygoteLauncher
from .rendezvous import pick_rendezvous

if TYPE_CHECKING:
    pass

__all__ = ["FIRST_FORK_WAIT_S", "Predecessor", "RankReplacement", "Standby"]

# How long a group's first ranks wait for the zygotes of their nodes (their imports) before those still
# missing start as plain processes: a zygote that takes longer is slowed by something a plain start would be too.
FIRST_FORK_WAIT_S = 120.0

log = get_logger("group")  # the group's own logger: one stream of group events


@dataclass(frozen=True)
class Standby:
    """A pre-started actor of the group's class, waiting in a free bundle to take over a failed rank."""

    name: str
    handle: Any
    bundle: BundleRef
    zygote: str | None = None  # the zygote it was forked from (None: started as a plain process, or adopted)


@dataclass(frozen=True)
class Predecessor:
    """The old actor of a rank being handed over: it lends the rank its state, then is ended."""

    handle: Any
    bundle: BundleRef
    name: str
    node: str | None
    rendezvous: Rendezvous | None  # the group's rendezvous before the take-over (rank 0's picks a new one)


class RankReplacement:
    """The replacement operations of :class:`~supervisor.core.group.group.WorkerGroup` (its only subclass)."""

    def replace_worker(
        self,
        rank: int,
        name_release_timeout_s: float = 30.0,
        bundle: BundleRef | None = None,
        fork: bool = True,
    ) -> Any:
        """Kill rank ``rank``'s actor and create a fresh one into the same bundle (or into ``bundle``).

        The new actor has the same name, rank and environment; where the group's zygotes (the job's,
        or those its standbys' preload started) have a ready one on the bundle's node, it is forked
        from it (unless not ``fork``: a plain start, for retries after a failure). Replacing rank 0 also replaces the
        rendezvous (it lives on rank 0's node): once the old actor is gone a fresh MASTER_ADDR/PORT is
        picked on its bundle and the new rank 0 starts with it; live ranks learn it through
        :meth:`propagate_rendezvous`. Only groups that created their actors can replace them.

        Args:
            bundle: a free bundle of the group (a spare) to move the rank to; default: its own bundle.

        Returns:
            The new actor handle.

        Raises:
            ConfigError: the group was attached by name or handle, or ``rank`` is out of range.
            TimeoutError: Ray did not release the old actor's name in time.
        """
        self._check_replaceable(rank)
        name = self.group._worker_names[rank]
        self._kill_rank(rank)
        self.environment.before_new_actor(rank)
        self._wait_name_released(name, name_release_timeout_s)
        if bundle is not None:
            self.group._bundles[rank] = bundle
        if rank == 0:
            self._pick_new_rendezvous()
        launcher = self._fork_launcher(self.group._bundles[rank]) if fork else None
        handle = self.group._create_actor(self.group._bundles[rank], name, self.rank_env(rank), launcher)
        self.group._workers[rank] = handle
        if launcher is not None:
            log.info("replacement_forked", group=self.group.name_prefix, rank=rank, zygote=launcher.name)
        return handle

    def _fork_launcher(self, bundle: BundleRef) -> ZygoteLauncher | None:
        """How to fork a fresh rank in ``bundle`` from its node's zygote: only with the job's zygotes
        or once standbys with a preload started some. A node without one (a node loss's bundles
        re-placed on a node the job had no rank on) gets one started, and the replacement waits for it
        (at most :data:`FIRST_FORK_WAIT_S`): the ranks of one node loss then pay for one import
        between them, not one each side by side on the same cores. Any error means a plain start: the
        old actor is gone already."""
        from ray.util import placement_group_table

        if self.group._zygotes is None:
            return None
        try:
            node = (
                placement_group_table(self.group._pgs[bundle.pg_index])
                .get("bundles_to_node_id", {})
                .get(bundle.bundle_index)
            )
            if not node:
                return None
            return self.group._zygotes.wait_ready([node], FIRST_FORK_WAIT_S)[node]
        except Exception as exc:
            log.debug(
                "replacement_not_forked", group=self.group.name_prefix, bundle=str(bundle), error=first_line(exc)
            )
            return None

    def take_over(self, rank: int, bundle: BundleRef, timeout_s: float = 60.0, keep_old: bool = False) -> Any:
        """Kill rank ``rank``'s actor and let the standby in ``bundle`` become that rank.

        With ``keep_old`` (a hand-over: the rank's node drains), the old actor is not killed but kept
        in :attr:`predecessors` until :meth:`end_predecessor`; if the take-over fails, the old actor
        is still the rank.

        The standby adopts the rank's environment (RANK, LOCAL_RANK, the rendezvous, the user's
        variables) and from then on is that rank; it keeps its own actor name (Ray cannot rename an
        actor), which :attr:`worker_names` reports. A standby taking over rank 0 gets a fresh
        rendezvous on its own node (survivors learn it through :meth:`propagate_rendezvous`).

        Returns:
            The standby's handle, now rank ``rank``.

        Raises:
            ConfigError: no standby in ``bundle``, or the rank cannot be replaced.
            ray.exceptions.RayError / TimeoutError: the standby died or did not answer; it is dropped
                and the rank is left without an actor (replace it with :meth:`replace_worker`).
        """
        import ray

        self._check_replaceable(rank)
        standby = self.group._standbys.pop(bundle, None)
        if standby is None:
            raise ConfigError(f"group {self.group.name_prefix} has no standby in bundle {bundle}")
        if not keep_old:
            self._kill_rank(rank)
        previous, rendezvous = self.group._bundles[rank], self.group._rendezvous
        self.group._bundles[rank] = bundle
        try:
            if rank == 0:
                self._pick_new_rendezvous(rank_zero=standby.handle, timeout_s=timeout_s)
            info = ray.get(
                standby.handle._supervisor_take_over.remote(self.rank_env(rank)), timeout=timeout_s
            )
        except BaseException:
            self.group._bundles[rank] = previous
            if keep_old:  # the old rank 0 serves on: so does the rendezvous the others use
                self.group._rendezvous = rendezvous
            self.end_actors([standby.handle])
            raise
        if keep_old:
            self.group.predecessors[rank] = Predecessor(
                self.group._workers[rank], previous, self.group._worker_names[rank], self.group.rank_nodes.get(rank), rendezvous
            )
        self.group._workers[rank] = standby.handle
        self.group._worker_names[rank] = standby.name
        self.group.rank_nodes[rank] = info["node_id"]
        log.info(
            "standby_took_over", group=self.group.name_prefix, rank=rank, actor=standby.name, bundle=str(bundle)
        )
        return standby.handle

    def start_standbys(
        self, bundles: list[BundleRef], nice: int = 0, sched_idle: bool = False, preload: tuple[str, ...] = (),
        nodes: Mapping[BundleRef, str] | None = None,
    ) -> list[Standby]:  # fmt: skip
        """Start a standby in each of ``bundles`` (free bundles of the group); returns without waiting
        for their constructors. A standby has the group's environment but no rank (see
        :data:`~supervisor.core.worker.env.STANDBY_ENV_KEY`), and lowers its CPU priority by ``nice`` (and
        to ``SCHED_IDLE`` with ``sched_idle``) until it takes one over (:mod:`supervisor.core.worker.cpu_priority`).

        With ``preload`` (module names), a standby whose bundle's node (``nodes``) has a ready zygote
        that imported them is forked from it (:mod:`supervisor.core.worker.zygote`); the zygote is started
        on the first call for its node, and until it is ready standbys there start as plain processes."""
        if self.group.resource_pool is None or self.group.cls_with_init is None or self.group._rendezvous is None:
            raise ConfigError(
                f"group {self.group.name_prefix} did not create its actors, so it cannot start standbys"
            )
        env = standby_env_vars(
            len(self.group._slots), self.group.name_prefix, self.group._rendezvous, self.group.worker_env, nice, sched_idle
        )
        started = []
        if not preload and self.group._zygotes_shared and self.group._zygotes is not None:
            preload = self.group._zygotes.preload  # the job's zygotes, which the ranks were forked from
        if preload:  # a zygote on every node of the group: a standby may next be due in any of its bundles
            self._zygotes_of(preload).warm((nodes or {}).values())
        for bundle in bundles:
            if bundle in self.group._standbys or bundle in self.group._bundles:
                raise ConfigError(f"bundle {bundle} of group {self.group.name_prefix} is not free")
            name = f"{self.group.name_prefix}{self.group.cls_with_init.user_cls.__name__}_standby-{uuid.uuid4().hex[:8]}"
            launcher = self._zygotes_of(preload).launcher((nodes or {}).get(bundle)) if preload else None
            zygote = launcher.name if launcher is not None else None
            standby = Standby(name, self.group._create_actor(bundle, name, env, launcher), bundle, zygote)
            self.group._standbys[bundle] = standby
            started.append(standby)
        return started

    def _zygotes_of(self, preload: tuple[str, ...]) -> NodeZygotes:
        if self.group._zygotes is None or self.group._zygotes.preload != tuple(preload):
            if self.group._zygotes is not None and not self.group._zygotes_shared:
                self.group.fence.kill_actors(self.group._zygotes.take_handles())
            self.group._zygotes_shared = False  # standbys of another preload: zygotes of this group's own
            runtime_env = (
                self.group.cls_with_init.options.get("runtime_env") if self.group.cls_with_init is not None else None
            )
            self.group._zygotes = NodeZygotes(
                self.group.name_prefix,
                self.group.namespace,
                tuple(preload),
                self.group.detached,
                lambda handles: self.group.fence.kill_actors(handles),
                runtime_env,
            )
        return self.group._zygotes

    def drop_standby(self, bundle: BundleRef) -> None:
        """Forget (and kill) the standby in ``bundle``, e.g. because it died."""
        standby = self.group._standbys.pop(bundle, None)
        if standby is not None:
            self.end_actors([standby.handle])

    def all_bundles(self) -> list[BundleRef]:
        """Every bundle the group may use: its ranks' bundles in the layout, then the pool's spares."""
        layout = [s.bundle for s in self.group._slots]
        spares = []
        if self.group.resource_pool is not None and self.group.resource_pool.spare_pg is not None:
            spare_index = len(self.group._pgs) - 1
            spares = [BundleRef(spare_index, b) for b in range(self.group.resource_pool.spare_bundle_count)]
        return [*layout, *spares]

    def placed_bundles(self) -> dict[BundleRef, str]:
        """The node of every bundle of the group that is placed now, on an alive node; bundles of a
        lost node that Ray is re-placing are absent (the other bundles of their SPREAD placement group,
        RESCHEDULING as a whole, still count)."""
        import ray
        from ray.util import placement_group_table

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        out: dict[BundleRef, str] = {}
        for index in sorted({b.pg_index for b in self.all_bundles()}):
            table = placement_group_table(self.group._pgs[index])
            for bundle_index, node in table.get("bundles_to_node_id", {}).items():
                if node in alive:
                    out[BundleRef(index, int(bundle_index))] = str(node)
        return out

    def _check_replaceable(self, rank: int) -> None:
        if not self.group._slots or self.group.resource_pool is None or self.group.cls_with_init is None:
            raise ConfigError(
                f"group {self.group.name_prefix} did not create its actors, so it cannot replace them"
            )
        if not 0 <= rank < len(self.group._workers):
            raise ConfigError(f"rank {rank} is outside 0..{len(self.group._workers) - 1}")

    def end_actors(self, handles: list[Any], wait: bool = False) -> None:
        """Kill actors of this group (through the owner fence) and delete their heartbeats once their
        processes have ended: waiting for that when ``wait``, else on a thread of its own."""
        self.group.fence.kill_actors(handles)
        ids = [h._actor_id.hex() for h in handles]
        try:
            if wait:
                clear_beats_once_ended(ids)
            else:
                clear_beats_once_ended_later(ids)
        except Exception as exc:  # a leftover beat is a few bytes in the GCS: not worth failing a kill
            log.debug("heartbeats_not_cleared", group=self.group.name_prefix, error=first_line(exc))

    def restore_predecessor(self, rank: int) -> None:
        """A hand-over whose successor failed after taking the rank: the old actor is the rank again
        (with its bundle, name, node and, for rank 0, the rendezvous the other ranks still use), and
        the successor is ended."""
        old = self.group.predecessors.pop(rank)
        failed = self.group._workers[rank]
        self.group._workers[rank], self.group._bundles[rank], self.group._worker_names[rank] = old.handle, old.bundle, old.name
        if old.node is not None:
            self.group.rank_nodes[rank] = old.node
        if rank == 0 and old.rendezvous is not None:
            self.group._rendezvous = old.rendezvous
        self.end_actors([failed])

    def end_predecessor(self, rank: int) -> None:
        """End the old actor of a handed-over rank (nothing when it has none)."""
        old = self.group.predecessors.pop(rank, None)
        if old is not None:
            self.end_actors([old.handle])

    def _kill_rank(self, rank: int) -> None:
        self.end_actors([self.group._workers[rank]])
        self.group.rank_nodes.pop(rank, None)  # the new incarnation's node is learnt when it answers

    def _wait_name_released(self, name: str, timeout_s: float) -> None:
        # ray.kill is asynchronous: the GCS frees the name once the actor is DEAD.
        import ray

        def released() -> bool:
            try:
                ray.get_actor(name, namespace=self.group.namespace)
            except ValueError:
                return True
            return False

        if not poll(released, Backoff(0.01, 0.2), timeout_s=timeout_s):
            raise TimeoutError(f"actor name {name!r} still taken {timeout_s:.0f}s after killing its actor")

    def pick_new_rendezvous(self, rank_zero: Any = None, timeout_s: float = 120.0) -> Rendezvous:
        """A new rendezvous on rank 0's bundle (asked of ``rank_zero``, rank 0's running actor, when
        given), never the port in use; live ranks learn it through :meth:`propagate_rendezvous`."""
        return self._pick_new_rendezvous(rank_zero, timeout_s)

    def _pick_new_rendezvous(self, rank_zero: Any = None, timeout_s: float = 120.0) -> Rendezvous:
        # On rank 0's bundle (asked of rank 0's actor when it runs already), and never the previous
        # port: stale peers may still connect to it.
        first = self.group._bundles[0]
        previous = self.group._rendezvous.master_port if self.group._rendezvous else None
        self.group._rendezvous = pick_rendezvous(
            self.group._pgs[first.pg_index],
            first.bundle_index,
            avoid_port=previous,
            timeout_s=timeout_s,
            rank_zero=rank_zero,
        )
        self.environment.rendezvous_picked(self.group._rendezvous)
        if self.group.on_rendezvous_picked is not None:
            # Before any actor has it: an owner that persists the rendezvous (the daemon's record)
            # must know it first, or a crash now would leave a rank 0 nobody knows the address of.
            self.group.on_rendezvous_picked(self.group._rendezvous)
        return self.group._rendezvous

    def propagate_rendezvous(self, survivors: list[int], timeout_s: float = 60.0) -> list[int]:
        """After rank 0 got a new rendezvous, tell the live ``survivors`` (updated in place).

        Returns:
            The survivors that could not take it within ``timeout_s`` (dead or stuck): the caller
            replaces them (a fresh actor starts with the new rendezvous in its environment).
        """
        import ray

        assert self.group._rendezvous is not None
        rdv = self.group._rendezvous
        refs = {send_rendezvous(self.group._workers[r], rdv.master_addr, rdv.master_port): r for r in survivors}
        # One deadline for all: stuck ranks must not add up their timeouts.
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        lost = [refs[ref] for ref in refs if ref not in set(ready)]
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                lost.append(refs[ref])
        return sorted(lost)
