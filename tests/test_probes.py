"""The daemon's /healthz and /readyz decisions (pure), and the routes served beside /metrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from supervisor.daemon.probes import HEALTHY_WITHIN_MIN_S, health, readiness
from supervisor.daemon.record import DaemonState
from supervisor.supervision.states import GroupState


def test_health_follows_the_last_record_write():
    assert health(DaemonState.STARTING, None, 2.0).ok  # nothing written yet: start-up has its own timeouts
    assert health(DaemonState.RUNNING, 5.9, 2.0).ok
    late = health(DaemonState.RUNNING, 31.0, 10.0)
    assert not late.ok and late.detail == "running: no record write for 31s (limit 30s)"
    # A fast heartbeat does not make the probe flap: never less than the floor.
    assert health(DaemonState.RUNNING, HEALTHY_WITHIN_MIN_S - 1, 0.5).ok
    assert not health(DaemonState.RUNNING, HEALTHY_WITHIN_MIN_S + 1, 0.5).ok
    # Tearing down after a failure, the metrics linger: still healthy, so the pod keeps being scraped.
    assert health(DaemonState.STOPPING, 120.0, 1.0).ok


def test_ready_only_when_running_with_every_group_running():
    assert readiness(DaemonState.RUNNING, {"a": GroupState.RUNNING, "b": GroupState.RUNNING}).ok
    assert readiness(DaemonState.RUNNING, {}).ok
    starting = readiness(DaemonState.STARTING, {})
    assert not starting.ok and starting.detail == "daemon starting"
    recovering = readiness(DaemonState.RUNNING, {"b": GroupState.FAILED, "a": GroupState.RECOVERING, "c": GroupState.RUNNING})
    assert not recovering.ok and recovering.detail == "groups not running: a recovering, b failed"


def test_routes_are_served_beside_the_metrics():
    from supervisor.observability import metrics

    def broken():
        raise RuntimeError("cannot read the record\nsecond line")

    routes = {"/healthz": lambda: (200, "text/plain", b"ok\n"), "/status": lambda: (200, "application/json", b'{"a": 1}'), "/bad": broken}
    server = metrics.serve(0, "127.0.0.1", routes=routes)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200 and r.read() == b"ok\n"
        with urllib.request.urlopen(base + "/status", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/json" and json.loads(r.read()) == {"a": 1}
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            assert b"supervisor_build_info" in r.read()
        with urllib.request.urlopen(base + "/metrics?name[]=supervisor_build_info", timeout=10) as r:  # a filtered scrape
            body = r.read().decode()
            assert "supervisor_build_info{" in body and "supervisor_workers" not in body
        try:
            urllib.request.urlopen(base + "/bad", timeout=10)
            raise AssertionError("a route that raises must answer 500")
        except urllib.error.HTTPError as exc:
            assert exc.code == 500 and exc.read() == b"cannot read the record"
    finally:
        server.shutdown()
