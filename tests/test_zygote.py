"""Standbys forked from a per-node zygote, on a real Ray cluster: where they come from, what killing
one does to the others, what a zygote that cannot start leaves, and the launcher's fallback."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import ray
from clusters import connected_cluster
from supervised_workers import ForkProbeWorker

from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
from supervisor.core.worker.actor_heartbeat import wait_for_beat
from supervisor.core.worker.zygote import (
    LAUNCHER,
    RETRY_S,
    NodeZygotes,
    ZygoteKeeper,
    check_preload_names,
    keeper_name,
    runtime_env_problem,
    worker_sys_path,
)
from supervisor.core.worker.zygote_launch import ZYGOTE_ENV
from supervisor.daemon.spare_zygotes import nodes_that_fit, warm_spare_nodes
from supervisor.errors import ConfigError
from supervisor.supervision import GroupState, GroupSupervisor, SupervisionConfig
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.standbys import check_standby_config

FAST_INIT = InitPolicy(timeout_s=30, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
NODE = "zygote-node"


@pytest.fixture(scope="module")
def ray_cluster():
    with connected_cluster({"num_cpus": 4, "num_gpus": 0}, [{"num_cpus": 6, "num_gpus": 3, "resources": {f"accelerator_type:{NODE}": 10}}]) as (cluster, _):
        yield cluster


def _wait(predicate, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def _supervised(preload, standbys=1):
    pool = ResourcePool([2], max_colocate_count=1, accelerator_type=NODE, capacity_factor=1.5)
    group = create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0))
    init_group(group, "init_model", policy=FAST_INIT)
    config = SupervisionConfig(
        init_method="init_model", init_policy=FAST_INIT, probe_period_s=1.0, standbys=standbys, standby_check_s=0.2,
        standby_preload=preload,
    )  # fmt: skip
    return pool, group, GroupSupervisor(group, config).start()


def _teardown(pool, group, sup):
    sup.stop()
    group.kill()
    pool.teardown()


def _kill(group, rank):
    os.kill(wait_for_beat(group.workers[rank]).pid, signal.SIGKILL)


def _ready_standby(group, sup, not_named=()):
    """The group's ready standby, once there is one that is none of ``not_named``."""

    def ready():
        standbys = list(group.standbys.values())
        return sup.standby_counts() == (1, 0) and standbys and standbys[0].name not in not_named and standbys[0]

    return _wait(ready, what="a ready standby")


def _keeper(group, node_id, preload=("preload_marker",)):
    # Only for ray.kill: a keeper answers nothing else once its zygote is ready (it watches it).
    return ray.get_actor(keeper_name(group.name_prefix, preload, node_id), namespace=group.namespace)


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_standbys_fork_from_the_nodes_zygote_and_killing_a_forked_rank_takes_no_other_down(ray_cluster, no_leaks):
    pool, group, sup = _supervised(("preload_marker",))
    try:
        first = _ready_standby(group, sup)
        node = group.identity()[0]["node_id"]
        _wait(lambda: group.zygotes is not None and group.zygotes.launcher(node), what="the node's zygote")

        # Rank 0 dies: the first standby (started before the zygote was ready) takes it over, and its
        # successor is forked from the zygote, which imported the preloaded module before the fork.
        _kill(group, 0)
        forked = _ready_standby(group, sup, not_named={first.name})
        assert forked.zygote == group.zygotes.launcher(node).name and first.zygote is None
        info = ray.get(forked.handle.process_info.remote(), timeout=30)
        zygote = group.zygotes.launcher(node).pid
        assert info["ppid"] == zygote and info["marker_imported_in"] == zygote, info
        assert info["pgid"] == info["pid"], "a forked worker has a process group of its own, as Ray's workers do"

        # Rank 1 dies: the forked standby becomes rank 1, serves, and the next standby is forked too.
        _kill(group, 1)
        _wait(lambda: group.worker_names[1] == forked.name and sup.state is GroupState.RUNNING, what="the takeover of rank 1")
        assert group.process_info()[1]["pid"] == info["pid"]
        second = _ready_standby(group, sup, not_named={first.name, forked.name})
        second_pid = ray.get(second.handle.process_info.remote(), timeout=30)["pid"]

        # Killing the forked rank (Ray then cleans up after it) leaves the zygote and the other worker
        # forked from it alive: the other one takes rank 1 over.
        _kill(group, 1)
        _wait(lambda: group.worker_names[1] == second.name and sup.state is GroupState.RUNNING, what="the second takeover")
        assert group.process_info()[1]["pid"] == second_pid
        assert _alive(zygote) and sup.ranks()[1].restarts == 2

        # The keeper goes (a restarted daemon removes its predecessor's): the zygote dies with it, and
        # the ranks forked from it serve on.
        ray.kill(_keeper(group, node))
        _wait(lambda: not _alive(zygote), timeout_s=30, what="the zygote to exit with its keeper")
        assert group.process_info()[1]["pid"] == second_pid and _alive(second_pid)
        assert sup.ranks()[1].restarts == 2
    finally:
        _teardown(pool, group, sup)


