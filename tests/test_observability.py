"""Metrics, dashboards and alerts against real data: a real Prometheus (Debian's 2.42 binary, on
127.0.0.1, 1 s scrapes, temporary storage, stopped by pid) scrapes a real `supervisor start` daemon
whose group serves calls, has a worker SIGKILLed and loses its node (so drift happens), and whose
stateful group's node gets a preemption notice (one rank handed over, one without capacity); then every
panel query and every variable query of every dashboard must return a non-empty success."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from daemon_harness import BIN, ENV, TESTS_DIR, wait_for_record

from supervisor.daemon.record import StateRecord

REPO = TESTS_DIR.parent
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
JOB = "ray-supervisor"
EMPTY_STATE = StateRecord("none")  # a group's state before its record carries one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # Prometheus says why in the body (e.g. a parse error)
        raise AssertionError(f"{exc.code} for {urllib.parse.unquote(url)}: {exc.read().decode()[:500]}") from None


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """A five-node cluster (CPU head, four nodes of 2 GPUs), a daemon with traffic, a kill, a drain notice
    and a node loss, and a Prometheus that scraped it all. Yields (prometheus URL, metrics URL)."""
    assert Path(PROMETHEUS).exists() and Path(PROMTOOL).exists(), "install Debian's prometheus package (CI does)"
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    tmp = tmp_path_factory.mktemp("observability")
    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 0, "include_dashboard": False})
    daemon = prometheus = None
    try:
        nodes = [cluster.add_node(num_cpus=4, num_gpus=2) for _ in range(4)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, namespace="observability-tests")
        metrics_port, prom_port = free_port(), free_port()
        spec = tmp / "obs.toml"
        spec.write_text(
            textwrap.dedent(
                f"""
                [supervisor]
                name = "sv-obs"
                heartbeat_interval_s = 0.5
                [ray]
                python_path = ["{TESTS_DIR}"]
                [pools.p]
                process_on_nodes = [2]
                resource_timeout_s = 120
                [groups.counters]
                pool = "p"
                class = "workers:CounterWorker"
                probe_period_s = 1.0
                in_flight = "retry"
                init_method = "add"
                init_kwargs = {{ n = 0 }}
                [pools.s]
                process_on_nodes = [2]
                capacity_factor = 1.5
                resource_timeout_s = 120
                [groups.trained]
                pool = "s"
                class = "state_workers:StatefulWorker"
                kwargs = {{ size = 256 }}
                init_method = "init_model"
                probe_period_s = 1.0
                state = "sharded"
                snapshot_every = 1
                snapshot_memory_mb = 4.0
                [metrics]
                port = {metrics_port}
                [driver]
                function = "daemon_drivers:traffic"
                [driver.args]
                interval_s = 0.05
                trained = "trained"
                """
            )
        )
        log = open(tmp / "daemon.log", "w")  # noqa: SIM115 - closed below
        daemon = subprocess.Popen(
            [str(BIN / "supervisor"), "start", str(spec), "--address", cluster.address, "--log-json"], stdout=log, stderr=subprocess.STDOUT, env=ENV
        )
        config = tmp / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            f"  - job_name: {JOB}\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        )
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115
        )  # fmt: skip
        prom = f"http://127.0.0.1:{prom_port}"
        record = wait_for_record("sv-obs", daemon, timeout_s=120, log=tmp / "daemon.log")
        time.sleep(3)  # steady traffic, scraped
        # A worker SIGKILLed: a failure detected, a restart, a recovery.
        handle = ray.get_actor(record.groups["counters"].actor_names[1], namespace=record.namespace)
        from supervisor.core.worker.actor_heartbeat import wait_for_beat

        os.kill(wait_for_beat(handle).pid, signal.SIGKILL)
        def explain() -> str:
            ranks = [(r.rank, r.state.value, r.node_id, r.drifted) for r in _record("sv-obs").groups["counters"].ranks]
            return f"ranks {ranks}; daemon exit {daemon.poll()}; its log ends:\n{(tmp / 'daemon.log').read_text()[-6000:]}"

        _wait(lambda: _record("sv-obs").groups["counters"].restarts, "the killed worker's restart", 60, explain)
        # A rank of the sharded group SIGKILLed once it has a snapshot: every stateful group rolls back.
        _wait(lambda: (_record("sv-obs").groups["trained"].training_state or EMPTY_STATE).last_snapshot_step is not None, "a snapshot", 60, explain)
        trained = ray.get_actor(record.groups["trained"].actor_names[0], namespace=record.namespace)
        os.kill(wait_for_beat(trained).pid, signal.SIGKILL)
        _wait(lambda: (_record("sv-obs").groups["trained"].training_state or EMPTY_STATE).last_rollback_step is not None, "the rollback", 60, explain)
        # The sharded group's node gets a preemption notice: one spare bundle elsewhere, so rank 0 is
        # handed over (its live state carried) and rank 1 has no capacity (it stays until the node goes).
        from ray.core.generated import autoscaler_pb2

        trained_node = _record("sv-obs").groups["trained"].ranks[0].node_id
        reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
        gcs = ray._private.worker.global_worker.gcs_client
        assert gcs.drain_node(trained_node, reason, "observability test", int((time.time() + 300) * 1000))[0]
        _wait(lambda: _prom_value(prom, 'sum(supervisor_drains_total{job="ray-supervisor"})') == 2, "both drain outcomes scraped", 60, explain)
        # The pool's node lost: its bundles are re-placed on a spare node, the replacements drift.
        node_of_pool = _record("sv-obs").groups["counters"].ranks[0].node_id
        (victim,) = [n for n in nodes if n.node_id == node_of_pool]
        # Ray before 2.60 may connect this driver to any node on 127.0.0.1, the victim's too: removing
        # that one would end the driver, so it steps off for the removal.
        ray.shutdown()
        cluster.remove_node(victim)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, namespace="observability-tests")
        _wait(lambda: sum(r.drifted for r in _record("sv-obs").groups["counters"].ranks) == 2, "drift of both ranks", 120, explain)
        _wait(lambda: _prom_value(prom, 'sum(supervisor_placement_drift_workers{job="ray-supervisor",group="counters"})') == 2, "drift scraped", 60, explain)
        time.sleep(5)  # traffic on the recovered group, scraped
        yield prom, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        ray.shutdown()
        cluster.shutdown()


def _record(name: str):
    from supervisor.daemon.record import RecordStore

    return RecordStore().get(name)


def _wait(predicate, what: str, timeout_s: float = 60.0, explain=None) -> None:
    """Wait for ``predicate``; on a timeout, ``explain()`` (when given) says what the daemon was doing."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {_explained(explain)}" if explain else ""))
        time.sleep(0.2)


