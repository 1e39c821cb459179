"""Start-up as reconciliation: make the cluster hold what the spec describes, adopting what an earlier
incarnation left (same placement groups, healthy actors untouched) and removing what the spec no
longer describes; then supervise every group and start the driver."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from ..core.group.actor_class import ClassWithInitArgs
from ..core.group.group import GroupPlacement, WorkerGroup
from ..core.worker.zygote import NodeZygotes
from ..errors import ConfigError, first_line
from ..observability.log import get_logger
from ..placement.budget import cluster_misfits, cpu_oversubscription
from ..placement.cluster_state import read_snapshot
from ..placement.layout import BundleRef
from ..placement.pool import ResourcePool
from ..state.domain import StateDomain
from ..state.keeper import keeper_name
from ..supervision import GroupSupervisor
from ..supervision.lifecycle import adopt_group, create_group, init_group, replace_ranks
from ..supervision.restart_policy import FailureReason, RestartRecord
from ..supervision.states import WorkerState
from .driver import DriverContext, DriverRun
from .fence import FENCE_ACTOR_NAME
from .job import Job, ManagedGroup
from .kv import KV_ACTOR_NAME, KVStore
from .ownership import Owned, find_owned
from .record import GroupRecord, PoolRecord
from .spec import GroupSpec, import_object

__all__ = ["BudgetError", "JobStarter", "warn_cpu_oversubscription", "restored_restarts"]

log = get_logger("daemon")


class BudgetError(ConfigError):
    """The spec's pools and groups cannot fit the cluster (or a bundle); nothing was created."""