def test_a_fresh_replacement_is_forked_from_the_zygote_standbys_started(ray_cluster, no_leaks):
    pool = ResourcePool([2], max_colocate_count=1, accelerator_type=NODE, capacity_factor=1.5)
    group = create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0))
    try:
        init_group(group, "init_model", policy=FAST_INIT)
        plain = group.process_info()[1]
        assert plain["marker_imported_in"] == plain["pid"], "before any standby, ranks start as plain processes"
        spare = next(b for b in group.all_bundles() if b not in group.rank_bundles)
        group.start_standbys([spare], preload=("preload_marker",), nodes=group.placed_bundles())
        node = group.placed_bundles()[group.rank_bundles[1]]
        zygote = _wait(lambda: group.zygotes.launcher(node), what="the node's zygote").pid

        group.replace_worker(1)
        info = group.process_info()[1]
        assert info["pid"] != plain["pid"] and info["ppid"] == zygote == info["marker_imported_in"], info
        assert group.init_model() == [0, 1], "the forked rank serves, as rank 1"
        assert group.identity()[1]["env"]["RANK"] == "1" and group.identity()[1]["env"]["WORLD_SIZE"] == "2"

        group.replace_worker(1, fork=False)  # what a retry after a failure asks for
        again = group.process_info()[1]
        assert again["marker_imported_in"] == again["pid"] != info["pid"], "started as a plain process"
    finally:
        group.kill()
        pool.teardown()


def test_a_replacement_waits_for_its_nodes_zygote_while_it_starts_rather_than_importing_alone(ray_cluster, no_leaks):
    """The ranks of a node loss go where Ray re-places their bundles, often a node whose zygote is not
    up yet: each replacement waits for it (starting it when none runs) and forks, instead of each
    importing the preload side by side."""
    pool = ResourcePool([2], max_colocate_count=1, accelerator_type=NODE, capacity_factor=1.5)
    group = create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0))
    try:
        init_group(group, "init_model", policy=FAST_INIT)
        spare = next(b for b in group.all_bundles() if b not in group.rank_bundles)
        group.start_standbys([spare], preload=("preload_marker",), nodes=group.placed_bundles())  # starts the zygote
        node = group.placed_bundles()[group.rank_bundles[1]]
        assert group.zygotes.launcher(node, start=False) is None, "the zygote is still starting"
        group.replace_worker(1)  # at once: it waits for the zygote
        info = group.process_info()[1]
        zygote = group.zygotes.launcher(node, start=False).pid
        assert info["ppid"] == zygote == info["marker_imported_in"] != info["pid"], info
    finally:
        group.kill()
        pool.teardown()


def test_the_daemons_spare_node_check_starts_the_jobs_zygotes_where_a_bundle_could_go():
    nodes = [
        {"NodeID": "gpu-a", "Alive": True, "Resources": {"CPU": 6.0, "GPU": 6.0}},
        {"NodeID": "gpu-dead", "Alive": False, "Resources": {"CPU": 6.0, "GPU": 6.0}},
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "small-gpu", "Alive": True, "Resources": {"CPU": 0.5, "GPU": 1.0}},
    ]
    assert nodes_that_fit(nodes, [{"CPU": 1.0, "GPU": 1.0}]) == ["gpu-a"]
    assert nodes_that_fit(nodes, [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 0.0}]) == ["gpu-a", "head"]
    assert nodes_that_fit(nodes, []) == []


