"""What the tests of `supervisor run` share (tests/test_run.py, tests/test_run_verl.py): the run as a
subprocess, waiting on it, and what it leaves in the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from daemon_harness import TESTS_DIR

# Loopback only; the commands import the test modules from tests/ (and this worktree's code, when
# PYTHONPATH names it: prepended to, never replaced).
ENV = {
    **os.environ,
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])),
}


class Run:
    """`supervisor run --name NAME --address ... -- COMMAND` as a subprocess, JSON logs to a file."""

    def __init__(self, name: str, address: str, command: list[str], log: Path, *options: str) -> None:
        self.name, self.log_path = name, log
        self._log = open(log, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli.commands", "run", "--name", name, "--address", address, "--log-json", *options, "--", *command],
            stdout=self._log, stderr=subprocess.STDOUT, env=ENV,
        )  # fmt: skip

    def wait(self, timeout_s: float = 90.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.flush()

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


def shared_cluster(namespace: str):
    """A one-node loopback cluster the test process drives (in ``namespace``), shut down after the
    module: the body of a module-scoped ``cluster`` fixture.

    Without Ray's token authentication, whatever earlier tests of this process left in its environment
    (connecting to an embedded daemon's Ray presents its token through RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH):
    the commands under test get ENV, taken before any test ran, and must be able to join it."""
    import ray

    from supervisor.daemon.auth import AUTH_ENV_VARS, restore_env, saved_env, withdraw
    from supervisor.daemon.local_cluster import LocalCluster

    saved = saved_env()
    withdraw()
    restore_env(dict.fromkeys(AUTH_ENV_VARS))
    c = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 8, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    try:
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False, namespace=namespace)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        restore_env(saved)


def run_factory(cluster, tmp_path):
    """The body of a ``runs`` fixture: start runs against ``cluster``; clean up whatever they left."""
    started: list[Run] = []

    def start(command: list[str], *options: str, name: str | None = None) -> Run:
        r = Run(name or f"run-test-{uuid.uuid4().hex[:6]}", cluster.address, command, tmp_path / f"run{len(started)}.log", *options)
        started.append(r)
        return r

    yield start
    for r in started:
        r.close()
    from supervisor.daemon.ownership import find_owned, remove_owned
    from supervisor.daemon.record import RecordStore

    for name in {r.name for r in started}:  # whatever a failed test left
        remove_owned(name, find_owned(name))
        RecordStore().delete(name)


def wait_for(predicate, what: str, timeout_s: float = 60.0, proc: Run | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(f"run exited with {proc.proc.returncode} waiting for {what}: {proc.output()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f": {proc.output()[-3000:]}" if proc else ""))


def reports(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def assert_nothing_left(name: str) -> None:
    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    wait_for(lambda: not find_owned(name), f"{name}'s placement groups and actors to go", timeout_s=20)
    assert RecordStore().get(name) is None


def live_pgs(ids: list[str]) -> set[str]:
    from ray.util import placement_group_table

    table = placement_group_table()
    return {i for i in ids if table.get(i, {}).get("state") not in (None, "REMOVED")}


def status_json(name: str, address: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "status", name, "--address", address, "--json"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


