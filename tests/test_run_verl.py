"""`supervisor run` of a real verl program: examples/verl/seed_job.py (verl's own RayResourcePool,
RayClassWithInitArgs and RayWorkerGroup, nothing of the supervisor imported) runs supervised, its
groups replaced by the supervised ones through the import hook.

Needs verl installed; run in the verl environment (the Makefile's `test-verl`):

    PYTHONPATH=$PWD RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 /work/verl-env/bin/python -m pytest tests/test_run_verl.py
"""

from __future__ import annotations

import importlib.util
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from run_harness import assert_nothing_left, live_pgs, run_factory, shared_cluster, status_json, wait_for

HOW_TO_RUN = "verl is not installed here: `make test-verl` runs this in the second environment (.venv-verl, verl 0.9.1 installed)"
# A run starts a verl job whose workers import torch: minutes on a small shared machine.
pytestmark = [pytest.mark.verl, pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason=HOW_TO_RUN), pytest.mark.timeout(900)]

SEED_JOB = Path(__file__).resolve().parent.parent / "examples" / "verl" / "seed_job.py"


@pytest.fixture(scope="module")
def cluster():
    yield from shared_cluster("run-verl-tests")


@pytest.fixture
def runs(cluster, tmp_path):
    yield from run_factory(cluster, tmp_path)


def seed_job(*args: str) -> list[str]:
    return [sys.executable, str(SEED_JOB), "--nodes", "2", "--per-node", "1", "--cpu", *args]


