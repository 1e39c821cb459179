"""A GCS restart under a running job: Ray's GCS fault tolerance on an external Redis (Debian's
redis-server, on 127.0.0.1, started and stopped by pid here), the head's GCS process killed and started
again under a `supervisor start` daemon; and the daemon's one-line exit when the GCS stays away past
``gcs_outage_grace_s``. The outage clock itself is pure and stepped with a fake clock."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from daemon_harness import BIN, ENV, TESTS_DIR, log_events, wait_for_record

from supervisor.core.group import gcs_outages
from supervisor.daemon.gcs_watch import GcsOutage, GcsState, GcsWatch

# -- the outage clock, pure -----------------------------------------------------------------------


def test_an_outage_is_timed_from_its_first_failed_ping_and_ends_at_the_first_answer():
    outage = GcsOutage(grace_s=10.0)
    assert outage.observe(True, 0.0) is GcsState.REACHABLE
    assert outage.observe(False, 1.0) is GcsState.AWAY and outage.lasted(4.0) == 3.0
    assert outage.observe(False, 11.0) is GcsState.AWAY  # 10 s: not past the grace yet
    assert outage.observe(True, 12.0) is GcsState.BACK and outage.last_outage_s == 11.0
    assert outage.observe(True, 13.0) is GcsState.REACHABLE
    assert outage.observe(False, 20.0) is GcsState.AWAY
    assert outage.observe(False, 30.5) is GcsState.EXCEEDED


def test_the_process_wide_outage_record_counts_outages_that_ended():
    ended, _ = gcs_outages.state()
    gcs_outages.note(False)
    assert gcs_outages.state() == (ended, True)  # detection judges nobody while the GCS is away
    gcs_outages.note(True)
    assert gcs_outages.state() == (ended + 1, False)  # and restarts every rank's silence from here


def test_the_watch_reports_each_outage_and_ends_once_past_the_grace_with_one_line():
    exceeded, back, noted = [], [], []
    watch = GcsWatch("127.0.0.1:6379", 5.0, exceeded.append, back.append, ping=lambda: True, note=noted.append)
    assert not watch.step(False, 0.0) and not watch.step(False, 3.0)
    assert not watch.step(True, 4.0) and back == [4.0]
    assert not watch.step(False, 10.0) and not watch.step(False, 15.0)
    assert watch.step(False, 15.5)
    assert noted == [False, False, True, False, False, False]  # what detection is told, ping by ping
    (line,) = exceeded
    assert line.startswith("the GCS at 127.0.0.1:6379 has been unreachable for 6s (gcs_outage_grace_s = 5)") and "\n" not in line


# -- on a real cluster with GCS fault tolerance ------------------------------------------------------
OUTAGE_S = 3.0  # a GCS restart takes about this long on a real head (a process start and a Redis reload)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ft_cluster(tmp_path_factory):
    """A head whose GCS keeps its tables in a Redis on 127.0.0.1, and a 2-GPU node."""
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    assert shutil.which("redis-server"), "install Debian's redis-server package (CI does: make tools)"
    tmp = tmp_path_factory.mktemp("gcs-ft")
    port = _free_port()
    redis = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp)],
        stdout=open(tmp / "redis.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115 - the process owns it
    )  # fmt: skip
    cluster = None
    saved = {k: os.environ.get(k) for k in ("RAY_REDIS_ADDRESS", "RAY_external_storage_namespace")}
    try:
        _wait(lambda: _answers(port), 10, "redis-server to listen")
        # Read by the head's GCS when it starts, and again when it is started again: kept for the module.
        os.environ["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{port}"
        os.environ["RAY_external_storage_namespace"] = f"gcs-ft-{port}"
        cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 0, "include_dashboard": False})
        cluster.add_node(num_cpus=4, num_gpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, namespace="gcs-ft-tests")
        cluster.tmp = tmp
        yield cluster
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        redis.terminate()
        redis.wait(30)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.1)


def _restart_gcs(cluster, outage_s: float) -> None:
    cluster.head_node.kill_gcs_server()
    time.sleep(outage_s)
    cluster.head_node.start_gcs_server()


def _spec(tmp: Path, name: str, grace_s: float, metrics_port: int) -> Path:
    spec = tmp / f"{name}.toml"
    spec.write_text(
        textwrap.dedent(
            f"""
            [supervisor]
            name = "{name}"
            heartbeat_interval_s = 0.5
            gcs_outage_grace_s = {grace_s}
            [ray]
            python_path = ["{TESTS_DIR}"]
            [pools.p]
            process_on_nodes = [1]
            [groups.counters]
            pool = "p"
            class = "workers:CounterWorker"
            probe_period_s = 1.0
            in_flight = "retry"
            init_method = "add"
            init_kwargs = {{ n = 0 }}
            [pools.s]
            process_on_nodes = [1]
            [groups.trained]
            pool = "s"
            class = "state_workers:StatefulWorker"
            kwargs = {{ size = 64 }}
            init_method = "init_model"
            probe_period_s = 1.0
            state = "sharded"
            snapshot_every = 1
            [metrics]
            port = {metrics_port}
            linger_s = 0
            [driver]
            function = "daemon_drivers:traffic"
            [driver.args]
            interval_s = 0.05
            trained = "trained"
            """
        )
    )
    return spec


class _NO_STATE:  # noqa: N801 - a record's training state before the first snapshot
    last_snapshot_step = None


def _calls(metrics_port: int) -> float:
    """Calls of ``add`` the daemon's driver completed (from its own /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("supervisor_dispatch_duration_seconds_count") and 'method="add"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _start(cluster, name: str, grace_s: float) -> tuple[subprocess.Popen, Path, int]:
    metrics_port = _free_port()
    log = cluster.tmp / f"{name}.log"
    daemon = subprocess.Popen(
        [str(BIN / "supervisor"), "start", str(_spec(cluster.tmp, name, grace_s, metrics_port)), "--address", cluster.address, "--log-json"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env=ENV,  # noqa: SIM115 - the process owns it
    )  # fmt: skip
    wait_for_record(name, daemon, timeout_s=120, log=log)
    return daemon, log, metrics_port


def _stop(daemon: subprocess.Popen) -> int:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            return daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(30)
    return daemon.returncode


def test_three_gcs_restarts_under_a_running_job_cost_no_death_no_takeover_and_no_state(ft_cluster):
    from supervisor.daemon.record import RecordStore

    daemon, log, metrics_port = _start(ft_cluster, "gcs-ft", grace_s=30.0)
    try:
        before = RecordStore().get("gcs-ft")
        first_events = RecordStore().events("gcs-ft")
        _wait(lambda: _calls(metrics_port) > 5, 30, "the driver's first calls")
        for _ in range(3):
            _restart_gcs(ft_cluster, OUTAGE_S)
            calls = _calls(metrics_port)
            _wait(lambda: _calls(metrics_port) > calls + 5, 60, "the driver's calls after a GCS restart")  # noqa: B023
        _wait(lambda: sum(1 for e in RecordStore().events("gcs-ft") if e.kind == "GcsOutage") == 3, 30, "three GcsOutage events")
        assert daemon.poll() is None, log.read_text()[-3000:]
        after = RecordStore().get("gcs-ft")
        # The same owner and generation (no takeover), a heartbeat that went on, nobody failed or restarted.
        assert (after.owner, after.generation, after.state) == (before.owner, before.generation, "running")
        assert after.heartbeat_seq > before.heartbeat_seq
        assert all(r.restarts == 0 and r.state.value == "running" for g in after.groups.values() for r in g.ranks)
        assert not after.failures
        events = log_events(log)
        assert not [e for e in events if e.get("event") in ("worker_failed", "group_failed", "teardown_started")]
        assert len([e for e in events if e.get("event") == "gcs_reachable_again"]) == 3
        # The event history and the trained state's snapshots came through (kept in the GCS's KV, in Redis).
        history = RecordStore().events("gcs-ft")
        assert [(e.time, e.kind) for e in history[: len(first_events)]] == [(e.time, e.kind) for e in first_events]
        assert (after.groups["trained"].training_state.last_snapshot_step or 0) > (before.groups["trained"].training_state.last_snapshot_step or 0)
    finally:
        assert _stop(daemon) == 0, log.read_text()[-3000:]


def test_a_gcs_away_past_the_grace_ends_the_daemon_in_one_line_and_leaves_the_job(ft_cluster):
    from supervisor.daemon.ownership import find_owned, remove_owned
    from supervisor.daemon.record import RecordStore

    daemon, log, metrics_port = _start(ft_cluster, "gcs-grace", grace_s=3.0)
    # Settled first: an actor still being created when the GCS goes is not one a restarted GCS brings back.
    _wait(lambda: _calls(metrics_port) > 5, 30, "the driver's first calls")
    _wait(lambda: (RecordStore().get("gcs-grace").groups["trained"].training_state or _NO_STATE).last_snapshot_step is not None, 30, "a snapshot")
    actors_before = sorted(find_owned("gcs-grace").actors)
    try:
        ft_cluster.head_node.kill_gcs_server()
        try:
            code = daemon.wait(30)
        finally:
            ft_cluster.head_node.start_gcs_server()
        assert code == 1
        (line,) = [e["error"] for e in log_events(log) if e.get("event") == "gcs_unreachable_too_long"]
        assert line.startswith(f"the GCS at {ft_cluster.address} has been unreachable for ") and "(gcs_outage_grace_s = 3)" in line
        # Nothing was torn down: the record and every actor of the job are still there for a restart.
        _wait(lambda: RecordStore().get("gcs-grace") is not None, 30, "the record, read again")
        # The restarted GCS takes a moment to hear from every raylet again (their actors show meanwhile).
        try:
            _wait(lambda: sorted(find_owned("gcs-grace").actors) == actors_before, 30, "every actor of the job")
        except AssertionError:
            raise AssertionError(f"before {actors_before}, after {sorted(find_owned('gcs-grace').actors)}") from None
    finally:
        _stop(daemon)
        remove_owned("gcs-grace", find_owned("gcs-grace"))
        RecordStore().delete("gcs-grace")
        RecordStore().delete_events("gcs-grace")