def test_spare_nodes_get_the_jobs_zygote_before_any_rank_needs_it(ray_cluster, no_leaks):
    shared = NodeZygotes("zyg-spare.", "ray_supervisor", ("preload_marker",), False, ray_kill_all)
    try:
        warm_spare_nodes([shared], [{"CPU": 1.0, "GPU": 1.0, f"accelerator_type:{NODE}": 0.001}])
        (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
        launcher = _wait(lambda: shared.launcher(node, start=False), what="the spare node's zygote")
        assert _alive(launcher.pid)
    finally:
        ray_kill_all(shared.take_handles())


def test_groups_given_the_jobs_zygotes_fork_every_first_rank_and_leave_the_zygotes_to_their_owner(ray_cluster, no_leaks):
    """``create_group(zygotes=...)``: the first ranks of two groups are forked from one zygote on
    their node (one import, not one per rank); killing a group leaves the shared zygote; a fresh
    replacement forks from it too; the owner removes the keepers."""
    shared = NodeZygotes("zyg-job.", "ray_supervisor", ("preload_marker",), False, ray_kill_all)
    made = []
    try:
        for prefix, ranks in (("zyg-a-", 2), ("zyg-b-", 1)):  # the node's three GPUs
            pool = ResourcePool([ranks], max_colocate_count=1, accelerator_type=NODE, name_prefix=prefix)
            made.append((pool, create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0), name_prefix=prefix, zygotes=shared)))
        (node,) = {n for pool, _ in made for n in pool.original_bundle_nodes().values()}
        zygote = shared.launcher(node, start=False).pid
        for _, group in made:
            init_group(group, "init_model", policy=FAST_INIT)
            assert group.zygotes is shared
            for info in group.process_info():
                assert info["ppid"] == zygote == info["marker_imported_in"] != info["pid"], info
        assert made[0][1].identity()[1]["env"]["RANK"] == "1"

        pool, group = made.pop(0)
        group.kill()
        pool.teardown()
        assert _alive(zygote), "a group's end leaves the job's zygote"
        _, other = made[0]
        other.replace_worker(0)
        info = other.process_info()[0]
        assert info["ppid"] == zygote == info["marker_imported_in"], "a fresh replacement forks from it too"
        assert other.init_model() == [0]
    finally:
        for pool, group in made:
            group.kill()
            pool.teardown()
        ray_kill_all(shared.take_handles())
    _wait(lambda: not _alive(zygote), timeout_s=30, what="the zygote to exit with its keeper, killed by its owner")


def test_a_groups_first_ranks_start_plainly_when_the_zygote_cannot_start(ray_cluster, no_leaks):
    shared = NodeZygotes("zyg-bad.", "ray_supervisor", ("no_such_module_here",), False, ray_kill_all)
    pool = ResourcePool([1], max_colocate_count=1, accelerator_type=NODE, name_prefix="zyg-bad-")
    try:
        group = create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0), name_prefix="zyg-bad-", zygotes=shared)
        try:
            init_group(group, "init_model", policy=FAST_INIT)
            (info,) = group.process_info()
            assert info["marker_imported_in"] == info["pid"], "a plain process"
            (node,) = pool.original_bundle_nodes().values()
            assert shared.failures(node) == 1
        finally:
            group.kill()
    finally:
        pool.teardown()
        ray_kill_all(shared.take_handles())


def ray_kill_all(handles):
    for handle in handles:
        ray.kill(handle)


def test_a_zygote_that_cannot_start_says_why_and_standbys_start_as_plain_processes(ray_cluster, no_leaks):
    keeper = ray.remote(ZygoteKeeper).options(num_cpus=0).remote(["ray"])
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match=r"exited with code 1: zygote: preloading 'ray' imported Ray"):
            ray.get(keeper.ready.remote(60), timeout=90)
    finally:
        ray.kill(keeper)

    pool, group, sup = _supervised(("no_such_module_anywhere",))
    try:
        first = _ready_standby(group, sup)
        node = group.identity()[0]["node_id"]
        _wait(lambda: group.zygotes.failures(node) == 1, timeout_s=90, what="the zygote to fail")
        _kill(group, 0)
        successor = _ready_standby(group, sup, not_named={first.name})
        info = ray.get(successor.handle.process_info.remote(), timeout=30)
        assert info["marker_imported_in"] == info["pid"], "started as a plain process, which imported the module itself"
    finally:
        _teardown(pool, group, sup)


class _Plain:
    def info(self) -> dict:
        import sys

        return {"isolated": sys.flags.isolated, "no_site": sys.flags.no_site, "ppid": os.getppid()}