def steps(output: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^step (\d+): .*$", output, re.M)}


def actor_pids(names: list[str]) -> dict[str, int]:
    from ray._private import state

    alive = {info.get("Name"): info for info in state.actors().values() if info.get("State") == "ALIVE"}
    return {n: int(alive[n]["Pid"]) for n in names if n in alive}


def group_record(name: str, pool: str = "seed"):
    """The run's one group made in verl pool ``pool``, once both its ranks run (None until then)."""
    from supervisor.daemon.record import RecordStore

    record = RecordStore().get(name)
    groups = [g for g in record.groups.values() if g.pool == pool] if record is not None else []
    group = groups[0] if len(groups) == 1 else None
    return group if group is not None and len(group.ranks) == 2 and all(r.state.value == "running" for r in group.ranks) else None


def test_a_verl_program_runs_supervised_through_rank_kills_and_leaves_nothing(runs, cluster):
    # Steps of 2 s inside compute (all ranks), 2 s of driver time between them.
    r = runs(seed_job("--steps", "9", "--step-sleep", "2", "--step-gap", "2"))
    group = wait_for(lambda: group_record(r.name), "the verl group in the record", timeout_s=240, proc=r)
    names = list(group.actor_names)
    bundles = [list(b) for b in group.bundles]
    pids = wait_for(lambda: (p := actor_pids(names)) and len(p) == 2 and p, "the ranks' pids")
    report = status_json(r.name, cluster.address)
    (sup,) = report["supervisors"]
    assert sup["liveness"] == "alive" and [g["name"] for g in sup["groups"]] == ["seed"]

    # Between calls: right after a step is printed the driver waits 2 s.
    seen = wait_for(lambda: steps(r.output()), "the first step", timeout_s=120, proc=r)
    first = max(seen)
    import os

    os.kill(pids[names[1]], signal.SIGKILL)
    replaced = wait_for(
        lambda: (g := group_record(r.name)) and g.ranks[1].restarts >= 1 and (p := actor_pids(names)).get(names[1]) not in (None, pids[names[1]]) and (g, p),
        "rank 1 replaced", timeout_s=120, proc=r,
    )  # fmt: skip
    g, new_pids = replaced
    assert [list(b) for b in g.bundles] == bundles  # into its own bundle
    assert new_pids[names[0]] == pids[names[0]]  # one_for_one: the other rank untouched

    # Inside a call: 1 s into a step's 2 s compute.
    wait_for(lambda: max(steps(r.output()), default=0) > first + 1, "steps after the replacement", timeout_s=120, proc=r)
    last = max(steps(r.output()))
    wait_for(lambda: max(steps(r.output())) > last, "the next step", timeout_s=60, proc=r)
    time.sleep(3.0)  # the print, the 2 s gap, then 1 s into the next compute
    os.kill(new_pids[names[0]], signal.SIGKILL)

    def restarts_in_status():
        (s,) = status_json(r.name, cluster.address)["supervisors"]
        (grp,) = s["groups"]
        return grp if grp["restarts_in_window"] >= 2 and grp["alive"] == 2 else None

    shown = wait_for(restarts_in_status, "both restarts in `supervisor status`", timeout_s=120, proc=r)
    assert shown["state"] == "running"

    assert r.wait(300) == 0, r.output()[-4000:]  # every step returned every row once (the job checks)
    out = r.output()
    assert len(steps(out)) == 9 and all("complete=True" in line for line in steps(out).values()), out[-4000:]
    assert "\ndone\n" in out
    assert "supervisor.integrations.verl.supervised_group.SupervisedRayWorkerGroup" in out
    # The program exits without tearing its group down: supervision stops before Ray does, so no
    # false "group FAILED" ends the log.
    assert "supervisor_crashed" not in out and "group_failed" not in out, out[-4000:]
    assert_nothing_left(r.name)


def test_verls_trainer_layout_colocated_roles_are_supervised_and_a_replacement_serves_every_role(runs, cluster):
    """seed_job --colocate builds its group as verl's trainer does: create_colocated_worker_cls, a random
    group name, spawn, init_model on ref then actor. The actor role refuses to compute in a process
    where its init has not run, so steps completing after the kill prove the inits were replayed."""
    import os

    r = runs(seed_job("--colocate", "--steps", "6", "--step-gap", "2"))
    group = wait_for(lambda: group_record(r.name), "the colocated group in the record", timeout_s=240, proc=r)
    assert group.worker_class.endswith(":WorkerDict[ref=examples.verl.workers:RoleWorker, actor=examples.verl.workers:RoleWorker]")
    names = list(group.actor_names)
    pids = wait_for(lambda: (p := actor_pids(names)) and len(p) == 2 and p, "the ranks' pids")
    first = max(wait_for(lambda: steps(r.output()), "the first step", timeout_s=120, proc=r))
    os.kill(pids[names[1]], signal.SIGKILL)
    wait_for(
        lambda: (g := group_record(r.name)) and g.ranks[1].restarts >= 1 and actor_pids(names).get(names[1]) not in (None, pids[names[1]]),
        "rank 1 replaced", timeout_s=120, proc=r,
    )  # fmt: skip
    (sup,) = status_json(r.name, cluster.address)["supervisors"]
    (shown,) = sup["groups"]
    assert shown["name"] == group.name and shown["restarts_in_window"] >= 1
    assert r.wait(300) == 0, r.output()[-4000:]
    out = r.output()
    assert len(steps(out)) == 6 and all("complete=True" in line for line in steps(out).values()), out[-4000:]
    assert max(steps(out)) > first and "\ndone\n" in out
    assert "supervisor.integrations.verl.roles.SupervisedRoleGroup" in out
    assert_nothing_left(r.name)


def test_a_sigkilled_verl_program_exits_137_and_leaves_nothing(runs):
    r = runs(seed_job("--steps", "100", "--step-gap", "1"))
    wait_for(lambda: steps(r.output()), "the first step", timeout_s=240, proc=r)
    from supervisor.daemon.record import RecordStore

    record = RecordStore().get(r.name)
    assert record.pid != r.proc.pid  # the program's process writes the record
    pgs = list(record.pools["seed"].placement_groups)
    import os

    os.kill(record.pid, signal.SIGKILL)
    assert r.wait(120) == 137
    assert_nothing_left(r.name)
    from supervisor.daemon.ownership import find_owned

    assert not find_owned(r.name).placement_groups and pgs


def test_detach_then_the_next_run_adopts_the_pool_and_gc_removes_it(runs, cluster):
    import os
    import subprocess

    from run_harness import ENV

    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    name = f"run-verl-detach-{uuid.uuid4().hex[:6]}"
    seen = []
    for _ in range(2):
        r = runs(seed_job("--steps", "1"), "--detach", name=name)
        assert r.wait(300) == 0, r.output()[-3000:]
        record = RecordStore().get(name)
        assert record.state == "detached" and "seed" in record.pools
        owned = wait_for(lambda: (o := find_owned(name)) and o.actors == ["fence"] and o, "the actors gone, the fence kept")
        seen.append(sorted(owned.placement_groups.values()))
        assert live_pgs(seen[-1]) == set(seen[-1]) and len(seen[-1]) == 2
    assert seen[0] == seen[1], "the second run created new placement groups instead of adopting"
    assert "placement_group_adopted" in r.output()
    gc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "gc", "--include-detached", "--address", cluster.address],
        capture_output=True, text=True, env={**ENV, "PYTHONPATH": ENV["PYTHONPATH"]}, timeout=120,
    )  # fmt: skip
    assert gc.returncode == 0 and f"removed supervisor {name}" in gc.stdout, gc.stdout + gc.stderr
    assert_nothing_left(name)
    assert os.path.exists(SEED_JOB)


def test_groups_built_in_a_taskrunner_actor_are_hosted_there(runs):
    """main_ppo's topology: the run reaches an actor of the program's job, which hosts the run."""
    import json

    from supervisor.daemon.record import RecordStore

    job = Path(__file__).resolve().parent / "verl_taskrunner_job.py"
    r = runs([sys.executable, str(job), "6", "1.0"])
    group = wait_for(lambda: group_record(r.name), "the TaskRunner's group in the record", timeout_s=300, proc=r)
    host_pid = RecordStore().get(r.name).pid
    assert group.pool == "seed" and host_pid != r.proc.pid
    assert r.wait(300) == 0, r.output()[-3000:]
    (line,) = [json.loads(line) for line in r.output().splitlines() if line.startswith('{"cls"')]
    assert line == {"cls": "supervisor.integrations.verl.supervised_group.SupervisedRayWorkerGroup", "pid": host_pid, "complete": True}
    assert_nothing_left(r.name)
