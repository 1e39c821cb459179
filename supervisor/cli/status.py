"""``supervisor status``: what every supervisor on a cluster owns and how it is doing.

:func:`collect_status` reads the supervisor records and the cluster (placement groups, named actors);
:func:`render_status` lays the result out like ``ray status`` (a ``======== Title: time ========``
header, sections under a dashed rule, ``Subsection:`` lines, one-space indented items, ``(no ...)``
for an empty list) and is pure, so the layout is tested without a cluster. The same facts go to
``--json`` through :func:`status_to_json`. A supervisor whose daemon is down is still shown, from what
the cluster holds, with when it was last seen.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..daemon.fence import observed_silence
from ..daemon.record import DrainRecord, Liveness, RecordStore, StateRecord, SupervisorRecord, liveness
from ..supervision import WorkerState
from .table import format_duration

__all__ = ["PlacementGroupStatus", "GroupStatus", "SupervisorStatus", "StatusReport", "collect_status", "render_status", "status_to_json"]

RULE = "-" * 63  # the width of `ray status`'s rules


@dataclass
class PlacementGroupStatus:
    name: str
    state: str  # Ray's state (CREATED, PENDING, RESCHEDULING...) or MISSING
    bundles_placed: int
    bundles_total: int
    bundle_nodes: list[str | None]  # current node of each bundle (None: not placed)


@dataclass
class PoolStatus:
    name: str
    placement_groups: list[PlacementGroupStatus]


@dataclass
class DriftedRank:
    rank: int
    original_node: str
    current_node: str


@dataclass
class RankRow:
    """One rank, for ``status -o wide``."""

    rank: int
    state: str
    node: str | None
    original_node: str | None
    actor_name: str
    actor_id: str | None  # None: no live actor of that name (or more than one, in different namespaces)
    pid: int | None
    restarts: int
    last_failure: str | None


@dataclass
class GroupStatus:
    name: str
    pool: str
    state: str
    world_size: int
    alive: int
    restarting: int
    failed: int
    restarts_in_window: int
    restart_window_s: float
    max_restarts: int
    drifted: list[DriftedRank]
    from_cluster: bool  # counts read from the cluster because the daemon is not running
    failure: str | None = None
    standbys_wanted: int = 0
    standbys_ready: int = 0
    standbys_starting: int = 0
    ranks: list[RankRow] = field(default_factory=list)
    training_state: StateRecord | None = None  # stateful groups: their snapshots


@dataclass
class FailureLine:
    time: float
    group: str
    rank: int
    reason: str
    detail: str


@dataclass
class SupervisorStatus:
    name: str
    liveness: str  # Liveness value
    state: str  # DaemonState value, as last recorded
    pid: int
    host: str
    started_at: float
    heartbeat_at: float
    heartbeat_age_s: float  # silent for this long, on the owner fence's clock when measured_by_fence
    metrics_address: str | None
    pools: list[PoolStatus]
    groups: list[GroupStatus]
    failures: list[FailureLine]
    warnings: list[str] = field(default_factory=list)
    measured_by_fence: bool = True  # else: the record's wall-clock age by this machine's clock
    record_write_failures: int = 0
    last_record_write_error: str | None = None
    detached_grace_s: float = 0.0
    drains: list[DrainRecord] = field(default_factory=list)  # ranks on draining nodes, not handed over yet


@dataclass
class Demand:
    bundles: list[dict[str, float]]
    strategy: str
    count: int  # placement groups asking for this


@dataclass
class StatusReport:
    generated_at: float
    supervisors: list[SupervisorStatus] = field(default_factory=list)
    demands: list[Demand] = field(default_factory=list)


# -- collecting (reads the cluster) -------------------------------------------------------------


def collect_status(now: float, names: list[str] | None = None, ranks: bool = False) -> StatusReport:
    """Build the report from the records and the cluster (needs a Ray connection).

    Args:
        now: wall-clock time of the report.
        names: only these supervisors (default: every one with a record).
        ranks: also each rank's actor id and pid (``-o wide``: one more read of Ray's actor table).
    """
    import ray
    from ray.util import placement_group_table

    store = RecordStore()
    records = [r for r in store.all() if names is None or r.name in names]
    table = placement_group_table()
    by_name = {str(info.get("name")): info for info in table.values() if info.get("state") != "REMOVED"}
    live_actors = {(a.get("namespace"), a["name"]) for a in ray.util.list_named_actors(all_namespaces=True)}
    processes = _live_processes() if ranks else None
    report = StatusReport(generated_at=now)
    report.supervisors = [_supervisor_status(r, now, by_name, live_actors, processes) for r in records]
    report.demands = _pending_demands(table)
    return report


# actor name -> (actor id, pid, node id) of every live actor of that name
Processes = dict[str, list[tuple[str, int, str]]]


def _live_processes() -> Processes:
    # Ray's actor table has no namespaces, so two supervisors' actors may share a name: the rank's
    # node tells them apart (see _rank_rows).
    from ray._private import state

    out: Processes = {}
    for info in state.actors(actor_state_name="ALIVE").values():
        if info.get("Name"):
            node = str((info.get("Address") or {}).get("NodeID") or "")
            out.setdefault(info["Name"], []).append((str(info["ActorID"]), int(info.get("Pid") or 0), node))
    return out


def _rank_rows(group: Any, failures: list[Any], processes: Processes) -> list[RankRow]:
    last: dict[int, str] = {}
    for f in failures:  # oldest first: the last one wins
        if f.group == group.name:
            last[f.rank] = f"{f.reason}: {f.detail}"
    rows = []
    for r in group.ranks:
        name = group.actor_names[r.rank] if r.rank < len(group.actor_names) else ""
        found = processes.get(name, [])
        if len(found) > 1:  # the same name in another supervisor's namespace: the one on this rank's node
            found = [f for f in found if f[2] == r.node_id]
        actor_id, pid = found[0][:2] if len(found) == 1 else (None, None)
        state = r.state.value if hasattr(r.state, "value") else str(r.state)
        rows.append(RankRow(r.rank, state, r.node_id, r.original_node, name, actor_id, pid, r.restarts, last.get(r.rank) or r.last_failure))
    return rows


def _supervisor_status(
    record: SupervisorRecord,
    now: float,
    pgs: dict[str, dict[str, Any]],
    live_actors: set[tuple[str | None, str]],
    processes: Processes | None = None,
) -> SupervisorStatus:
    silent, measured = observed_silence(record, now)
    state = liveness(record, silent)
    alive = state is Liveness.ALIVE
    pools = [
        PoolStatus(p.name, [_pg_status(n, pgs.get(n)) for n in [*p.placement_groups, *filter(None, [p.spare_placement_group])]])
        for p in record.pools.values()
    ]
    groups = []
    for g in record.groups.values():
        world = len(g.actor_names)
        if alive and g.ranks:
            counts = Counter(r.state for r in g.ranks)
            running, failed = counts[WorkerState.RUNNING], counts[WorkerState.FAILED]
            restarting = counts[WorkerState.RESTARTING] + counts[WorkerState.INITIALIZING]  # on their way back
        else:
            running = sum(1 for n in g.actor_names if (record.namespace, n) in live_actors)
            restarting, failed = 0, world - running
        drifted = [DriftedRank(r.rank, r.original_node or "", r.node_id or "") for r in g.ranks if r.drifted]
        live_standbys = [sb for sb in g.standbys if (record.namespace, sb.name) in live_actors]
        ready = sum(1 for sb in live_standbys if sb.node_id)
        groups.append(
            GroupStatus(
                g.name, g.pool, g.state, world, running, restarting, failed, g.restarts_in_window(now), g.restart_window_s,
                g.max_restarts, drifted, not alive, g.failure, g.standbys_wanted, ready, len(live_standbys) - ready,
                _rank_rows(g, record.failures, processes) if processes is not None else [], g.training_state,
            )  # fmt: skip
        )
    failures = [FailureLine(f.time, f.group, f.rank, f.reason, f.detail) for f in record.failures]
    return SupervisorStatus(
        record.name, state.value, record.state, record.pid, record.host, record.started_at, record.heartbeat_at,
        silent, record.metrics_address, pools, groups, failures, list(record.warnings), measured,
        record.record_write_failures, record.last_record_write_error, record.detached_grace_s, list(record.drains),
    )  # fmt: skip


def _pg_status(name: str, info: dict[str, Any] | None) -> PlacementGroupStatus:
    if info is None:
        return PlacementGroupStatus(name, "MISSING", 0, 0, [])
    total = len(info.get("bundles", {}))
    placed = {int(b): str(n) for b, n in info.get("bundles_to_node_id", {}).items() if n}
    return PlacementGroupStatus(name, str(info.get("state")), len(placed), total, [placed.get(b) for b in range(total)])


def _pending_demands(table: dict[str, dict[str, Any]]) -> list[Demand]:
    # What `ray status` calls pending demands: placement groups still waiting for their bundles.
    signatures: Counter[tuple[str, str]] = Counter()
    shapes: dict[tuple[str, str], list[dict[str, float]]] = {}
    for info in table.values():
        if info.get("state") not in ("PENDING", "RESCHEDULING"):
            continue
        placed = {int(b) for b, n in info.get("bundles_to_node_id", {}).items() if n}
        bundles = [{k: float(v) for k, v in sorted(b.items())} for i, b in sorted(info.get("bundles", {}).items()) if int(i) not in placed]
        key = (repr(bundles), str(info.get("strategy")))
        signatures[key] += 1
        shapes[key] = bundles
    return [Demand(shapes[key], key[1], count) for key, count in sorted(signatures.items())]


# -- rendering (pure) ---------------------------------------------------------------------------


# The shape of `supervisor status --json` and of a daemon's /status; raised when a key changes meaning
# or goes away (new keys keep it).
STATUS_SCHEMA_VERSION = 1


def status_to_json(report: StatusReport) -> dict[str, Any]:
    return {"schema_version": STATUS_SCHEMA_VERSION, **dataclasses.asdict(report)}


def drain_line(drain: DrainRecord, now: float) -> str:
    """One rank on a draining node: where, the deadline, and whether a hand-over is on its way or why not."""
    deadline = "no deadline" if drain.deadline is None else f"deadline in {format_duration(max(0.0, drain.deadline - now))}"
    what = "hand-over on its way" if drain.outcome == "noticed" else f"no hand-over ({drain.outcome}): {drain.detail}"
    return f"draining: rank {drain.rank} on node {short_node(drain.node)}, {deadline}; {what}"


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def short_node(node_id: str | None) -> str:
    """A node id as shown to people: Ray's ``node_`` prefix and the first 12 hex digits."""
    return f"node_{node_id[:12]}" if node_id else "(unplaced)"


