"""Generate the Grafana dashboards of ray-supervisor's Prometheus metrics.

The dashboards are built with grafana-foundation-sdk (pinned in pyproject.toml, for Grafana 11.6) and
written as ``dashboards/<uid>.json``. The JSON files are committed so they can be provisioned or
imported as they are; this module is their source of truth::

    python -m dashboards.generate           # rewrite the JSON files
    python -m dashboards.generate --check   # exit 1 if a committed file differs from the code

Conventions (checked by tests/test_dashboards.py): one ``datasource`` variable that every panel and
query uses, ``job``/``instance`` variables that every query selects on, ``[$__rate_interval]`` for
every rate, counters only inside ``rate()``/``increase()``, aggregations that keep the ``supervisor``
label (two jobs' groups of one name stay apart), and a title, description and unit on every panel. No query filters series by value, so every panel shows data once a supervisor has served traffic.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

__all__ = ["TAG", "build_all", "render", "main"]

OUT_DIR = Path(__file__).resolve().parent
TAG = "ray-supervisor"

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
JOB_QUERY = "label_values(supervisor_build_info, job)"
INSTANCE_QUERY = 'label_values(supervisor_build_info{job=~"$job"}, instance)'
GROUP_QUERY = 'label_values(supervisor_workers{job=~"$job", instance=~"$instance"}, group)'

HISTOGRAM_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
# A bar's interval spans at least 4 scrapes of ops/prometheus.yml's 15 s, so increase() has samples to
# compare; Grafana widens it with the time range.
BAR_MIN_INTERVAL = "1m"
DISTRIBUTION_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))


# --- PromQL -----------------------------------------------------------------------------------------


def sel(metric: str, *matchers: str, group: bool = False) -> str:
    """A selector of ``metric`` on the dashboard's job and instance (and group) plus ``matchers``."""
    parts = ['job=~"$job"', 'instance=~"$instance"']
    if group:
        parts.append('group=~"$group"')
    parts.extend(matchers)
    return f"{metric}{{{', '.join(parts)}}}"


def rate(metric: str, *matchers: str, group: bool = False, fn: str = "rate") -> str:
    return f"{fn}({sel(metric, *matchers, group=group)}[$__rate_interval])"


def per_interval(metric: str, *matchers: str, group: bool = False) -> str:
    """A counter's increase over each bar's own interval: bars side by side, not overlapping windows."""
    return f"increase({sel(metric, *matchers, group=group)}[$__interval])"


def sum_by(labels: str, expr: str) -> str:
    return f"sum by ({labels}) ({expr})"


def quantile(q: float, histogram: str, by: str, *, group: bool) -> str:
    return f"histogram_quantile({q}, sum by (le, supervisor, {by}) ({rate(histogram + '_bucket', group=group)}))"


# --- building blocks --------------------------------------------------------------------------------


def target(expr: str, legend: str, ref_id: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id).datasource(DATASOURCE)
    return query.instant() if instant else query.range()


def quantile_targets(histogram: str, by: str, legend: str, quantiles, *, group: bool) -> list:
    return [
        target(quantile(q, histogram, by, group=group), f"{legend} {name}", chr(ord("A") + i))
        for i, (name, q) in enumerate(quantiles)
    ]


def timeseries_panel(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    targets: list,
    *,
    w: int = 12,
    h: int = 8,
    bars: bool = False,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(targets)
        .unit(unit)
        .min(0)
        .span(w)
        .height(h)
        .legend(cb.VizLegendOptions().show_legend(True).display_mode(cm.LegendDisplayMode.LIST)
                .placement(cm.LegendPlacement.BOTTOM))
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if bars:  # each bar an increase over $__interval, at least BAR_MIN_INTERVAL (several scrapes)
        return panel.interval(BAR_MIN_INTERVAL).draw_style(cm.GraphDrawStyle.BARS).fill_opacity(60).line_width(1)
    return panel.draw_style(cm.GraphDrawStyle.LINE).fill_opacity(10).line_width(1).show_points(
        cm.VisibilityMode.NEVER
    )


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=value, color=color) for value, color in steps]
    )


def stat_panel(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    targets: list,
    *,
    w: int,
    h: int = 4,
    text_mode: cm.BigValueTextMode = cm.BigValueTextMode.VALUE_AND_NAME,
    color_mode: cm.BigValueColorMode = cm.BigValueColorMode.BACKGROUND,
) -> stat.Panel:
    return (
        stat.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(targets)
        .unit(unit)
        .span(w)
        .height(h)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .text_mode(text_mode)
        .color_mode(color_mode)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )


