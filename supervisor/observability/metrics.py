"""Every Prometheus metric of ray-supervisor, defined once (the table in the design notes).

Metrics live in their own registry, :data:`REGISTRY`, so an embedding process exposes exactly these
(and tests read them) without the default process collectors. Names carry the ``supervisor_`` prefix
and base units; labels are bounded (never node or actor ids: those go to logs).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from ..failure import DispatchFailure  # the label values of supervisor_dispatch_failures_total
from .call_histogram import CallHistogram

__all__ = [
    "REGISTRY",
    "LATENCY_BUCKETS",
    "LONG_LATENCY_BUCKETS",
    "RESOURCE_WAIT_BUCKETS",
    "DISPATCH_DURATION",
    "DISPATCH_FAILURES",
    "RESOURCE_WAIT",
    "POOL_BUNDLES",
    "INIT_ATTEMPTS",
    "GROUP_STATE",
    "WORKERS",
    "WORKER_RESTARTS",
    "FAILURE_DETECTION",
    "RECOVERY",
    "PLACEMENT_DRIFT_WORKERS",
    "PLACEMENT_DRIFT_EVENTS",
    "STANDBY_WORKERS",
    "STANDBYS_WANTED",
    "RESTARTS_IN_WINDOW",
    "MAX_RESTARTS",
    "KV_WAIT",
    "KV_WAIT_WAKEUPS",
    "BUILD_INFO",
    "STATE_SNAPSHOT",
    "STATE_RESTORE",
    "restore_kind",
    "STATE_ROLLBACKS",
    "STATE_REPLAYED_CALLS",
    "STATE_REPLAY",
    "STATE_REPLAY_LOG_BYTES",
    "STATE_SNAPSHOT_STEP",
    "STATE_SNAPSHOT_TIME",
    "STATE_SNAPSHOT_SKIPPED",
    "STATE_STEPS_SINCE_SNAPSHOT",
    "STATE_SNAPSHOT_BYTES",
    "STATE_DIVERGED_REPLICAS",
    "DRAINS",
    "HANDOVER",
    "DispatchFailure",
    "observe_dispatch",
    "forget_group",
    "forget_pool",
    "serve",
    "EXPOSED",
    "label_every_series",
]

REGISTRY = CollectorRegistry(auto_describe=True)

# 100 µs to 60 s, 1-2.5-5 per decade.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0,
)
# Calls and recoveries of RLHF groups: a generation call or an inference engine's restart takes minutes.
LONG_LATENCY_BUCKETS = (*LATENCY_BUCKETS, 120.0, 300.0, 600.0, 1200.0, 1800.0)
# Waiting for GPUs can take up to half an hour behind a queue or an autoscaler.
RESOURCE_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 1800.0)

# Observed on every training step's every call: a histogram made for that (call_histogram.py).
#: Every bound group method call (to the return of a blocking call, to the submission of a non-blocking one).
DISPATCH_DURATION = CallHistogram(
    "supervisor_dispatch_duration_seconds", "Duration of a bound group method call, dispatch to collect.",
    ["group", "method"], buckets=LONG_LATENCY_BUCKETS, registry=REGISTRY,
)
#: A call raised. reason: `raised` (the method itself, or bad arguments), `worker_failed` (a rank died or hung in it), `group_failed` (the group is FAILED).
DISPATCH_FAILURES = Counter(
    "supervisor_dispatch_failures_total", "Group method calls that raised, by reason.",
    ["group", "method", "reason"], registry=REGISTRY,
)
#: A pool's placement groups became ready (or the wait failed).
RESOURCE_WAIT = Histogram(
    "supervisor_resource_wait_seconds", "Time a pool waited for its placement groups to be ready.",
    ["pool"], buckets=RESOURCE_WAIT_BUCKETS, registry=REGISTRY,
)
#: At creation, then every heartbeat. state: `placed`, `pending` (a lost node's bundles go `pending` while Ray re-places them).
POOL_BUNDLES = Gauge("supervisor_pool_bundles", "Bundles of a pool by state.", ["pool", "state"], registry=REGISTRY)
#: Each rank's call of the init method. outcome: `ok`, `raised`, `timed_out`, `died`, `abandoned` (a collective init whose peer failed first, not waited for).
INIT_ATTEMPTS = Counter(
    "supervisor_init_attempts_total", "Per-rank calls of a group's init method, by outcome.",
    ["group", "outcome"], registry=REGISTRY,
)
#: With supervisor_workers (when supervision starts, then every change): 1 for the group's state, 0 for the others. state: `running`, `recovering`, `failed`, `stopped`.
GROUP_STATE = Gauge(
    "supervisor_group_state", "A group's state: 1 for the one it is in (a FAILED group gave up restarting).",
    ["group", "state"], registry=REGISTRY,
)
#: Every change; every state is published, zeros included. state: `running`, `failed` (observed failed: waiting for its replacement, a backoff or the budget), `restarting`, `initializing`.
WORKERS = Gauge("supervisor_workers", "Workers of a group by state.", ["group", "state"], registry=REGISTRY)
#: A rank was replaced. reason: `died`, `hung`, `node_lost`, `init_failed`.
WORKER_RESTARTS = Counter(
    "supervisor_worker_restarts_total", "Workers replaced, by reason.", ["group", "reason"], registry=REGISTRY,
)
#: A failure was detected: death (as the GCS recorded it) to detection.
FAILURE_DETECTION = Histogram(
    "supervisor_failure_detection_seconds", "Time from a worker's death to its detection.",
    ["group"], buckets=LATENCY_BUCKETS, registry=REGISTRY,
)
#: A replacement serves calls: death to serving.
RECOVERY = Histogram(
    "supervisor_recovery_seconds", "Time from a worker's death to its replacement serving calls.",
    ["group"], buckets=LONG_LATENCY_BUCKETS, registry=REGISTRY,
)
#: Every change: ranks now on another node than their bundle had at creation.
PLACEMENT_DRIFT_WORKERS = Gauge(
    "supervisor_placement_drift_workers", "Workers running on another node than their bundle had at creation.",
    ["group"], registry=REGISTRY,
)
#: A replacement landed on another node.
PLACEMENT_DRIFT_EVENTS = Counter(
    "supervisor_placement_drift_events_total", "Replacements that landed on another node.", ["group"], registry=REGISTRY,
)
#: Every change of the group's standbys (0 for a group without any). state: `ready`, `starting`.
STANDBY_WORKERS = Gauge(
    "supervisor_standby_workers", "Pre-started standby actors of a group: ready, or starting.",
    ["group", "state"], registry=REGISTRY,
)
#: The standbys the spec asks for, published with supervisor_standby_workers.
STANDBYS_WANTED = Gauge(
    "supervisor_standbys_wanted", "Standby actors a group is configured to keep (its spec's standbys).",
    ["group"], registry=REGISTRY,
)
#: Every supervision pass (so restarts age out): restarts within the group's restart_window_s.
RESTARTS_IN_WINDOW = Gauge(
    "supervisor_restarts_in_window",
    "Restarts of a group within its restart window: what counts against max_restarts.",
    ["group"], registry=REGISTRY,
)
#: With supervisor_restarts_in_window: budget use is the two divided; at 1 the next failure makes the group FAILED.
MAX_RESTARTS = Gauge(
    "supervisor_max_restarts", "A group's restart budget: restarts allowed within its restart window.",
    ["group"], registry=REGISTRY,
)
#: A KV `get`/`wait` returned or timed out, in the process that waited.
KV_WAIT = Histogram(
    "supervisor_kv_wait_seconds", "Time a KV read waited for its key.", buckets=LATENCY_BUCKETS, registry=REGISTRY,
)
#: A blocked KV read woke to look again (a put, or its wait renewed).
KV_WAIT_WAKEUPS = Counter(
    "supervisor_kv_wait_wakeups_total",
    "Times a blocked KV read woke to look for its keys again (a put, or its wait renewed).",
    registry=REGISTRY,
)
#: Each in-memory snapshot of a stateful group, at a step boundary.
STATE_SNAPSHOT = Histogram(
    "supervisor_state_snapshot_seconds",
    "Time a snapshot held its group's ranks: the copy of their state to host memory, and any wait for the previous hand-off (the rest runs beside their next call).",
    ["group"], buckets=LATENCY_BUCKETS, registry=REGISTRY,
)
#: State loaded into ranks. kind: `peer` (copied from a live peer), `snapshot` (a rollback from memory), `disk`.
STATE_RESTORE = Histogram(
    "supervisor_state_restore_seconds", "Time to load restored state into a group's ranks, by source.",
    ["group", "kind"], buckets=LONG_LATENCY_BUCKETS, registry=REGISTRY,
)


def restore_kind(medium: str) -> str:
    """:data:`STATE_RESTORE`'s ``kind`` of a load from a snapshot's ``medium`` ("memory" or "disk"); a
    copy from a live peer is ``"peer"``."""
    return "disk" if medium == "disk" else "snapshot"


#: A failure rolled the job's stateful groups back. medium: `memory`, `disk`.
STATE_ROLLBACKS = Counter(
    "supervisor_state_rollbacks_total", "Rollbacks a group's failure caused (every stateful group of the job goes back), by source.",
    ["group", "medium"], registry=REGISTRY,
)
#: Each replay, by the number of calls it ran again (a group with recovery = "replay" that lost state).
STATE_REPLAYED_CALLS = Counter(
    "supervisor_state_replayed_calls_total",
    "Mutating calls a group ran again after restoring its own snapshot (a recovery the driver never saw).",
    ["group"], registry=REGISTRY,
)
#: Each replay, once its last call returned.
STATE_REPLAY = Histogram(
    "supervisor_state_replay_seconds", "Time a group took to replay its logged calls after a restore.",
    ["group"], buckets=LONG_LATENCY_BUCKETS, registry=REGISTRY,
)
#: Each logged call and each snapshot that empties the log.
STATE_REPLAY_LOG_BYTES = Gauge(
    "supervisor_state_replay_log_bytes", "Bytes of arguments a group's replay log holds (calls since its newest snapshot).",
    ["group"], registry=REGISTRY,
)
#: Each completed snapshot.
STATE_SNAPSHOT_STEP = Gauge(
    "supervisor_state_snapshot_step", "Step of the newest snapshot a group has taken.", ["group"], registry=REGISTRY,
)
#: Each completed snapshot.
STATE_SNAPSHOT_TIME = Gauge(
    "supervisor_state_snapshot_timestamp_seconds", "Unix time of the newest snapshot a group has taken.", ["group"], registry=REGISTRY,
)
#: A snapshot was skipped (it would pass snapshot_memory_mb).
STATE_SNAPSHOT_SKIPPED = Counter(
    "supervisor_state_snapshots_skipped_total", "Snapshots not taken because they would pass the group's snapshot_memory_mb.",
    ["group"], registry=REGISTRY,
)
#: Every step boundary of the driver.
STATE_STEPS_SINCE_SNAPSHOT = Gauge(
    "supervisor_state_steps_since_snapshot",
    "Steps since a group's newest complete snapshot, at the driver's last step boundary: what a rollback now would replay.",
    ["group"], registry=REGISTRY,
)
#: Every step boundary of the driver.
STATE_SNAPSHOT_BYTES = Gauge(
    "supervisor_state_snapshot_bytes", "Memory a group's kept snapshots take in the keepers (both copies of every shard).",
    ["group"], registry=REGISTRY,
)
#: Every step boundary of a replicated group (from the ranks' state digests).
STATE_DIVERGED_REPLICAS = Gauge(
    "supervisor_state_diverged_replicas", "Ranks of a replicated group whose state digest differs from the other replicas'.",
    ["group"], registry=REGISTRY,
)
#: A rank on a draining node was handed over or not. outcome: `handed_over`, `no_capacity`, `deadline_too_short`, `ignored`, `aborted`.
DRAINS = Counter(
    "supervisor_drains_total", "Ranks on a draining node (a preemption or maintenance notice), by what became of them.",
    ["group", "outcome"], registry=REGISTRY,
)
#: A rank was handed over to its successor.
HANDOVER = Histogram(
    "supervisor_handover_seconds", "Time from a hand-over's start at a call boundary to the successor serving (calls wait meanwhile).",
    ["group"], buckets=LONG_LATENCY_BUCKETS, registry=REGISTRY,
)
#: When serving starts.
BUILD_INFO = Gauge("supervisor_build_info", "Build information (always 1).", ["version", "ray_version"], registry=REGISTRY)


def observe_dispatch(group: str, method: str, seconds: float, failure: DispatchFailure | None) -> None:
    """Record one bound group method call."""
    DISPATCH_DURATION.observe(seconds, group, method)
    if failure is not None:
        DISPATCH_FAILURES.labels(group=group, method=method, reason=failure.value).inc()


def forget_group(group: str) -> None:
    """Stop exporting every series of ``group``: each label set whose ``group`` label is ``group``, in
    every metric that has that label.

    For a group that is gone for good (its supervisor stopped, the daemon tore it down): label sets
    otherwise stay exported forever, and over a long run of short-lived groups they pile up. Anything
    recorded for the group afterwards starts its series again from zero.
    """
    _forget("group", group)


def forget_pool(pool: str) -> None:
    """Stop exporting every series of ``pool`` (as :func:`forget_group`, for the ``pool`` label)."""
    _forget("pool", pool)


def _forget(label: str, value: str) -> None:
    # The metrics are found from the definitions above rather than listed, so one added later with
    # the label is forgotten too.
    for metric in list(globals().values()):
        if isinstance(metric, MetricWrapperBase | CallHistogram) and label in metric._labelnames:
            metric.remove_by_labels({label: value})


def serve(
    port: int = 9400, host: str = "127.0.0.1", certfile: str | None = None, keyfile: str | None = None, routes: Any = None
) -> Any:
    """Serve these metrics on ``http://host:port/metrics`` from a background thread (one call, for a
    trainer that drives groups without the daemon). ``port=0`` picks a free port. With ``certfile``
    and ``keyfile`` (PEM) it serves HTTPS only, for scrapers on other hosts. ``routes`` (path ->
    a callable answering ``(status, content type, body)``) are served beside them (the daemon's
    ``/healthz``, ``/readyz``, ``/status``).

    Returns:
        The HTTP server: ``server.server_port`` is the port, ``server.shutdown()`` stops it.
    """
    import ray
    from prometheus_client import make_wsgi_app

    from ..version import __version__
    from .exporter import routed, serve_http, serve_https

    BUILD_INFO.labels(version=__version__, ray_version=ray.__version__).set(1)
    app = routed(make_wsgi_app(EXPOSED), routes or {})
    if certfile and keyfile:
        return serve_https(app, host, port, certfile, keyfile)
    return serve_http(app, host, port)


def label_every_series(supervisor: str) -> None:
    """From now on every exported series carries ``supervisor=<name>`` (the daemon's), so one
    Prometheus can tell two jobs' groups of the same name apart."""
    _EXPORT_LABELS["supervisor"] = supervisor


_EXPORT_LABELS: dict[str, str] = {}


class _WithoutCreated:
    """What ``/metrics`` shows: :data:`REGISTRY` without its ``_created`` series, which double the series
    count and no dashboard uses (prometheus-client's ``disable_created_metrics()`` would do it for
    every library's metrics in the process; this leaves theirs as they are), with the labels of
    :func:`label_every_series` added."""

    def collect(self) -> Any:
        extra = dict(_EXPORT_LABELS)
        for family in REGISTRY.collect():
            family.samples = [
                s._replace(labels={**s.labels, **extra}) if extra else s for s in family.samples if not s.name.endswith("_created")
            ]
            yield family


# A registry of its own (not the collector alone): prometheus-client's `?name[]=` filter needs one.
EXPOSED = CollectorRegistry(auto_describe=True)  # its names read once, from the metrics defined above
EXPOSED.register(_WithoutCreated())