def _section(title: str, subsections: list[tuple[str | None, list[str], str]]) -> list[str]:
    """A titled section; each subsection is (heading or None, items, what "(no ...)" says when empty)."""
    lines = [title, RULE]
    for heading, items, empty in subsections:
        if heading is not None:
            lines.append(f"{heading}:")
        lines += [f" {item}" for item in items] or [f" (no {empty})"]
    return lines


def status_to_yaml(report: StatusReport) -> str:
    import yaml

    return str(yaml.safe_dump(status_to_json(report), sort_keys=True))


def render_status(report: StatusReport, wide: bool = False) -> str:
    """The report in the layout of ``ray status``; ``wide`` adds a table of every rank under its group."""
    now = report.generated_at
    running = [s for s in report.supervisors if s.liveness == Liveness.ALIVE.value]
    down = [s for s in report.supervisors if s.liveness != Liveness.ALIVE.value]
    sup_items = [
        f"{s.name}: {s.state}, pid {s.pid} on {s.host}, up {format_duration(now - s.started_at)}, heartbeat {s.heartbeat_age_s:.1f}s ago"
        + (f", metrics on {s.metrics_address}" if s.metrics_address else "")
        + (f"; {s.record_write_failures} record write(s) failed, last: {s.last_record_write_error}" if s.record_write_failures else "")
        for s in running
    ]
    down_items = [_down_item(s) for s in down]
    pool_subsections: list[tuple[str | None, list[str], str]] = []
    group_subsections: list[tuple[str | None, list[str], str]] = []
    failures: list[str] = []
    for s in report.supervisors:
        for pool in s.pools:
            items = []
            for pg in pool.placement_groups:
                nodes = " ".join(f"{i}:{short_node(n)}" for i, n in enumerate(pg.bundle_nodes))
                items.append(f"{pg.name} {pg.state} {pg.bundles_placed}/{pg.bundles_total} bundles placed" + (f" [{nodes}]" if nodes else ""))
            pool_subsections.append((f"{s.name}/{pool.name}", items, "placement groups"))
        for g in s.groups:
            source = " (from the cluster: daemon not running)" if g.from_cluster else ""
            items = [
                f"workers: {g.alive} alive, {g.restarting} restarting, {g.failed} failed{source}",
                f"restarts: {g.restarts_in_window} in the last {format_duration(g.restart_window_s)} (budget {g.max_restarts})",
            ]
            if g.standbys_wanted:
                items.append(f"standbys: {g.standbys_ready}/{g.standbys_wanted} ready" + (f", {g.standbys_starting} starting" if g.standbys_starting else ""))
            items += [f"drift: rank {d.rank} {short_node(d.original_node)} -> {short_node(d.current_node)}" for d in g.drifted]
            items += [drain_line(d, now) for d in s.drains if d.group == g.name]
            if g.failure:
                items.append(f"failure: {g.failure}")
            if g.training_state is not None and (wide or g.training_state.diverged_ranks):
                items += state_lines(g.training_state, now)
            if wide and g.ranks:
                items += ["ranks:", *(f"  {line}" for line in _rank_table(g.ranks).splitlines())]
            group_subsections.append((f"{s.name}/{g.name} (pool {g.pool}, world size {g.world_size}, {g.state})", items, "workers"))
        failures += [f"{_when(f.time)} {s.name}/{f.group} rank {f.rank}: {f.reason}: {f.detail}" for f in s.failures]
    demands = [
        f"{_bundle_text(d.bundles)} ({d.strategy}): {d.count}+ pending placement groups" for d in report.demands  # ray's wording
    ]
    stamp = datetime.datetime.fromtimestamp(now).isoformat(sep=" ", timespec="microseconds")
    lines = [f"======== Supervisor status: {stamp} ========"]
    lines += _section("Supervisors", [("Running", sup_items, "running supervisors"), ("Not running", down_items, "stopped supervisors")])
    lines.append("")
    lines += _section("Pools", pool_subsections or [(None, [], "pools")])
    lines.append("")
    lines += _section("Groups", (group_subsections or [(None, [], "groups")]) + [("Recent failures", failures, "failures")])
    lines.append("")
    warnings = [f"{s.name}: {w}" for s in report.supervisors for w in s.warnings]
    lines += _section("Resources", [("Pending Demands", demands, "resource demands"), ("Warnings", warnings, "warnings")])
    return "\n".join(lines)