class JobStarter:
    """Starts (or re-adopts) ``job``'s pools, groups and driver, in the spec's order."""

    def __init__(self, job: Job, stop_requested: threading.Event) -> None:
        self.job, self.spec, self.stop_requested = job, job.spec, stop_requested

    def start(self) -> None:
        self._check_cluster_budget()
        self._remove_unexpected()
        # Created once, re-attached (with its data) by a restarted daemon; removed with the rest at teardown.
        self.job.kv = KVStore.create_or_attach(self.spec.name, self.spec.namespace)
        if any(g.state.stateful for g in self.spec.groups.values()):
            # Keepers in the supervisor's namespace: a restarted daemon finds them (and their
            # snapshots) by name, and teardown and gc remove them with the rest of the job.
            assert self.job.fence is not None
            self.job.state_domain = StateDomain(f"{self.spec.name}.", self.spec.namespace, self.job.fence, self.job.hooks)
        for name in self.spec.groups_in_start_order():
            self._start_group(name, self.spec.groups[name])
        self._forget_unexpected()
        warn_cpu_oversubscription(self.job)
        if self.spec.driver is not None:
            self._start_driver()

    def _check_cluster_budget(self) -> None:
        # Pre-flight, before any placement group exists: pools that together cannot fit the cluster
        # would wait forever (the per-bundle budget was checked with the spec).
        if self.job.adopting:
            return  # re-adopting a running job: nodes it lost may rejoin; never refuse to supervise it
        used = {g.pool for g in self.spec.groups.values()}
        totals = {
            name: self.spec.resource_pool(name).reserved_total()
            for name in self.spec.pools
            if name in used and not self.spec.pools[name].autoscaling
        }
        misfits = cluster_misfits(totals, read_snapshot().total)
        if misfits:
            raise BudgetError("budget: " + "; ".join(misfits))

    def _expected(self) -> tuple[set[str], set[str]]:
        """Placement-group names and actor names the spec describes (with the standbys, and the ranks
        they took over, that the earlier incarnation recorded for a group the spec still describes)."""
        pg_names = set()
        for name in self.spec.pools:
            pool = self.spec.resource_pool(name)
            pg_names.update([*pool.placement_group_names(), *filter(None, [pool.spare_placement_group_name()])])
        actors = {KV_ACTOR_NAME, FENCE_ACTOR_NAME}
        for name, group in self.spec.groups.items():
            actors.update(self.spec.actor_names(name, ClassWithInitArgs(self._import(group.worker_class)).user_cls.__name__))
            earlier = self._earlier_group(name)
            if earlier is not None:
                actors.update([*earlier.actor_names, *(s.name for s in earlier.standbys)])
        return pg_names, actors

    def _earlier_group(self, name: str) -> GroupRecord | None:
        """The earlier incarnation's record of group ``name``, if it describes the same group as the spec
        (class, pool and world size): only then are its actor names, rendezvous and init state trusted."""
        previous = self.job.previous
        earlier = previous.groups.get(name) if previous else None
        spec = self.spec.groups[name]
        if earlier is None or earlier.worker_class != spec.worker_class or earlier.pool != spec.pool:
            return None
        if len(earlier.actor_names) != sum(self.spec.pools[spec.pool].process_on_nodes):
            return None
        return earlier

    def _remove_unexpected(self) -> None:
        # Reconcile with what an earlier incarnation left: keep what the spec still describes.
        pg_names, actors = self._expected()
        owned = find_owned(self.spec.name)
        # The snapshot keepers hold what the stateful groups are restored from after this restart.
        stateful = any(g.state.stateful for g in self.spec.groups.values())
        keeper = keeper_name(f"{self.spec.name}.", "")
        stale_actors = [a for a in owned.actors if a not in actors and not (stateful and a.startswith(keeper))]
        stale = Owned({n: i for n, i in owned.placement_groups.items() if n not in pg_names}, stale_actors)
        if stale:
            log.info("removing_stale_resources", supervisor=self.spec.name, placement_groups=sorted(stale.placement_groups), actors=stale.actors)
            assert self.job.fence is not None
            self.job.fence.remove_owned(stale)

    def _forget_unexpected(self) -> None:
        # Everything the spec describes is adopted or created now: the earlier incarnation's entries
        # for pools and groups the spec dropped (removed above) must not linger in the record.
        with self.job.lock:
            assert self.job.record is not None
            record = self.job.record
            record.pools = {n: p for n, p in record.pools.items() if n in self.spec.pools}
            record.groups = {n: g for n, g in record.groups.items() if n in self.spec.groups}

    def _pool(self, name: str) -> ResourcePool:
        """The spec pool ``name``, its placement groups created or adopted (once per daemon)."""
        job = self.job
        if name in job.pools:
            return job.pools[name]
        p = self.spec.pools[name]
        pool = self.spec.resource_pool(name)
        pool.fence = job.fence  # every removal of its placement groups, and kill of its groups' actors
        job.pools[name] = pool  # owned from here on: teardown removes it whatever happens next
        with job.lock:
            assert job.record is not None
            # Shown by status while the pool waits; an earlier incarnation's entry is kept until adopted.
            job.record.pools.setdefault(
                name,
                PoolRecord(name, pool.name_prefix, pool.placement_group_names(), {}, list(p.process_on_nodes), pool.spare_placement_group_name()),
            )
        pool.get_placement_groups(timeout_s=p.resource_timeout_s, progress_interval_s=p.progress_interval_s, autoscaling=p.autoscaling, hooks=job.hooks)
        earlier = job.previous.pools.get(name) if job.previous else None
        if earlier is not None and sorted(earlier.placement_groups) == sorted(pool.rank_order_names()):
            pool.restore_rank_order(earlier.placement_groups, earlier.bundle_nodes)
        names = pool.rank_order_names()
        nodes = pool.original_bundle_nodes()
        sizes = [len(pg.bundle_specs) for pg in pool.pgs or []]
        with job.lock:
            job.record.pools[name] = PoolRecord(
                name,
                pool.name_prefix,
                names,
                {n: [nodes[BundleRef(i, b)] for b in range(count)] for i, (n, count) in enumerate(zip(names, sizes, strict=True))},
                list(p.process_on_nodes),
                pool.spare_placement_group_name(),
            )
        return pool

    def _start_group(self, name: str, spec: GroupSpec) -> None:
        job = self.job
        pool = self._pool(spec.pool)
        cls_with_init = ClassWithInitArgs(self._import(spec.worker_class), *spec.args, **spec.kwargs)
        budget = spec.worker_budget(name, self.spec.pools[spec.pool])
        cls_with_init.update_options({"num_cpus": budget.cpus, "num_gpus": budget.gpus})
        prefix = self.spec.group_prefix(name)
        earlier = job.previous.groups.get(name) if job.previous else None
        same = self._earlier_group(name)
        names = self.spec.actor_names(name, cls_with_init.user_cls.__name__)
        record = GroupRecord(name, spec.pool, spec.worker_class, names, restart_window_s=spec.restart_window_s, max_restarts=spec.max_restarts)
        if earlier is None:
            job.set_group_record(record)  # status shows it creating; an earlier entry stays until adopted
        placement = _placement(same) if same is not None else None
        live = set(find_owned(self.spec.name).actors) & set(placement.actor_names if placement else names)
        # Live actors with these names are adopted even without a record of them (a daemon that died
        # before recording them); then their rendezvous and init state are unknown: init runs on all.
        adopting = bool(live) or same is not None
        if adopting:
            if same is not None:
                # Until this adoption ends, the next start must not trust the ranks' init: a rank 0
                # started here gets a rendezvous that is recorded only once the group is ready.
                job.set_group_record(dataclasses.replace(same, initialized=False))
                job.persist()
            group, new_ranks = adopt_group(
                pool, cls_with_init, prefix, self.spec.namespace, same.master_addr if same else None,
                same.master_port if same else None, spec.env, spec.actor_start_timeout_s, job.hooks, placement, self._zygotes(spec),
            )  # fmt: skip
            to_init = _ranks_to_init(group, same, new_ranks)
            if spec.state.stateful and to_init:
                interrupted = _interrupted_ranks(same, new_ranks)
                if interrupted:
                    replace_ranks(group, interrupted, FailureReason.INIT_FAILED, spec.actor_start_timeout_s, job.hooks)
                to_init = _reform(group)
        else:
            group = create_group(
                pool, cls_with_init, name_prefix=prefix, detached=True, worker_env=spec.env, namespace=self.spec.namespace,
                actor_start_timeout_s=spec.actor_start_timeout_s, hooks=job.hooks, zygotes=self._zygotes(spec),
            )  # fmt: skip
            to_init = list(range(group.world_size))
        record.master_addr, record.master_port = group.master_address, int(group.master_port or 0) or None
        record.state = "initializing"
        if earlier is None:
            job.set_group_record(record)
        config = spec.supervision_config(self.spec.base_dir)
        if spec.init_method and to_init:
            # An adopted group is a job that survived a crash: a failed init leaves it for the next start.
            init_group(
                group, spec.init_method, (), spec.init_kwargs, spec.init_policy(), job.hooks, ranks=to_init,
                kill_on_failure=not adopting, collective=config.collective,
            )  # fmt: skip
        record.initialized = True
        history, counts = restored_restarts(same) if same else ([], {})
        supervisor = GroupSupervisor(
            group, config, job.hooks, restart_history=history, rank_restarts=counts, state_domain=job.state_domain, record=job,
        )  # fmt: skip
        with job.lock:  # from here on the record of this group is built from its supervisor
            assert job.record is not None
            job.record.groups[name] = record
            job.groups.append(ManagedGroup(name, spec, group, supervisor))
        supervisor.start()
        log.info("group_ready", group=name, world_size=group.world_size, adopted=adopting, initialized=sorted(to_init) if spec.init_method else [])

    def _zygotes(self, spec: GroupSpec) -> NodeZygotes | None:
        """The job's zygotes for ``spec``'s preload (None: none asked for), one set per preload, shared
        by the groups that name it: one import per node, not one per rank. Named in the supervisor's
        namespace, so teardown, ``supervisor gc`` and a restart's clean-up remove them with the rest."""
        if not spec.preload:
            return None
        preload = tuple(spec.preload)
        job = self.job
        if preload not in job.zygotes:
            fence = job.fence
            assert fence is not None
            job.zygotes[preload] = NodeZygotes(f"{self.spec.name}.", self.spec.namespace, preload, True, fence.kill_actors)
        return job.zygotes[preload]

    def _import(self, path: str) -> Any:
        return import_object(path, self.spec.python_path())

    def _start_driver(self) -> None:
        job = self.job
        assert self.spec.driver is not None and job.record is not None
        function = self._import(self.spec.driver.function)
        resume_step = self._restore_state()
        context = DriverContext(
            name=self.spec.name,
            groups={m.name: m.group for m in job.groups},
            pools=dict(job.pools),
            args=dict(self.spec.driver.args),
            progress=dict(job.record.driver_progress),
            resumed=job.adopting,
            stop_requested=self.stop_requested,
            kv=job.kv,
            state=job.state_domain,
            resume_step=resume_step,
            _save=job.save_progress,
        )
        job.driver = DriverRun(function, context).start()
        log.info("driver_started", function=self.spec.driver.function, resumed=context.resumed, progress=context.progress)


    def _restore_state(self) -> int | None:
        """A re-adopted job's stateful ranks may be a step past the progress their driver saved (it
        was killed between an update and its save): every stateful group goes back to the newest
        complete snapshot, and the driver resumes from its step."""
        domain = self.job.state_domain
        if domain is None:
            return None
        if not self.job.adopting:
            return 0
        previous = self.job.previous
        snapshotted = [n for n, g in (previous.groups.items() if previous else []) if g.training_state and g.training_state.last_snapshot_step is not None]
        rollback = domain.restore_all("the daemon re-adopted the job", snapshotted)
        if rollback is None:
            return None
        log.info("state_restored_on_adoption", step=rollback.step, medium=rollback.medium.value, groups=list(rollback.groups))
        return rollback.step