def _explained(explain) -> str:
    try:
        return explain()
    except Exception as exc:  # the explanation must not hide the timeout
        return f"(no explanation: {exc!r})"


def _query(prom: str, expr: str) -> dict:
    return http_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))


def _prom_value(prom: str, expr: str) -> float | None:
    result = _query(prom, expr)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def dashboards() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((REPO / "dashboards").glob("*.json"))]


def substitute(expr: str, instance: str) -> str:
    """Grafana's variables and macros as Grafana would fill them for this test's data."""
    # A regex inside a PromQL string literal: its backslashes are escaped once more.
    values = {"job": JOB, "instance": re.escape(instance).replace("\\", "\\\\"), "group": ".*", "pool": ".*", "method": ".*"}
    expr = expr.replace("$__rate_interval", "30s").replace("$__interval", "5s").replace("$__range", "5m")
    for name, value in values.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def test_every_design_metric_is_exported_and_promtool_accepts_the_exposition(scraped):
    _, metrics_url = scraped
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        exposition = response.read().decode()
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr
    names = set(re.findall(r"^# TYPE (\S+) ", exposition, re.M))
    design = {
        "supervisor_dispatch_duration_seconds", "supervisor_dispatch_failures_total", "supervisor_resource_wait_seconds",
        "supervisor_pool_bundles", "supervisor_init_attempts_total", "supervisor_workers", "supervisor_worker_restarts_total",
        "supervisor_failure_detection_seconds", "supervisor_recovery_seconds", "supervisor_placement_drift_workers",
        "supervisor_placement_drift_events_total", "supervisor_kv_wait_seconds", "supervisor_build_info",
        "supervisor_restarts_in_window", "supervisor_max_restarts",
    }  # fmt: skip
    assert {n.removesuffix("_total") for n in design} <= {n.removesuffix("_total") for n in names}
    assert "_created" not in exposition
    for metric in design:
        assert f"# HELP {metric.removesuffix('_total')}" in exposition or f"# HELP {metric}" in exposition
    # Latency buckets 100 µs .. 60 s; resource wait up to 30 min.
    assert 'supervisor_dispatch_duration_seconds_bucket{group="counters",le="0.0001",method="add",supervisor="sv-obs"}' in exposition
    # Dispatch and recovery up to 30 min (generation calls and engine restarts take minutes).
    assert 'supervisor_dispatch_duration_seconds_bucket{group="counters",le="1800.0",method="add",supervisor="sv-obs"}' in exposition
    # Every series names its supervisor: one Prometheus tells two jobs' groups of the same name apart.
    samples = [line for line in exposition.splitlines() if line and not line.startswith("#")]
    assert samples and all('supervisor="sv-obs"' in line for line in samples), [x for x in samples if 'supervisor="sv-obs"' not in x][:3]
    assert 'le="60.0"' in exposition and 'supervisor_resource_wait_seconds_bucket{le="1800.0",pool="sv-obs.p",supervisor="sv-obs"}' in exposition