def state_lines(state: StateRecord, now: float) -> list[str]:
    """What ``status -o wide`` says of a stateful group's state: its kind, newest complete snapshot,
    what the snapshots hold, its replay log, the last rollback, and replicas whose state differs."""
    every = f"every {state.snapshot_every} step(s)" if state.snapshot_every else "only explicit snapshots"
    if state.last_snapshot_step is None:
        last = "no complete snapshot yet"
    else:
        age = f", {format_duration(max(0.0, now - state.last_snapshot_at))} ago" if state.last_snapshot_at is not None else ""
        last = f"last complete snapshot at step {state.last_snapshot_step}{age}"
    held = f"{state.held_bytes / 2**20:.1f}/{state.bound_bytes / 2**20:.0f} MiB in memory"
    lines = [f"state: {state.kind}, {last} ({every}); {held} (steps {state.steps_in_memory or '-'})"]
    if state.steps_on_disk:
        lines.append(f"state on disk: steps {state.steps_on_disk[-3:]}" + (" ..." if len(state.steps_on_disk) > 3 else ""))
    if state.replay_log_calls is not None:
        held = f"{state.replay_log_bytes / 2**20:.1f}/{state.replay_log_bound_bytes / 2**20:.0f} MiB"
        lines.append(f"recovery: replay; replay log: {state.replay_log_calls} call(s) since the newest snapshot, {held}")
    if state.last_rollback_step is not None:
        lines.append(f"last rollback: to step {state.last_rollback_step} from {state.last_rollback_medium}")
    if state.diverged_ranks:
        lines.append(f"state DIVERGED: rank(s) {state.diverged_ranks} differ from their replicas at step {state.digest_step}")
    return lines