def warn_cpu_oversubscription(job: Job) -> None:
    """Data processes are invisible to Ray's scheduler: say so when a node's workers need more CPUs
    than it has (the job runs, slower). Shown by `supervisor status` too; the heartbeat re-checks it
    (replacements move ranks between nodes)."""
    try:
        snapshot = read_snapshot()
    except Exception as exc:  # only a warning: never a reason to fail the start
        log.warning("cpu_oversubscription_unchecked", error=first_line(exc))
        return
    node_cpus = {n.node_id: n.total.get("CPU", 0.0) for n in snapshot.alive_nodes}
    placements = [
        (rank.node_id, m.spec.worker_budget(m.name, job.spec.pools[m.spec.pool]))
        for m in list(job.groups)
        for rank in m.supervisor.ranks()
        if rank.node_id
    ]
    warnings = [f"CPU oversubscribed: {load.describe()}" for load in cpu_oversubscription(placements, node_cpus)]
    with job.lock:
        if job.record is None or warnings == job.record.warnings:
            return
        job.record.warnings = warnings
    for warning in warnings:  # logged when they change
        log.warning("cpu_oversubscribed", detail=warning)


def restored_restarts(earlier: GroupRecord) -> tuple[list[RestartRecord], dict[int, int]]:
    """An earlier incarnation's restarts, moved onto this process's monotonic clock."""
    wall, mono = time.time(), time.monotonic()
    history = [RestartRecord(int(rank), FailureReason(reason), mono - (wall - float(t))) for rank, reason, t in earlier.restarts]
    return history, {r.rank: r.restarts for r in earlier.ranks}