def test_the_kill_and_the_drift_are_in_prometheus(scraped):
    prom, _ = scraped
    sel = f'job="{JOB}",group="counters"'
    # One kill, then both ranks lost with their node (the first death may be classified before the
    # GCS marks the node dead, so "died" or "node_lost" for that one).
    # The last replacement may reach Prometheus a scrape later than the drift the fixture waited for.
    _wait(lambda: _prom_value(prom, f"sum(supervisor_worker_restarts_total{{{sel}}})") >= 3, "three restarts scraped", 60)
    assert _prom_value(prom, f'sum(supervisor_worker_restarts_total{{{sel},reason="node_lost"}})') >= 1
    assert _prom_value(prom, f"supervisor_placement_drift_events_total{{{sel}}}") == 2
    assert _prom_value(prom, f"supervisor_failure_detection_seconds_count{{{sel}}}") >= 1  # when the GCS dated the death
    assert _prom_value(prom, f'supervisor_dispatch_failures_total{{{sel},method="fail",reason="raised"}}') >= 1
    assert _prom_value(prom, f'supervisor_workers{{{sel},state="running"}}') == 2
    assert _prom_value(prom, f'supervisor_pool_bundles{{job="{JOB}",pool="sv-obs.p",state="placed"}}') == 2
    # The restart budget: every restart so far is within the (default 600 s) window, of 10 allowed.
    _wait(lambda: _prom_value(prom, f"supervisor_restarts_in_window{{{sel}}}") >= 3, "the budget's use scraped", 60)
    assert _prom_value(prom, f"supervisor_max_restarts{{{sel}}}") == 10
    # The sharded group's rank killed: a rollback from memory, the state loaded from a snapshot, and a
    # snapshot at every step since (at most one step behind at a boundary).
    trained = f'job="{JOB}",group="trained"'
    assert _prom_value(prom, f'sum(supervisor_state_rollbacks_total{{{trained},medium="memory"}})') >= 1
    assert _prom_value(prom, f'supervisor_state_restore_seconds_count{{{trained},kind="snapshot"}}') >= 1
    assert _prom_value(prom, f"supervisor_state_steps_since_snapshot{{{trained}}}") <= 2
    assert 0 < _prom_value(prom, f"supervisor_state_snapshot_bytes{{{trained}}}") <= 4 * 2**20
    # The drain notice: rank 0 handed over (its live state carried, nothing charged), rank 1 without capacity.
    assert _prom_value(prom, f'supervisor_drains_total{{{trained},outcome="handed_over"}}') == 1
    assert _prom_value(prom, f'supervisor_drains_total{{{trained},outcome="no_capacity"}}') == 1
    assert _prom_value(prom, f"supervisor_handover_seconds_count{{{trained}}}") == 1
    assert _prom_value(prom, f'supervisor_state_restore_seconds_count{{{trained},kind="live"}}') == 1


def test_every_dashboard_query_returns_data(scraped):
    prom, metrics_url = scraped
    instance = urllib.parse.urlparse(metrics_url).netloc
    boards = dashboards()
    assert len(boards) >= 4, "dashboards/ holds the generated dashboards"
    proven = 0
    for board in boards:
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                expr = substitute(target["expr"], instance)
                response = _query(prom, expr)
                assert response["status"] == "success", (board["title"], panel["title"], expr)
                assert response["data"]["result"], f"{board['title']} / {panel['title']}: no data for {expr}"
                proven += 1
        for variable in board.get("templating", {}).get("list", []):
            if variable.get("type") != "query":
                continue
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
            assert match, f"variable {variable['name']}: {query}"
            selector, label = substitute(match.group(1), instance), match.group(2)
            values = http_json(f"{prom}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": selector}))
            assert values["status"] == "success" and values["data"], f"variable {variable['name']}: no values for {query}"
            proven += 1
    print(f"{proven} dashboard queries proven against real data")
    assert proven >= 20


def test_the_daemon_answers_probes_and_its_status_without_a_ray_driver(scraped):
    """/healthz, /readyz and /status on the metrics port: read with plain HTTP, no ray.init."""
    _, metrics_url = scraped
    base = metrics_url.removesuffix("/metrics")
    with urllib.request.urlopen(base + "/healthz", timeout=10) as response:
        assert response.status == 200 and response.read().decode().startswith("running: record written ")
    with urllib.request.urlopen(base + "/readyz", timeout=10) as response:
        assert response.status == 200 and response.read().decode() == "running, 2 group(s) running\n"
    with urllib.request.urlopen(base + "/status", timeout=30) as response:
        document = json.loads(response.read())
    assert document["schema_version"] == 1
    (sup,) = document["supervisors"]
    assert sup["name"] == "sv-obs" and sup["liveness"] == "alive" and [g["name"] for g in sup["groups"]] == ["counters", "trained"]
    assert sup["groups"][0]["restarts_in_window"] >= 1  # the kill and the node loss of the fixture