def base_dashboard(uid: str, title: str, description: str) -> db.Dashboard:
    """A dashboard with the shared settings, links and the datasource/job/instance/group variables."""
    all_option = dm.VariableOption(selected=True, text="All", value="$__all")

    def query_variable(name: str, label: str, query: str) -> db.QueryVariable:
        return (
            db.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .current(all_option)
        )

    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        # An explicit empty list: Grafana adds its built-in annotation query to it.
        .annotations([])
        .link(
            db.DashboardLink("Ray Supervisor")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(query_variable("job", "Job", JOB_QUERY))
        .with_variable(query_variable("instance", "Instance", INSTANCE_QUERY))
        .with_variable(query_variable("group", "Group", GROUP_QUERY))
    )


# --- the dashboards ---------------------------------------------------------------------------------


def overview() -> db.Dashboard:
    return (
        base_dashboard(
            "ray-supervisor-overview",
            "Ray Supervisor / Overview",
            "Health of ray-supervisor: scrape status, build, workers per state, restarts and init attempts.",
        )
        .with_panel(
            stat_panel(
                1,
                "Supervisor up",
                "Whether Prometheus scrapes each supervisor's metrics endpoint (UP) or not (DOWN). "
                "A supervisor that is down publishes nothing: look here first when other panels are empty.",
                "none",
                [target(sel("up"), "{{instance}}", instant=True)],
                w=6,
            )
            .mappings(
                [
                    dm.ValueMap(
                        options={
                            "0": dm.ValueMappingResult(text="DOWN", color="red", index=0),
                            "1": dm.ValueMappingResult(text="UP", color="green", index=1),
                        }
                    )
                ]
            )
            .thresholds(thresholds((None, "red"), (1, "green")))
        )
        .with_panel(
            stat_panel(
                2,
                "Build",
                "Version of ray-supervisor and of Ray that each supervisor runs. Two versions side by side "
                "mean a rollout is in progress or an old supervisor is still running.",
                "none",
                [
                    target(
                        sel("supervisor_build_info"),
                        "{{instance}}: {{version}} (Ray {{ray_version}})",
                        instant=True,
                    )
                ],
                w=10,
                text_mode=cm.BigValueTextMode.NAME,
                color_mode=cm.BigValueColorMode.NONE,
            )
        )
        .with_panel(
            stat_panel(
                3,
                "Failed groups",
                "1 for a group that is FAILED now: its restart budget is exhausted or a replacement could not "
                "initialise, and its daemon tears the job down. Anything above 0 needs a person. (A rank waiting "
                "out a restart backoff is a failed worker while its group recovers: see the Recovery dashboard.)",
                "short",
                [
                    target(
                        sum_by("supervisor, group", sel("supervisor_group_state", 'state="failed"', group=True)),
                        "{{supervisor}}/{{group}}",
                        instant=True,
                    )
                ],
                w=8,
            ).thresholds(thresholds((None, "green"), (1, "red")))
        )
        .with_panel(
            timeseries_panel(
                4,
                "Workers by group and state",
                "Workers of each group per state (running, restarting, initializing, failed). Every state is always "
                "published, so a healthy group shows its size as running and 0 elsewhere.",
                "short",
                [target(f"sum by (supervisor, group, state) ({sel('supervisor_workers', group=True)})", "{{supervisor}}/{{group}} {{state}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                5,
                "Worker restarts by group and reason",
                "Rate at which workers are replaced, by group and reason (died, hung, node_lost, "
                "init_failed). A steady rate means workers keep failing; see the Recovery dashboard.",
                "ops",
                [
                    target(
                        f"sum by (supervisor, group, reason) ({rate('supervisor_worker_restarts_total', group=True)})",
                        "{{supervisor}}/{{group}} {{reason}}",
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                6,
                "Init attempts by group and outcome",
                "Rate of per-rank calls of each group's init method, by outcome (ok, raised, timed_out, "
                "died, abandoned: a collective init whose peer failed first). Anything but ok during a start "
                "or a restart points at the init method or the node.",
                "ops",
                [
                    target(
                        f"sum by (supervisor, group, outcome) ({rate('supervisor_init_attempts_total', group=True)})",
                        "{{supervisor}}/{{group}} {{outcome}}",
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                7,
                "Dispatch calls by group",
                "Rate of group method calls, per group: the traffic the supervised workers serve. "
                "Latency and failures are on the Dispatch dashboard.",
                "reqps",
                [
                    target(
                        f"sum by (supervisor, group) ({rate('supervisor_dispatch_duration_seconds_count', group=True)})",
                        "{{supervisor}}/{{group}}",
                    )
                ],
            )
        )
    )


def dispatch() -> db.Dashboard:
    return (
        base_dashboard(
            "ray-supervisor-dispatch",
            "Ray Supervisor / Dispatch",
            "Group method calls: latency quantiles, call rate, failures by reason and failure ratio.",
        )
        .with_panel(
            timeseries_panel(
                1,
                "Dispatch latency by group and method (p50, p95, p99)",
                "Time from dispatching a group method call to collecting its results, as p50, p95 and p99 "
                "per group and method. A p99 far above p50 means a slow rank holds up whole calls.",
                "s",
                quantile_targets(
                    "supervisor_dispatch_duration_seconds",
                    "group, method",
                    "{{supervisor}}/{{group}}.{{method}}",
                    HISTOGRAM_QUANTILES,
                    group=True,
                ),
                w=24,
                h=9,
            )
        )
        .with_panel(
            timeseries_panel(
                2,
                "Calls by group and method",
                "Rate of group method calls, per group and method, failed calls included.",
                "reqps",
                [
                    target(
                        f"sum by (supervisor, group, method) ({rate('supervisor_dispatch_duration_seconds_count', group=True)})",
                        "{{supervisor}}/{{group}}.{{method}}",
                    )
                ],
                w=8,
            )
        )
        .with_panel(
            timeseries_panel(
                3,
                "Failures by group and reason",
                "Rate of group method calls that failed, by reason: raised (the method raised, or the "
                "arguments did not fit its dispatch mode), worker_failed (a rank died or hung during the "
                "call) or group_failed (the group is failed).",
                "ops",
                [
                    target(
                        f"sum by (supervisor, group, reason) ({rate('supervisor_dispatch_failures_total', group=True)})",
                        "{{supervisor}}/{{group}} {{reason}}",
                    )
                ],
                w=8,
            )
        )
        .with_panel(
            timeseries_panel(
                4,
                "Failure ratio by group and method",
                "Share of group method calls that failed, any reason, per group and method (every call, "
                "failed or not, is timed, so the duration histogram's count is the number of calls).",
                "percentunit",
                [
                    target(
                        f"sum by (supervisor, group, method) ({rate('supervisor_dispatch_failures_total', group=True)})"
                        " / "
                        f"sum by (supervisor, group, method) ({rate('supervisor_dispatch_duration_seconds_count', group=True)})",
                        "{{supervisor}}/{{group}}.{{method}}",
                    )
                ],
                w=8,
            )
        )
        .with_panel(
            timeseries_panel(
                5,
                "KV store reads waiting for their keys (p50, p95, max)",
                "How long reads of the supervisor's KV store (ctx.kv.get/get_many with a wait) waited for "
                "their keys: the driver's and the workers' hand-offs. A growing wait means a writer is late.",
                "s",
                quantile_targets("supervisor_kv_wait_seconds", "job", "{{supervisor}}", DISTRIBUTION_QUANTILES, group=False),
            )
        )
        .with_panel(
            timeseries_panel(
                6,
                "KV store waits and wake-ups",
                "Rate of finished KV waits, and of the times a blocked read woke to look again (a put, or its "
                "long poll renewed). Many wake-ups per wait: readers poll keys that keep changing.",
                "ops",
                [
                    target(f"sum by (supervisor) ({rate('supervisor_kv_wait_seconds_count')})", "{{supervisor}} waits"),
                    target(f"sum by (supervisor) ({rate('supervisor_kv_wait_wakeups_total')})", "{{supervisor}} wake-ups", "B"),
                ],
            )
        )
    )


def placement() -> db.Dashboard:
    return (
        base_dashboard(
            "ray-supervisor-placement",
            "Ray Supervisor / Placement",
            "Where workers run: placement drift after replacements, pool bundles and the wait for resources.",
        )
        .with_panel(
            timeseries_panel(
                1,
                "Drifted workers by group",
                "Workers of each group that run on another node than their bundle had when the pool was "
                "created. Drift after a node loss is expected; it matters for jobs that rely on locality.",
                "short",
                [target(f"sum by (supervisor, group) ({sel('supervisor_placement_drift_workers', group=True)})", "{{supervisor}}/{{group}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                2,
                "Placement drift events by group",
                "Replacements that landed on another node, per group, counted per bar's interval.",
                "short",
                [
                    target(
                        "sum by (supervisor, group) "
                        f"({per_interval('supervisor_placement_drift_events_total', group=True)})",
                        "{{supervisor}}/{{group}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                3,
                "Bundles by pool and state",
                "Placement group bundles of each resource pool, placed or pending. Pending bundles mean the "
                "cluster lacks the resources the pool asks for (see the resource wait panels).",
                "short",
                [target(f"sum by (supervisor, pool, state) ({sel('supervisor_pool_bundles')})", "{{supervisor}}/{{pool}} {{state}}")],
                w=8,
            )
        )
        .with_panel(
            timeseries_panel(
                4,
                "Resource wait by pool (p95)",
                "p95 of the time a pool waited for its placement groups to be ready, per pool. Long waits "
                "come from a queue, an autoscaler or resources the cluster does not have.",
                "s",
                [target(quantile(0.95, "supervisor_resource_wait_seconds", "pool", group=False), "{{supervisor}}/{{pool}} p95")],
                w=8,
            )
        )
        .with_panel(
            timeseries_panel(
                5,
                "Resource waits by pool",
                "Rate of finished waits for placement groups (ready, timeout, infeasible or error), per pool.",
                "ops",
                [target(f"sum by (supervisor, pool) ({rate('supervisor_resource_wait_seconds_count')})", "{{supervisor}}/{{pool}}")],
                w=8,
            )
        )
    )


def recovery() -> db.Dashboard:
    return (
        base_dashboard(
            "ray-supervisor-recovery",
            "Ray Supervisor / Recovery",
            "How fast failed workers are detected and replaced, and why they are restarted.",
        )
        .with_panel(
            timeseries_panel(
                1,
                "Failure detection time by group (p50, p95, max)",
                "Time from a worker's death to its detection, per group, as p50, p95 and max (the upper "
                "bound of the highest bucket with observations). Gaps mean no failures in the interval.",
                "s",
                quantile_targets(
                    "supervisor_failure_detection_seconds", "group", "{{supervisor}}/{{group}}", DISTRIBUTION_QUANTILES, group=True
                ),
            )
        )
        .with_panel(
            timeseries_panel(
                2,
                "Recovery time by group (p50, p95, max)",
                "Time from a worker's death to its replacement serving calls, per group, as p50, p95 and "
                "max (the upper bound of the highest bucket with observations).",
                "s",
                quantile_targets(
                    "supervisor_recovery_seconds", "group", "{{supervisor}}/{{group}}", DISTRIBUTION_QUANTILES, group=True
                ),
            )
        )
        .with_panel(
            timeseries_panel(
                3,
                "Worker restarts by group and reason",
                "Workers replaced per bar's interval, by group and reason (died, hung, node_lost, init_failed).",
                "short",
                [
                    target(
                        "sum by (supervisor, group, reason) "
                        f"({per_interval('supervisor_worker_restarts_total', group=True)})",
                        "{{supervisor}}/{{group}} {{reason}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                4,
                "Workers restarting, initializing or failed by group",
                "Workers of each group being replaced (restarting: placed and started; initializing: the new "
                "rendezvous and init method) or given up on (failed). Both return to 0 within the recovery time; "
                "failed stays until the group is restarted.",
                "short",
                [
                    target(
                        sum_by("supervisor, group, state", sel("supervisor_workers", 'state=~"restarting|initializing|failed"', group=True)),
                        "{{supervisor}}/{{group}} {{state}}",
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                5,
                "Restart budget used by group",
                "Restarts within each group's restart window as a share of its max_restarts. At 100% the next "
                "failure makes the group FAILED: the daemon tears the job down and exits 1. Restarts leave the "
                "share as they age out of the window.",
                "percentunit",
                [
                    target(
                        f"sum by (supervisor, group) ({sel('supervisor_restarts_in_window', group=True)})"
                        " / "
                        f"sum by (supervisor, group) ({sel('supervisor_max_restarts', group=True)})",
                        "{{supervisor}}/{{group}}",
                    )
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                6,
                "Standbys by group: ready, starting and wanted",
                "Pre-started standby actors of each group (they take over failed ranks without a cold "
                "start): ready, still starting, and how many the spec wants. Ready below wanted for long "
                "means the pool lacks free spare bundles, or standbys keep failing (see the standby_failed "
                "log events).",
                "short",
                [
                    target(sum_by("supervisor, group, state", sel("supervisor_standby_workers", group=True)), "{{supervisor}}/{{group}} {{state}}"),
                    target(sum_by("supervisor, group", sel("supervisor_standbys_wanted", group=True)), "{{supervisor}}/{{group}} wanted", "B"),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                7,
                "Stateful groups: steps since the newest complete snapshot",
                "For each group with replicated or sharded state, the steps between the driver's last step boundary "
                "and the newest snapshot complete on every rank: what a rollback would replay if a rank died now. "
                "With snapshot_every = 1 it stays at 1; a rising line means snapshots are skipped (snapshot_memory_mb) "
                "or failing (see the SnapshotSkipped events).",
                "short",
                [target(sum_by("supervisor, group", sel("supervisor_state_steps_since_snapshot", group=True)), "{{supervisor}}/{{group}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                8,
                "Stateful groups: snapshot pause and restore time (p50, p95, max)",
                "Snapshot: how long a snapshot held the group's ranks (the copy of their state to host memory; the "
                "hand-off to the keepers runs beside their next call). Restore: the time to load state into the "
                "ranks after a failure, from a peer, a snapshot or the disk.",
                "s",
                quantile_targets("supervisor_state_snapshot_seconds", "group", "{{supervisor}}/{{group}} snapshot", DISTRIBUTION_QUANTILES, group=True)
                + [
                    target(quantile(0.95, "supervisor_state_restore_seconds", "group, kind", group=True), "{{supervisor}}/{{group}} restore from {{kind}} p95", "D"),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                9,
                "Stateful groups: rollbacks by source",
                "Rollbacks per bar's interval, by the group whose failure caused them and where the state came from "
                "(memory: the snapshot keepers; disk: torch.distributed.checkpoint, when both memory copies were lost). "
                "Every stateful group of the job goes back with each one, and the driver replays from its step.",
                "short",
                [
                    target(
                        f"sum by (supervisor, group, medium) ({per_interval('supervisor_state_rollbacks_total', group=True)})",
                        "{{supervisor}}/{{group}} from {{medium}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                10,
                "Stateful groups: snapshot memory and diverged replicas",
                "Memory the kept snapshots take in the keeper actors (both copies of every shard, two complete "
                "snapshots), bounded by each group's snapshot_memory_mb; and replicas of a replicated group whose "
                "state digest differs from the others' (anything but 0 means the replicas train different models).",
                "bytes",
                [
                    target(sum_by("supervisor, group", sel("supervisor_state_snapshot_bytes", group=True)), "{{supervisor}}/{{group}} held"),
                    target(sum_by("supervisor, group", sel("supervisor_state_diverged_replicas", group=True)), "{{supervisor}}/{{group}} diverged replicas", "B"),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                11,
                "Drain notices by group and outcome",
                "Ranks on nodes being drained (a preemption or maintenance notice), per bar's interval, by what became "
                "of them: handed_over (the successor serves; nothing charged, nothing rolled back), no_capacity (no "
                "standby or free spare bundle off the draining nodes), deadline_too_short (less notice than "
                "drain_min_notice_s), ignored (drain_hand_over = false), aborted (the successor failed; tried again). "
                "Anything but handed_over is recovered as a failure when the node goes.",
                "short",
                [
                    target(
                        f"sum by (supervisor, group, outcome) ({per_interval('supervisor_drains_total', group=True)})",
                        "{{supervisor}}/{{group}} {{outcome}}",
                    )
                ],
                bars=True,
            )
        )
        .with_panel(
            timeseries_panel(
                12,
                "Hand-over time by group (p50, p95, max)",
                "Time from a hand-over's start at a call boundary to the successor serving: how long the group's "
                "calls waited for it (the successor was started and warmed before, while the old rank served).",
                "s",
                quantile_targets("supervisor_handover_seconds", "group", "{{supervisor}}/{{group}}", DISTRIBUTION_QUANTILES, group=True),
            )
        )
    )


DASHBOARDS = (overview, dispatch, placement, recovery)


# --- output -----------------------------------------------------------------------------------------


def to_dict(dashboard: db.Dashboard) -> dict:
    return json.loads(json.dumps(dashboard.build(), cls=JSONEncoder))


def build_all() -> dict[str, dict]:
    """Every dashboard as Grafana JSON, by uid."""
    built = {}
    for make in DASHBOARDS:
        data = to_dict(make())
        built[data["uid"]] = data
    return built


def render(data: dict) -> str:
    """The committed form of a dashboard: sorted keys, indent 2, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed JSON differs from the code")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory of the JSON files (default: %(default)s)")
    args = parser.parse_args(argv)

    expected = {args.out / f"{uid}.json": render(data) for uid, data in build_all().items()}
    if args.check:
        problems = []
        for path, text in sorted(expected.items()):
            if not path.exists():
                problems.append(f"{path}: missing")
            elif path.read_text(encoding="utf-8") != text:
                problems.append(f"{path}: differs from what the code generates")
        stale = sorted(set(args.out.glob("ray-supervisor-*.json")) - set(expected))
        problems.extend(f"{path}: no longer generated" for path in stale)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m dashboards.generate", file=sys.stderr)
            return 1
        print(f"{len(expected)} dashboards up to date")
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    for path, text in sorted(expected.items()):
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