def _ranks_to_init(group: WorkerGroup, earlier: GroupRecord | None, new_ranks: list[int]) -> list[int]:
    """The ranks of a re-adopted group whose init must run: new actors, and every rank the earlier
    incarnation had not recorded as initialised (it died during their recovery). When rank 0 is among
    them, every rank: the others joined a rendezvous that is gone; the recorded one (rank 0's, written
    before rank 0 started) is given to the adopted ranks first."""
    if earlier is None or not earlier.initialized:
        uninitialised = set(range(group.world_size))
    else:
        uninitialised = {r.rank for r in earlier.ranks if r.state is not WorkerState.RUNNING}
    to_init = uninitialised | set(new_ranks)
    if 0 not in to_init:
        return sorted(to_init)
    if 0 not in new_ranks:  # adopt_group gave out the rendezvous only for a new rank 0
        adopted = sorted(set(range(1, group.world_size)) - set(new_ranks))
        for rank in group.propagate_rendezvous(adopted):
            group.replace_worker(rank)
            log.warning("adopted_worker_replaced", group=group.name, rank=rank, reason="did not take the recorded rendezvous")
    return list(range(group.world_size))


def _interrupted_ranks(earlier: GroupRecord | None, new_ranks: list[int]) -> list[int]:
    """Adopted ranks of a stateful group that the earlier incarnation was re-initialising when it died.

    Its init call may still be running in them, on its rendezvous, and would pair with this daemon's
    init of their peers: measured in chaos kill-during-recovery, two to three minutes of store and
    collective timeouts before the group formed. They get fresh actors; their state comes back from
    the snapshot as the rest of the group's does."""
    if earlier is None:
        return []
    return sorted({r.rank for r in earlier.ranks if r.state is not WorkerState.RUNNING} - set(new_ranks))


def _reform(group: WorkerGroup) -> list[int]:
    """Every rank of a stateful group, on a rendezvous none of them has used: the group is one
    collective, and a rank whose init the earlier daemon did not see finish (it died re-forming the
    group) may hold its peers in a collective that will never complete. Rank 0 lives on and picks it."""
    group.pick_new_rendezvous(rank_zero=group.workers[0])
    for rank in group.propagate_rendezvous(list(range(group.world_size))):
        group.replace_worker(rank)
        log.warning("adopted_worker_replaced", group=group.name, rank=rank, reason="did not take the new rendezvous")
    return list(range(group.world_size))


def _placement(record: GroupRecord) -> GroupPlacement | None:
    """Where an earlier incarnation recorded a group's actors (None: a record from before standbys)."""
    if len(record.bundles) != len(record.actor_names):
        return None
    return GroupPlacement(list(record.actor_names), [BundleRef(*b) for b in record.bundles], {BundleRef(*s.bundle): s.name for s in record.standbys})