def test_a_trainer_without_the_daemon_serves_the_same_metrics_in_one_call():
    from supervisor.observability import metrics

    server = metrics.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
    assert "# HELP supervisor_dispatch_duration_seconds " in text and "supervisor_build_info{" in text
    assert "python_gc" not in text  # only the supervisor's own registry


def _series_by_family(label: str, of: set[str] | None = None) -> dict[str, set[str]]:
    """Family name -> the values of ``label`` among its exported samples (from the exposition text);
    with ``of``, only those values and only the families that have one of them (series of other tests'
    groups in this process stay out of the comparison)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from supervisor.observability import metrics

    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.EXPOSED).decode()):  # what /metrics shows
        for sample in family.samples:
            if label in sample.labels and (of is None or sample.labels[label] in of):
                found.setdefault(family.name, set()).add(sample.labels[label])
    return found


def test_a_removed_group_or_pool_leaves_no_series_and_the_others_keep_theirs():
    from supervisor.observability import metrics
    from supervisor.observability.hooks import LifecycleHooks, ObservingHooks

    hooks = ObservingHooks()
    for group in ("g", "h"):
        metrics.observe_dispatch(group, "generate", 0.01, metrics.DispatchFailure.RAISED)
        metrics.INIT_ATTEMPTS.labels(group=group, outcome="ok").inc()
        hooks.on_worker_states(group, {"running": 2, "failed": 0})
        hooks.on_group_states(group, {"running": 1, "recovering": 0, "failed": 0, "stopped": 0})
        hooks.on_worker_failed(group, 1, "died", "SIGKILL", detection_s=0.2)
        hooks.on_worker_replaced(group, 1, "died")
        hooks.on_worker_recovered(group, 1, recovery_s=3.0)
        hooks.on_placement_drift(group, 1, "n1", "n2")
        hooks.on_drift_state(group, 1)
        hooks.on_standby_state(group, ready=1, starting=0, wanted=1)
        hooks.on_restart_budget(group, in_window=1, max_restarts=10)
        hooks.on_state_restored(group, "peer", 0.5, (1,))
        hooks.on_drain_outcome(group, 0, "n1", "no_capacity", "no spare bundle")
        hooks.on_rank_handed_over(group, 1, 0.2, "n1", "n2")
    for pool in ("p", "q"):
        hooks.on_resource_wait_done(pool, 1.5, "ready")
        hooks.on_pool_bundles(pool, placed=2, pending=0)
    group_families = {
        "supervisor_dispatch_duration_seconds", "supervisor_dispatch_failures", "supervisor_init_attempts",
        "supervisor_workers", "supervisor_worker_restarts", "supervisor_failure_detection_seconds",
        "supervisor_recovery_seconds", "supervisor_placement_drift_workers", "supervisor_placement_drift_events",
        "supervisor_standby_workers", "supervisor_standbys_wanted", "supervisor_restarts_in_window", "supervisor_max_restarts",
        "supervisor_state_restore_seconds", "supervisor_drains", "supervisor_handover_seconds", "supervisor_group_state",
    }  # fmt: skip
    pool_families = {"supervisor_resource_wait_seconds", "supervisor_pool_bundles"}
    before = _series_by_family("group", of={"g", "h"})
    assert set(before) == group_families and all({"g", "h"} <= v for v in before.values())
    assert all({"p", "q"} <= v for v in _series_by_family("pool", of={"p", "q"}).values())

    LifecycleHooks().on_group_removed("g")  # the no-op hooks leave everything
    assert _series_by_family("group", of={"g", "h"}) == before
    hooks.on_group_removed("g")
    hooks.on_pool_removed("p")
    after = _series_by_family("group", of={"g", "h"})
    assert set(after) == group_families and all("g" not in v and "h" in v for v in after.values())
    pools = _series_by_family("pool", of={"p", "q"})
    assert set(pools) == pool_families and all("p" not in v and "q" in v for v in pools.values())

    # A call of a forgotten group (one supervised again under the same name) starts its series again.
    metrics.observe_dispatch("g", "generate", 0.01, None)
    assert metrics.REGISTRY.get_sample_value(
        "supervisor_dispatch_duration_seconds_count", {"group": "g", "method": "generate"}
    ) == 1.0  # fmt: skip
    metrics.forget_group("g")
    metrics.forget_group("h")
    metrics.forget_pool("q")
    assert not any({"g", "h"} & v for v in _series_by_family("group").values())
    assert not any({"p", "q"} & v for v in _series_by_family("pool").values())