def test_the_launcher_starts_the_worker_itself_when_no_zygote_answers(ray_cluster, no_leaks):
    import sys

    runtime_env = {"py_executable": f"{sys.executable} -I -S {LAUNCHER}", "env_vars": {ZYGOTE_ENV: "nobody-listens-here"}}
    actor = ray.remote(_Plain).options(num_cpus=0, runtime_env=runtime_env).remote()
    try:
        # The launcher (run -I -S) replaced itself with a plain interpreter, which has its site-packages.
        assert ray.get(actor.info.remote(), timeout=60)["isolated"] == 0 == ray.get(actor.info.remote())["no_site"]
    finally:
        ray.kill(actor)


def test_a_zygote_that_exits_is_reported_its_keeper_killed_and_it_is_started_again_after_a_pause(ray_cluster, no_leaks):
    now = [0.0]
    zygotes = NodeZygotes("zt-", "zygote-test", ("preload_marker",), False, lambda handles: [ray.kill(h) for h in handles], clock=lambda: now[0])
    node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and f"accelerator_type:{NODE}" in n["Resources"])
    try:
        assert zygotes.launcher(node) is None, "started, not ready yet"
        first = _wait(lambda: zygotes.launcher(node), what="the zygote")
        os.kill(first.pid, signal.SIGKILL)
        _wait(lambda: zygotes.launcher(node) is None, what="the zygote's exit to be noticed")
        assert zygotes.failures(node) == 1
        _wait(lambda: not any(a["name"] == zygotes.keeper_name(node) for a in ray.util.list_named_actors(all_namespaces=True)), what="the keeper killed")
        assert zygotes.launcher(node) is None and zygotes.take_handles() == [], "not started again before the pause"
        now[0] += RETRY_S
        second = _wait(lambda: zygotes.launcher(node), what="the zygote started again")
        assert second.pid != first.pid and _alive(second.pid) and zygotes.failures(node) == 0
    finally:
        for handle in zygotes.take_handles():
            ray.kill(handle)


def test_a_worker_forked_from_a_zygote_gets_the_path_python_would_have_given_it():
    zygote_path = ["", "/keeper/pythonpath", "/usr/lib/python311.zip", "/usr/lib/python3.11", "/venv/site-packages"]
    path = worker_sys_path(zygote_path, "/keeper/pythonpath", "/job/src:/keeper/pythonpath", "/ray/workers/default_worker.py")
    assert path == ["/ray/workers", "/job/src", "/keeper/pythonpath", "/usr/lib/python311.zip", "/usr/lib/python3.11", "/venv/site-packages"]
    assert worker_sys_path(zygote_path, "/keeper/pythonpath", "", "/w/x.py") == ["/w", "/usr/lib/python311.zip", "/usr/lib/python3.11", "/venv/site-packages"]


def test_runtime_envs_a_zygote_can_share_are_told_apart():
    assert runtime_env_problem(None) is None and runtime_env_problem({"env_vars": {"A": "1"}, "working_dir": "."}) is None
    assert runtime_env_problem({"pip": ["x"], "env_vars": {}, "conda": "y"}) == "the workers' runtime_env sets conda, pip, which a zygote cannot share"


def test_preload_names_are_checked():
    assert check_preload_names(["torch", "tensordict.nn", "examples.rlhf.workers"]) == []
    assert check_preload_names("torch") == ["give a list of module names, not the string 'torch'"]
    assert check_preload_names(["torch..nn", "1abc", ""]) == ["'torch..nn' is not a module name", "'1abc' is not a module name", "'' is not a module name"]


def test_a_bad_preload_name_is_refused_before_supervising(ray_cluster, no_leaks):
    pool = ResourcePool([1], max_colocate_count=1, accelerator_type=NODE, capacity_factor=2.0)
    group = create_group(pool, ClassWithInitArgs(ForkProbeWorker, start_s=0.0))
    try:
        with pytest.raises(ConfigError, match=r"standby_preload: 'torch\.\.nn' is not a module name"):
            check_standby_config(group, 1, None, ("torch..nn",))
        group.cls_with_init.update_options({"runtime_env": {"pip": ["requests"]}})
        with pytest.raises(ConfigError, match="standby_preload: the workers' runtime_env sets pip, which a zygote cannot share"):
            check_standby_config(group, 1, None, ("torch",))
    finally:
        group.kill()
        pool.teardown()
