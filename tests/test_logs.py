"""`supervisor logs`' two ways to a rank's log against real Ray: the node's files on this machine, and
Ray's log API through a real dashboard (a cluster of its own, with the dashboard on 127.0.0.1)."""

from __future__ import annotations

import time

import pytest

from supervisor.cli.logs import (
    LogStream,
    LogsUnavailableError,
    RankActor,
    last_lines,
    local_log_file,
    read_log,
    read_through_log_api,
)


@pytest.fixture(scope="module")
def actor():
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": True, "dashboard_host": "127.0.0.1"})
    try:
        ray.init(address=cluster.address, log_to_driver=False, namespace="logs-tests")

        @ray.remote(num_cpus=0)
        class Talker:
            def __init__(self) -> None:
                import os
                import sys

                for i in range(5):
                    print(f"line {i}", flush=True)
                print("to stderr", file=sys.stderr, flush=True)
                self.pid = os.getpid()

            def where(self) -> tuple[int, str]:
                return self.pid, ray.get_runtime_context().get_node_id()

        handle = Talker.options(name="talker").remote()
        pid, node = ray.get(handle.where.remote(), timeout=60)
        yield RankActor("talker", handle._actor_id.hex(), pid, node, True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _eventually(read, want, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = list(read())
        except LogsUnavailableError:
            got = None  # the dashboard may still be starting
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(1)


def test_the_local_file_is_the_actors_and_ray_markers_are_left_out(actor):
    path = local_log_file(actor, LogStream.OUT)
    assert path is not None and path.name.endswith(f"-{actor.pid}.out")
    assert _eventually(lambda: last_lines(path, None), [f"line {i}" for i in range(5)]) == [f"line {i}" for i in range(5)]
    assert last_lines(path, 2) == ["line 3", "line 4"]
    assert list(read_log(actor, LogStream.ERR, None, follow=False)) == ["to stderr"]


def test_the_log_api_serves_the_same_lines(actor):
    want = ["line 3", "line 4"]
    assert _eventually(lambda: read_through_log_api(actor, LogStream.OUT, 2, follow=False), want) == want
    assert _eventually(lambda: read_through_log_api(actor, LogStream.ERR, None, follow=False), ["to stderr"]) == ["to stderr"]
