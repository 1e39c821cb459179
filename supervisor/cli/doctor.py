"""``supervisor doctor``: the triage a person would run on a job that is stuck or slow.

Findings come in three phases, each with a suggested fix:

* before scheduling: placement groups that wait (what is missing, who holds it) or can never be
  placed, budget misfits of a spec, placement groups leaked by dead jobs or dead supervisors;
* during initialisation: ranks failing or timing out in their init method, with the last error;
* after start: restarts in the window, drifted ranks, hung ranks, CPU oversubscription, KV reads that
  timed out, a Ray version that differs between the daemon and the cluster.

:func:`diagnose` is pure (facts in, findings out), so every rule is tested without a cluster;
:func:`gather_facts` reads the facts from the records and the cluster.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from ..daemon.fence import observed_silence
from ..daemon.record import Liveness, RecordStore, SupervisorRecord, liveness
from ..placement.budget import bundle_misfits, cluster_misfits
from ..placement.resources import (
    ClusterSnapshot,
    PlacementGroupRecord,
    PoolDemand,
    find_infeasibility,
    format_resources,
)
from ..placement.resources import diagnose as diagnose_wait
from ..supervision.states import WorkerState

__all__ = ["Phase", "Finding", "DoctorFacts", "diagnose", "gather_facts", "render_findings"]


class Phase(enum.Enum):
    BEFORE_SCHEDULING = "before scheduling"
    DURING_INIT = "during initialisation"
    AFTER_START = "after start"


class FindingKind(enum.Enum):
    INFEASIBLE = "infeasible"
    WAITING = "waiting for resources"
    BUDGET = "budget misfit"
    LEAKED_PLACEMENT_GROUP = "leaked placement group"
    ORPHANED_SUPERVISOR = "orphaned supervisor"
    DETACHED_SUPERVISOR = "detached supervisor"
    INIT_FAILING = "init failing"
    RESTARTS = "restarts"
    DRIFT = "placement drift"
    STANDBYS_MISSING = "standbys missing"
    HUNG = "hung rank"
    CPU_OVERSUBSCRIBED = "cpu oversubscribed"
    KV_TIMEOUTS = "kv reads timing out"
    VERSION_MISMATCH = "ray version mismatch"
    STATE_UNPROTECTED = "state without a snapshot"
    STATE_DIVERGED = "replica state diverged"
    STATE_MEMORY = "snapshot memory near its bound"
    REPLAY_LOG = "replay log near its bound"
    DRAINING = "node draining"


_PHASE = {
    FindingKind.INFEASIBLE: Phase.BEFORE_SCHEDULING,
    FindingKind.WAITING: Phase.BEFORE_SCHEDULING,
    FindingKind.BUDGET: Phase.BEFORE_SCHEDULING,
    FindingKind.LEAKED_PLACEMENT_GROUP: Phase.BEFORE_SCHEDULING,
    FindingKind.ORPHANED_SUPERVISOR: Phase.BEFORE_SCHEDULING,
    FindingKind.DETACHED_SUPERVISOR: Phase.BEFORE_SCHEDULING,
    FindingKind.INIT_FAILING: Phase.DURING_INIT,
    FindingKind.RESTARTS: Phase.AFTER_START,
    FindingKind.DRIFT: Phase.AFTER_START,
    FindingKind.STANDBYS_MISSING: Phase.AFTER_START,
    FindingKind.HUNG: Phase.AFTER_START,
    FindingKind.CPU_OVERSUBSCRIBED: Phase.AFTER_START,
    FindingKind.KV_TIMEOUTS: Phase.AFTER_START,
    FindingKind.VERSION_MISMATCH: Phase.AFTER_START,
    FindingKind.STATE_UNPROTECTED: Phase.AFTER_START,
    FindingKind.STATE_DIVERGED: Phase.AFTER_START,
    FindingKind.STATE_MEMORY: Phase.AFTER_START,
    FindingKind.REPLAY_LOG: Phase.AFTER_START,
    FindingKind.DRAINING: Phase.AFTER_START,
}


class Severity(enum.IntEnum):
    """How much a finding matters; ``doctor --fail-on`` exits 1 from this level up."""

    INFO = 1  # the supervisor handled it (a restart within the budget, drift it reported)
    WARNING = 2  # needs a look: something waits, leaks or degrades
    ERROR = 3  # the job cannot run or is not running as it should

    @classmethod
    def parse(cls, name: str) -> Severity:
        return cls[name.upper()]


_SEVERITY = {
    FindingKind.INFEASIBLE: Severity.ERROR,
    FindingKind.WAITING: Severity.WARNING,
    FindingKind.BUDGET: Severity.ERROR,
    FindingKind.LEAKED_PLACEMENT_GROUP: Severity.WARNING,
    FindingKind.ORPHANED_SUPERVISOR: Severity.WARNING,
    FindingKind.DETACHED_SUPERVISOR: Severity.INFO,
    FindingKind.INIT_FAILING: Severity.ERROR,
    FindingKind.RESTARTS: Severity.INFO,
    FindingKind.DRIFT: Severity.INFO,
    FindingKind.STANDBYS_MISSING: Severity.WARNING,
    FindingKind.HUNG: Severity.ERROR,
    FindingKind.CPU_OVERSUBSCRIBED: Severity.WARNING,
    FindingKind.KV_TIMEOUTS: Severity.WARNING,
    FindingKind.VERSION_MISMATCH: Severity.ERROR,
    FindingKind.STATE_UNPROTECTED: Severity.WARNING,
    FindingKind.STATE_DIVERGED: Severity.ERROR,
    FindingKind.STATE_MEMORY: Severity.WARNING,
    FindingKind.REPLAY_LOG: Severity.INFO,
    FindingKind.DRAINING: Severity.WARNING,
}


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    subject: str  # what it is about: a pool, a placement group, "supervisor/group rank N"
    detail: str
    fix: str

    @property
    def phase(self) -> Phase:
        return _PHASE[self.kind]

    @property
    def severity(self) -> Severity:
        return _SEVERITY[self.kind]

    def as_dict(self) -> dict[str, str]:
        return {
            "phase": self.phase.value, "severity": self.severity.name.lower(), "kind": self.kind.value,
            "subject": self.subject, "detail": self.detail, "fix": self.fix,
        }  # fmt: skip


def fails(findings: list[Finding], fail_on: Severity | None) -> bool:
    """Whether ``doctor`` exits 1: a finding at ``fail_on`` or above (None: never)."""
    return fail_on is not None and any(f.severity >= fail_on for f in findings)


@dataclass
class DoctorFacts:
    """Everything the rules look at, read at one moment."""

    now: float
    snapshot: ClusterSnapshot
    records: list[SupervisorRecord]
    pool_demands: dict[str, PoolDemand] = field(default_factory=dict)  # a spec's pools (not created yet)
    detached_dead_creator: set[str] = field(default_factory=set)  # pg ids: detached, creator job dead
    cluster_ray_version: str | None = None
    spec_bundle_misfits: list[tuple[str, str]] = field(default_factory=list)
    spec_pool_totals: dict[str, dict[str, float]] = field(default_factory=dict)
    kv_timeouts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # supervisor -> namespace -> stats
    # supervisor -> for how long its daemon has been silent (its fence's clock); absent: the record's age
    silences: dict[str, float] = field(default_factory=dict)

    def silence(self, record: SupervisorRecord) -> float:
        return self.silences.get(record.name, record.heartbeat_age(self.now))

    def liveness(self, record: SupervisorRecord) -> Liveness:
        return liveness(record, self.silence(record))


def diagnose(facts: DoctorFacts) -> list[Finding]:
    """Every finding, in phase order (pure)."""
    findings: list[Finding] = []
    live = {r.name for r in facts.records if facts.liveness(r) is Liveness.ALIVE}
    # -- before scheduling
    for pg in facts.snapshot.placement_groups:
        if pg.state != "PENDING":
            continue
        demand = PoolDemand(pool=pg.label, strategy=pg.strategy, placement_groups=((pg.name, pg.bundles),))
        reason = find_infeasibility(demand, facts.snapshot)
        if reason is not None:
            findings.append(Finding(FindingKind.INFEASIBLE, pg.label, reason, "shrink the pool, or add nodes that can hold its bundles"))
        else:
            summary = diagnose_wait(demand, facts.snapshot, {pg.pg_id}).summary()
            findings.append(Finding(FindingKind.WAITING, pg.label, summary, "free what holds the resources (named above), or add capacity"))
    for pool, demand in sorted(facts.pool_demands.items()):
        reason = find_infeasibility(demand, facts.snapshot)
        if reason is not None:
            findings.append(Finding(FindingKind.INFEASIBLE, pool, reason, "shrink the pool, or add nodes that can hold its bundles"))
    for pool, arithmetic in facts.spec_bundle_misfits:
        findings.append(Finding(FindingKind.BUDGET, pool, arithmetic, "lower the groups' gpus_per_worker/cpus_per_worker, or raise the pool's max_colocate_count"))
    for misfit in cluster_misfits(facts.spec_pool_totals, facts.snapshot.total) if facts.spec_pool_totals else []:
        findings.append(Finding(FindingKind.BUDGET, "cluster", misfit, "make the pools smaller or the cluster bigger"))
    for record in facts.records:
        state = facts.liveness(record)
        if state is Liveness.ORPHANED:
            findings.append(
                Finding(
                    FindingKind.ORPHANED_SUPERVISOR, record.name,
                    f"daemon gone for {facts.silence(record):.0f}s (pid {record.pid} on {record.host}); its pools still hold resources",
                    "start it again with its spec to re-adopt, or `supervisor gc` to remove what it left",
                )  # fmt: skip
            )
        elif state is Liveness.DETACHED:
            findings.append(
                Finding(
                    FindingKind.DETACHED_SUPERVISOR, record.name,
                    f"daemon detached {facts.silence(record):.0f}s ago (pid {record.pid} on {record.host}); its pools and workers "
                    "run on, waiting for the next start",
                    f"start it again with its spec to re-adopt; `supervisor gc` collects it only after {record.detached_grace_s:g}s "
                    "(detached_grace_s) or with --include-detached",
                )  # fmt: skip
            )
    for pg in facts.snapshot.placement_groups:
        if pg.state == "REMOVED" or pg.pg_id not in facts.detached_dead_creator or _owner(pg) in live:
            continue
        if _owner(pg) is not None and any(r.name == _owner(pg) for r in facts.records):
            continue  # a supervisor's pool: reported as an orphaned supervisor above
        findings.append(
            Finding(
                FindingKind.LEAKED_PLACEMENT_GROUP, pg.label,
                f"{pg.state}, holds {format_resources(pg.holds) or 'nothing'}; detached, and the job that created it is gone",
                # By id: placement-group names are looked up per Ray namespace, ids work from any driver.
                "remove it: python -c \"import ray; from ray.util.placement_group import PlacementGroup; ray.init(); "
                f"ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex('{pg.pg_id}')))\"",
            )  # fmt: skip
        )
    # -- during initialisation and after start, from the records of live daemons
    for record in facts.records:
        if record.name not in live:
            continue
        latest_init: dict[tuple[str, int], Any] = {}
        for failure in record.failures:
            if failure.reason.startswith("init_"):
                latest_init[(failure.group, failure.rank)] = failure
        for (group, rank), failure in sorted(latest_init.items()):
            if _recovered(record, group, rank):
                continue  # a later attempt succeeded: the rank runs
            findings.append(
                Finding(
                    FindingKind.INIT_FAILING, f"{record.name}/{group} rank {rank}",
                    f"init {failure.reason.removeprefix('init_')}: {failure.detail}",
                    f"read the rank's log for the traceback: `supervisor logs {record.name} {group} {rank} --err` (add -p for the "
                    "actor it replaced); raise init_timeout_s if it is slow, not stuck",
                )  # fmt: skip
            )
        for group in record.groups.values():
            n = group.restarts_in_window(facts.now)
            if n:
                findings.append(
                    Finding(
                        FindingKind.RESTARTS, f"{record.name}/{group.name}",
                        f"{n} restart(s) in the last {group.restart_window_s:g}s (budget {group.max_restarts})",
                        f"see `supervisor events {record.name} --group {group.name} --warnings` for the reasons; repeated "
                        "ones point at the workers' code or a bad node",
                    )  # fmt: skip
                )
            ready = sum(1 for sb in group.standbys if sb.node_id)
            if ready < group.standbys_wanted:
                findings.append(
                    Finding(
                        FindingKind.STANDBYS_MISSING, f"{record.name}/{group.name}",
                        f"{ready} of {group.standbys_wanted} standby(s) ready ({len(group.standbys) - ready} starting): "
                        "a failed rank may wait for a fresh actor",
                        "standbys start in free, placed bundles: check the log for standby_failed (a constructor that "
                        "needs the rank) and `supervisor status` for spare bundles that are not placed",
                    )  # fmt: skip
                )
            for rank in group.ranks:
                if rank.drifted:
                    findings.append(
                        Finding(
                            FindingKind.DRIFT, f"{record.name}/{group.name} rank {rank.rank}",
                            f"runs on node {(rank.node_id or '')[:12]}, its bundle was on {(rank.original_node or '')[:12]} at creation",
                            "if the job is throughput-bound, rebuild the pool once the node is back (restart from a checkpoint)",
                        )  # fmt: skip
                    )
        findings += _state_findings(record)
        hung = {(f.group, f.rank): f for f in record.failures if f.reason == "hung" and facts.now - f.time <= 3600}
        for (group, rank), failure in sorted(hung.items()):
            findings.append(
                Finding(
                    FindingKind.HUNG, f"{record.name}/{group} rank {rank}", failure.detail,
                    "a call got no answer, or the heartbeat stopped (a stopped or GIL-bound process): look for a collective waiting on a dead peer, or raise call_timeout_s",
                )  # fmt: skip
            )
        for drain in record.drains:
            deadline = "no deadline" if drain.deadline is None else f"deadline in {max(0.0, drain.deadline - facts.now):.0f}s"
            if drain.outcome == "noticed":
                detail, fix = f"node {drain.node[:12]} is being drained ({deadline}); a hand-over is on its way", "nothing to do: the rank moves at its next call boundary"
            else:
                detail = f"node {drain.node[:12]} is being drained ({deadline}) and the rank will not be handed over ({drain.outcome}): {drain.detail}"
                fix = "give the pool spare bundles on other nodes (capacity_factor > 1) or standbys; the rank is recovered as a failure when the node goes"
            findings.append(Finding(FindingKind.DRAINING, f"{record.name}/{drain.group} rank {drain.rank}", detail, fix))
        for warning in record.warnings:
            if warning.startswith("CPU oversubscribed"):
                findings.append(
                    Finding(
                        FindingKind.CPU_OVERSUBSCRIBED, record.name, warning.removeprefix("CPU oversubscribed: "),
                        "lower data_processes_per_worker, or reserve more CPUs per worker (cpus_per_worker)",
                    )  # fmt: skip
                )
        for namespace, stats in sorted(facts.kv_timeouts.get(record.name, {}).items()):
            findings.append(
                Finding(
                    FindingKind.KV_TIMEOUTS, f"{record.name} kv namespace {namespace!r}",
                    f"{stats.get('count', 0)} read(s) gave up, the last for {', '.join(map(repr, stats.get('keys', [])))}: {stats.get('diagnosis')}",
                    "make reader and writer use the same namespace and key (the nearest ones are named), or raise the timeout",
                )  # fmt: skip
            )
        if facts.cluster_ray_version and record.ray_version and record.ray_version != facts.cluster_ray_version:
            findings.append(
                Finding(
                    FindingKind.VERSION_MISMATCH, record.name,
                    f"daemon runs Ray {record.ray_version}, the cluster {facts.cluster_ray_version}",
                    "install the cluster's Ray version where the daemon runs",
                )  # fmt: skip
            )
    order = list(Phase)
    return sorted(findings, key=lambda f: order.index(f.phase))


def _state_findings(record: SupervisorRecord) -> list[Finding]:
    """Stateful groups a failure now would cost their state, and replicas that no longer agree.

    A rollback takes every stateful group of the job to a step all of them hold, so a group without a
    complete snapshot leaves the whole job unprotected when any of them is sharded (a replicated group
    alone still has its live peers, if it has more than one rank).
    """
    stateful = {g.name: g for g in record.groups.values() if g.training_state is not None}
    any_sharded = any(g.training_state.kind == "sharded" for g in stateful.values() if g.training_state is not None)
    findings = []
    for name, group in sorted(stateful.items()):
        state = group.training_state
        assert state is not None
        subject = f"{record.name}/{name}"
        if state.last_snapshot_step is None and (any_sharded or len(group.actor_names) < 2):
            setting = (
                "set snapshot_every in the group's spec (and drive the job by steps: ctx.step_boundary(step))"
                if not state.snapshot_every
                else "the driver has not reached a step boundary since the start, or every snapshot was skipped for "
                "snapshot_memory_mb (see SnapshotSkipped events); add disk_dir and disk_snapshot_every for a copy that outlives nodes"
            )
            findings.append(
                Finding(
                    FindingKind.STATE_UNPROTECTED, subject,
                    f"{state.kind} state and no complete snapshot: a rank lost now fails the job (its state cannot be restored)",
                    setting,
                )  # fmt: skip
            )
        # Two complete snapshots are kept, and the next one is taken beside them: past three quarters of
        # the bound, the next snapshot is likely skipped (or only the newest one kept).
        if state.bound_bytes and state.held_bytes > 0.75 * state.bound_bytes:
            findings.append(
                Finding(
                    FindingKind.STATE_MEMORY, subject,
                    f"snapshots hold {state.held_bytes / 2**20:.1f} of snapshot_memory_mb = {state.bound_bytes / 2**20:g} MiB "
                    f"(steps {state.steps_in_memory}): the next may be skipped",
                    "raise snapshot_memory_mb to at least 3 snapshots' worth (2 copies of every shard each), or snapshot less often",
                )  # fmt: skip
            )
        log_bound = state.replay_log_bound_bytes
        if state.replay_log_calls is not None and log_bound and state.replay_log_bytes > 0.75 * log_bound:
            findings.append(
                Finding(
                    FindingKind.REPLAY_LOG, subject,
                    f"the replay log holds {state.replay_log_calls} call(s) taking {state.replay_log_bytes / 2**20:.1f} of "
                    f"replay_log_mb = {log_bound / 2**20:g} MiB: the next step boundary takes an extra snapshot",
                    "snapshot more often (snapshot_every), or raise replay_log_mb if the driver has the memory",
                )  # fmt: skip
            )
        if state.diverged_ranks:
            digests = ", ".join(f"rank {r}: {d[:12]}" for r, d in sorted(state.digests.items(), key=lambda kv: int(kv[0])))
            findings.append(
                Finding(
                    FindingKind.STATE_DIVERGED, f"{subject} rank(s) {state.diverged_ranks}",
                    f"replicated state differs from the other replicas' at step {state.digest_step} ({digests})",
                    "the replicas no longer train the same model: look for non-determinism or a rank that skipped an update; "
                    "stop the job and resume from the last good checkpoint",
                )  # fmt: skip
            )
    return findings


def _recovered(record: SupervisorRecord, group: str, rank: int) -> bool:
    g = record.groups.get(group)
    if g is None or not g.initialized:
        return False
    return any(r.rank == rank and r.state is WorkerState.RUNNING for r in g.ranks)


def _owner(pg: PlacementGroupRecord) -> str | None:
    # Supervisor pools are named "<supervisor>.<pool>:pg...".
    head, dot, _ = pg.name.partition(".")
    return head if dot and ":pg" in pg.name else None


def gather_facts(spec: Any = None) -> DoctorFacts:
    """Read records, the cluster and (optionally) a spec's budget (needs a Ray connection)."""
    from ..placement.cluster_state import read_detached_dead_creator, read_snapshot

    now = time.time()
    snapshot = read_snapshot()
    records = RecordStore().all()
    facts = DoctorFacts(now, snapshot, records, {}, read_detached_dead_creator(), _cluster_ray_version())
    facts.silences = {r.name: observed_silence(r, now)[0] for r in records}
    facts.kv_timeouts = {r.name: _kv_timeouts(r) for r in records if facts.liveness(r) is Liveness.ALIVE}
    if spec is not None:
        facts.spec_bundle_misfits = [(f"{spec.name}/{pool}", a) for pool, a in bundle_misfits(spec.bundles(), spec.worker_budgets())]
        used = {g.pool for g in spec.groups.values()}
        for name in (n for n in spec.pools if n in used):
            pool = spec.resource_pool(name)
            facts.spec_pool_totals[f"{spec.name}/{name}"] = pool.reserved_total()  # spare bundles are reserved too
            facts.pool_demands[f"{spec.name}/{name}"] = pool.demand()
    return facts


def _kv_timeouts(record: SupervisorRecord) -> dict[str, dict[str, Any]]:
    from ..daemon.kv import KVStore

    try:
        return dict(KVStore.attach(record.namespace).info().get("timeouts", {}))
    except Exception:  # no store (an older daemon) or it is unreachable: nothing to report
        return {}


def _cluster_ray_version() -> str | None:
    import json

    try:
        from ray.experimental import internal_kv

        data = internal_kv._internal_kv_get("CLUSTER_METADATA", namespace="cluster")
        return json.loads(data)["ray_version"] if data else None
    except Exception:
        return None


def render_findings(findings: list[Finding]) -> str:
    """Findings grouped by phase, in the layout of `supervisor status`."""
    from .status import RULE

    lines = [f"supervisor doctor: {len(findings)} finding(s)" if findings else "supervisor doctor: nothing found"]
    for phase in Phase:
        lines += ["", phase.value.capitalize(), RULE]
        items = [f for f in findings if f.phase is phase]
        lines += [f" [{f.severity.name.lower()}: {f.kind.value}] {f.subject}: {f.detail}\n   fix: {f.fix}" for f in items] or [" (no findings)"]
    return "\n".join(lines)
