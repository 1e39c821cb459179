"""Shared fixtures: a real multi-node Ray cluster on 127.0.0.1, one per test module."""

from __future__ import annotations

import os

# Must be set before Ray starts anything: it keeps every Ray address on loopback.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Worker processes import the test worker classes (tests/workers.py) by module name, as they would
# import a user's installed package; the local cluster's processes inherit this environment.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [_TESTS_DIR, os.environ.get("PYTHONPATH", "")] if p)

import pytest  # noqa: E402

NODE_CPUS = 16
NODE_GPUS = 4

# CI sets this: there, a skipped test is a failure (a test that skips where it should run proves
# nothing, e.g. the network-namespace test without root).
NO_SKIPS_ENV = "SUPERVISOR_TESTS_NO_SKIPS"

# `make test` runs the suite on two pytest-xdist workers (`-n 2`), a whole module to a worker: a module
# owns its cluster (module-scoped fixtures) and its tests may rely on their order. The modules that
# judge the session's one run of the example job (``example_run``) are one unit, so that the job runs
# once. Units are handed out in collection order, each to the worker about to be idle (xdist queues a
# worker's next unit while the last two tests of its current one run), so the longest modules are
# collected first: one started last would run on alone at the end. The order: the modules' times in
# `make test` (docs/development/tests.md), longest first; the others keep pytest's order.
EXAMPLE_RUN_MODULES = ("test_example_job.py", "test_security.py")
LONGEST_MODULES_FIRST = (
    "test_chaos.py", "test_daemon.py", "test_security.py", "test_example_job.py", "test_supervision.py", "test_group.py",
    "test_run.py", "test_state.py", "test_docs.py", "test_zygote.py", "test_standby.py", "test_drain.py",
    "test_observability.py", "test_gcs_restart.py", "test_compat_verl.py", "test_kv.py", "test_doctor.py",
    "test_lifecycle.py", "test_heartbeat.py", "test_training_workers.py",
)  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(NO_SKIPS_ENV) == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where {NO_SKIPS_ENV}=1 forbids skips: {reason}"


def pytest_collection_modifyitems(config, items):
    unlisted = sorted({item.path.name for item in items if "example_run" in item.fixturenames} - set(EXAMPLE_RUN_MODULES))
    if unlisted:
        raise pytest.UsageError(f"{unlisted} use example_run: add them to EXAMPLE_RUN_MODULES (tests/conftest.py)")
    rank = {name: i for i, name in enumerate(LONGEST_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by module, the example job's modules as one unit, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "example_run" if module.rpartition("/")[2] in EXAMPLE_RUN_MODULES else module

    config.option.loadscopereorder = False  # collection order, not the most tests first
    return ModuleScheduling(config, log)


@pytest.fixture(scope="module")
def ray_cluster():
    """Two nodes with 4 declared GPUs each; the driver is connected. Torn down even when tests fail."""
    from clusters import connected_cluster

    node = {"num_cpus": NODE_CPUS, "num_gpus": NODE_GPUS}
    with connected_cluster(node, [node]) as (cluster, _):
        yield cluster


@pytest.fixture(scope="module")
def one_node_cluster():
    """One 2-CPU node, no GPUs; the driver is connected. For modules that need only Ray itself."""
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def example_run(tmp_path_factory):
    """The README's main job, run once per session (tests/example_run.py) for every test that checks it."""
    from example_run import run_example_job

    return run_example_job(tmp_path_factory.mktemp("example-run"))


@pytest.fixture
def no_leaks(ray_cluster):
    """Fails the test if it leaves a live placement group or a live actor behind."""
    before_pgs, before_actors = _live_placement_groups(), _live_actors()
    yield
    import time

    # Removal is asynchronous in the GCS; give it a moment before judging.
    deadline = time.monotonic() + 15
    while True:
        leaked_pgs = _live_placement_groups() - before_pgs
        leaked_actors = {k: v for k, v in _live_actors().items() if k not in before_actors}
        if (not leaked_pgs and not leaked_actors) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not leaked_pgs, f"leaked placement groups: {sorted(leaked_pgs)}"
    assert not leaked_actors, f"leaked actors: {sorted(leaked_actors.values())}"


def _live_placement_groups() -> set[str]:
    from ray.util import placement_group_table

    return {pg_id for pg_id, info in placement_group_table().items() if info["state"] != "REMOVED"}


def _live_actors() -> dict[str, str]:
    # The public state API needs the dashboard, which the test clusters do not start; the GCS table
    # behind ray._private.state is the same source of truth.
    from ray._private import state

    return {
        actor_id: info.get("Name") or info.get("ActorClassName", "?")
        for actor_id, info in state.actors().items()
        if info.get("State") != "DEAD"
    }