def _rank_table(ranks: list[RankRow]) -> str:
    from .table import format_table

    header = ("rank", "state", "node", "original node", "actor id", "pid", "restarts", "last failure")
    return format_table(header, [
        (r.rank, r.state, r.node and short_node(r.node), r.original_node and short_node(r.original_node), r.actor_id, r.pid, r.restarts, r.last_failure)
        for r in ranks
    ])  # fmt: skip


def _down_item(s: SupervisorStatus) -> str:
    seen = f"{format_duration(s.heartbeat_age_s)} ago" + (
        "" if s.measured_by_fence else " by the daemon's clock"
    )
    where = f"pid {s.pid} on {s.host}"
    if s.liveness == Liveness.DETACHED.value:
        return (
            f"{s.name}: detached {seen} ({where}); its pools and workers run on: start the same spec to re-adopt them "
            f"(`supervisor gc` collects it after {format_duration(s.detached_grace_s)}, or with --include-detached)"
        )
    text = f"{s.name}: daemon not running since {_when(s.heartbeat_at)} (last heartbeat {seen}, {where})"
    return text + ("; orphaned: `supervisor gc` removes its pools and actors" if s.liveness == Liveness.ORPHANED.value else "")


def _bundle_text(bundles: list[dict[str, float]]) -> str:
    # `ray status` style: identical bundles folded as "{...} * n".
    counts = Counter(repr(b) for b in bundles)
    return ", ".join(f"{shape} * {n}" for shape, n in counts.items())
