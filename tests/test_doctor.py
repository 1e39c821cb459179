"""`supervisor doctor`: each rule on prepared facts (pure), then faults prepared on a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from supervisor.cli.doctor import DoctorFacts, FindingKind, Phase, diagnose, render_findings
from supervisor.daemon.record import DrainRecord, FailureEvent, GroupRecord, SupervisorRecord
from supervisor.placement.resources import ClusterSnapshot, NodeResources, PlacementGroupRecord, PoolDemand
from supervisor.supervision import RankStatus, WorkerState

NOW = 1_800_000_000.0
NODE = "a" * 56
SNAPSHOT = ClusterSnapshot(nodes=(NodeResources(NODE, "127.0.0.1", {"CPU": 8, "GPU": 4}),), available={"CPU": 8, "GPU": 4})


def record(name: str = "job", age: float = 0.5, **fields) -> SupervisorRecord:
    base = dict(
        name=name, namespace=f"supervisor.{name}", owner="o", pid=1, host="h", started_at=NOW - 600, heartbeat_at=NOW - age,
        heartbeat_interval_s=1.0, orphan_grace_s=30.0, state="running", ray_version="2.60.0",
    )  # fmt: skip
    base.update(fields)
    return SupervisorRecord(**base)


def facts(**kw) -> DoctorFacts:
    return DoctorFacts(now=NOW, snapshot=kw.pop("snapshot", SNAPSHOT), records=kw.pop("records", []), **kw)


def kinds(findings) -> list[tuple[str, str]]:
    return [(f.kind.value, f.subject) for f in findings]


def test_a_healthy_cluster_has_no_findings():
    healthy = record(groups={"g": GroupRecord("g", "p", "m:C", ["a", "b"], state="running", initialized=True, ranks=[RankStatus(0, WorkerState.RUNNING, 0, NODE, NODE)])})
    assert diagnose(facts(records=[healthy], cluster_ray_version="2.60.0")) == []
    assert render_findings([]).startswith("supervisor doctor: nothing found")


def test_infeasible_pending_demand():
    demand = PoolDemand("big", "STRICT_PACK", (("big:pg5:0", tuple({"GPU": 1.0} for _ in range(5))),))
    (finding,) = diagnose(facts(pool_demands={"big": demand}))
    assert (finding.kind, finding.phase) == (FindingKind.INFEASIBLE, Phase.BEFORE_SCHEDULING)
    assert "GPU 5 on one node" in finding.detail


def test_budget_misfits_of_a_spec():
    found = diagnose(facts(spec_bundle_misfits=[("job/p", "a 0.5 + b 0.75 GPU = 1.25 > 1 GPU per bundle")], spec_pool_totals={"job/p": {"GPU": 6}}))
    assert kinds(found) == [("budget misfit", "job/p"), ("budget misfit", "cluster")]
    assert found[1].detail == "pools job/p 6 GPU = 6 > 4 GPU in the cluster"


def test_leaked_placement_group_and_orphaned_supervisor():
    pgs = (
        PlacementGroupRecord("11", "other-job-gpus", "CREATED", "PACK", ({"GPU": 2.0},), {0: NODE}),
        PlacementGroupRecord("22", "old.p:pg2:0", "CREATED", "PACK", ({"GPU": 1.0},), {0: NODE}),
        PlacementGroupRecord("33", "live.p:pg2:0", "CREATED", "PACK", ({"GPU": 1.0},), {0: NODE}),
        PlacementGroupRecord("44", "alive-job", "CREATED", "PACK", ({"GPU": 1.0},), {0: NODE}),
    )
    snapshot = ClusterSnapshot(SNAPSHOT.nodes, SNAPSHOT.available, pgs)
    found = diagnose(facts(snapshot=snapshot, records=[record("old", age=100), record("live")], detached_dead_creator={"11", "22", "33"}))
    assert kinds(found) == [("orphaned supervisor", "old"), ("leaked placement group", "other-job-gpus")]
    assert "holds GPU 2" in found[1].detail and "remove_placement_group" in found[1].fix


def test_a_detached_supervisor_is_shown_detached_never_orphaned():
    detached = record("kept", age=10**5, state="detached")
    found = diagnose(facts(records=[detached]))
    assert kinds(found) == [("detached supervisor", "kept")]
    assert "waiting for the next start" in found[0].detail and "--include-detached" in found[0].fix


def test_liveness_uses_the_silence_the_fence_measured_not_the_records_clock():
    # The daemon's clock is an hour behind: its record looks an hour old, yet its fence heard from it now.
    skewed = record("skewed", age=3600)
    assert diagnose(facts(records=[skewed], silences={"skewed": 0.4}, cluster_ray_version="2.60.0")) == []
    assert kinds(diagnose(facts(records=[record("gone")], silences={"gone": 45.0}))) == [("orphaned supervisor", "gone")]


def test_init_failures_restarts_drift_hung_oversubscription_version():
    group = GroupRecord(
        "g", "p", "m:C", ["a", "b"], state="running", initialized=True,
        ranks=[RankStatus(0, WorkerState.RUNNING, 0, NODE, NODE), RankStatus(1, WorkerState.RUNNING, 0, "b" * 56, NODE)],
        restarts=[[1, "node_lost", NOW - 10]],
    )  # fmt: skip
    # Group h still initialising: rank 1 keeps failing. Group g's rank 1 failed an attempt, then succeeded.
    starting = GroupRecord("h", "p", "m:C", ["c", "d"], state="initializing")
    failures = [
        FailureEvent(NOW - 30, "g", 1, "init_raised", "ValueError: flaky, then fine"),
        FailureEvent(NOW - 20, "h", 1, "init_raised", "ValueError: bad weights"),
        FailureEvent(NOW - 15, "h", 1, "init_timed_out", "timed out after 300s"),
        FailureEvent(NOW - 5, "g", 0, "hung", "health probe unanswered for 10s"),
    ]
    rec = record(
        groups={"g": group, "h": starting}, failures=failures, warnings=["CPU oversubscribed: node aaaa: workers need 12 CPUs"], ray_version="2.59.0"
    )
    found = diagnose(facts(records=[rec], cluster_ray_version="2.60.0"))
    assert kinds(found) == [
        ("init failing", "job/h rank 1"),
        ("restarts", "job/g"),
        ("placement drift", "job/g rank 1"),
        ("hung rank", "job/g rank 0"),
        ("cpu oversubscribed", "job"),
        ("ray version mismatch", "job"),
    ]
    assert found[0].detail == "init timed_out: timed out after 300s"  # the latest error of that rank
    assert [f.phase for f in found][:2] == [Phase.DURING_INIT, Phase.AFTER_START]


def test_fewer_ready_standbys_than_wanted():
    from supervisor.daemon.record import StandbyRecord

    group = GroupRecord(
        "g", "p", "m:C", ["a"], state="running", initialized=True, ranks=[RankStatus(0, WorkerState.RUNNING, 0, NODE, NODE)],
        standbys=[StandbyRecord("g_C_standby-1", [1, 0], NODE), StandbyRecord("g_C_standby-2", [1, 1], None)], standbys_wanted=3,
    )  # fmt: skip
    (finding,) = diagnose(facts(records=[record(groups={"g": group})], cluster_ray_version="2.60.0"))
    assert (finding.kind, finding.subject, finding.phase) == (FindingKind.STANDBYS_MISSING, "job/g", Phase.AFTER_START)
    assert finding.detail.startswith("1 of 3 standby(s) ready (1 starting)")
    group.standbys = [StandbyRecord(f"s{i}", [1, i], NODE) for i in range(3)]
    assert diagnose(facts(records=[record(groups={"g": group})], cluster_ray_version="2.60.0")) == []


def test_a_rank_on_a_draining_node_is_a_warning_that_says_whether_a_hand_over_comes():
    drains = [DrainRecord(NOW - 1, "g", 0, NODE, NOW + 20), DrainRecord(NOW - 1, "g", 1, NODE, NOW + 20, "no_capacity", "no free spare bundle")]
    found = diagnose(facts(records=[record(drains=drains)], cluster_ray_version="2.60.0"))
    assert kinds(found) == [("node draining", "job/g rank 0"), ("node draining", "job/g rank 1")]
    assert "a hand-over is on its way" in found[0].detail and "deadline in 20s" in found[0].detail
    assert "will not be handed over (no_capacity): no free spare bundle" in found[1].detail and "capacity_factor" in found[1].fix


# -- real faults on a real cluster -----------------------------------------------------------------

def test_every_kind_has_a_severity_and_fail_on_picks_the_threshold():
    from supervisor.cli.doctor import Finding, Severity, fails

    def found(kind):
        return Finding(kind, "s", "d", "f")

    assert {k: found(k).severity for k in FindingKind}  # every kind has one
    restart, leak, hung = found(FindingKind.RESTARTS), found(FindingKind.LEAKED_PLACEMENT_GROUP), found(FindingKind.HUNG)
    assert (restart.severity, leak.severity, hung.severity) == (Severity.INFO, Severity.WARNING, Severity.ERROR)
    assert not fails([restart], Severity.WARNING) and fails([restart], Severity.INFO)  # a restart alone is not a failure
    assert fails([restart, leak], Severity.WARNING) and not fails([restart, leak], Severity.ERROR)
    assert fails([hung], Severity.ERROR) and not fails([hung], None) and not fails([], Severity.INFO)
    assert leak.as_dict()["severity"] == "warning" and "[warning: leaked placement group] s: d" in render_findings([leak])
    assert Severity.parse("error") is Severity.ERROR


from daemon_harness import BIN, ENV, TESTS_DIR  # noqa: E402 - the real-cluster half starts here


@pytest.fixture(scope="module")
def cluster():
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    c = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 4, "include_dashboard": False})
    try:
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False, namespace="doctor-tests")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def doctor(address: str, *args: str) -> tuple[int, list[dict]]:
    result = subprocess.run([str(BIN / "supervisor"), "doctor", "--address", address, "--json", *args], capture_output=True, text=True, env=ENV, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_doctor_on_a_real_cluster(cluster, tmp_path):
    assert doctor(cluster.address) == (0, [])  # healthy
    # A detached placement group whose job has ended: leaked.
    script = f"import ray; ray.init(address={cluster.address!r}); from ray.util import placement_group as p; "
    script += "g = p([{'GPU': 2}], name='other-job-gpus', lifetime='detached'); g.wait(30)"
    subprocess.run([sys.executable, "-c", script], check=True, env=ENV, capture_output=True, timeout=60)
    time.sleep(1)
    code, found_leak = doctor(cluster.address)
    assert code == 1 and [(f["kind"], f["subject"]) for f in found_leak] == [("leaked placement group", "other-job-gpus")]
    assert found_leak[0]["phase"] == "before scheduling" and "GPU 2" in found_leak[0]["detail"]
    # A spec whose colocated groups do not fit a bundle, and whose pools do not fit the cluster.
    spec = tmp_path / "misfit.toml"
    spec.write_text(textwrap.dedent("""
        [supervisor]
        name = "misfit"
        [pools.p]
        process_on_nodes = [4, 4]
        max_colocate_count = 2
        [groups.a]
        pool = "p"
        class = "workers:CounterWorker"
        gpus_per_worker = 0.75
        [groups.b]
        pool = "p"
        class = "workers:CounterWorker"
    """))  # fmt: skip
    code, found = doctor(cluster.address, "--spec", str(spec))
    assert code == 1
    assert [f["detail"] for f in found if f["kind"] == "budget misfit"] == [
        "a 0.75 + b 0.5 GPU = 1.25 > 1 GPU per bundle",
        "pools misfit/p 16 CPU = 16 > 8 CPU in the cluster",
        "pools misfit/p 8 GPU = 8 > 4 GPU in the cluster",
    ]
    assert any(f["kind"] == "infeasible" and f["subject"] == "misfit/p" for f in found)
    fix = found_leak[0]["fix"]
    assert fix.startswith('remove it: python -c "')
    command = fix.removeprefix("remove it: ").replace("python", sys.executable, 1)
    subprocess.run(command, shell=True, check=True, env={**ENV, "RAY_ADDRESS": cluster.address}, capture_output=True, timeout=60)  # as given
    time.sleep(1)
    assert doctor(cluster.address) == (0, [])


def test_doctor_names_the_rank_failing_its_init_while_the_daemon_retries(cluster, tmp_path):
    import signal

    from supervisor.daemon.record import RecordStore

    spec = tmp_path / "initfail.toml"
    spec.write_text(textwrap.dedent(f"""
        [supervisor]
        name = "initfail"
        [ray]
        python_path = ["{TESTS_DIR}"]
        [pools.p]
        process_on_nodes = [2]
        [groups.g]
        pool = "p"
        class = "workers:InitWorker"
        kwargs = {{ counter_dir = "{tmp_path}", bad_rank = 1, bad_times = -1 }}
        init_method = "init_model"
        init_attempts = 100
        [metrics]
        enabled = false
    """))  # fmt: skip
    daemon = subprocess.Popen([str(BIN / "supervisor"), "start", str(spec), "--address", cluster.address, "--log-json"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            record = RecordStore().get("initfail")
            if record is not None and any(f.reason == "init_raised" for f in record.failures):
                break
            assert time.monotonic() < deadline and daemon.poll() is None, "the daemon never reported the failing init"
            time.sleep(0.3)
        code, found = doctor(cluster.address)
        assert code == 1
        assert [(f["phase"], f["kind"], f["subject"]) for f in found] == [("during initialisation", "init failing", "initfail/g rank 1")]
        assert found[0]["detail"].startswith("init raised: ValueError: bad weights on rank 1")
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0


def test_a_waiting_placement_group_says_what_is_missing_and_who_holds_it():
    pgs = (
        PlacementGroupRecord("11", "job.p:pg2:0", "PENDING", "STRICT_PACK", ({"CPU": 1.0, "GPU": 1.0},) * 2),
        PlacementGroupRecord("22", "old-sweep-gpus", "CREATED", "PACK", ({"GPU": 3.0},), {0: NODE}),
    )
    snapshot = ClusterSnapshot(SNAPSHOT.nodes, {"CPU": 8, "GPU": 1}, pgs)
    (finding,) = diagnose(facts(snapshot=snapshot, records=[record()]))
    assert (finding.kind, finding.subject) == (FindingKind.WAITING, "job.p:pg2:0")
    assert "0/2 bundles placed" in finding.detail and "old-sweep-gpus [CREATED] holds GPU 3" in finding.detail



def test_doctor_fail_on_sets_the_exit_code_on_a_real_cluster(cluster):
    env = {**ENV, "RAY_ADDRESS": cluster.address}
    script = f"import ray; ray.init(address={cluster.address!r}); from ray.util import placement_group as p; "
    script += "g = p([{'CPU': 1}], name='fail-on-leak', lifetime='detached'); g.wait(30)"
    subprocess.run([sys.executable, "-c", script], check=True, env=env, capture_output=True, timeout=60)
    time.sleep(1)
    codes = {}
    for level in ("warning", "error", "never"):
        out = subprocess.run([str(BIN / "supervisor"), "doctor", "--fail-on", level], capture_output=True, text=True, env=env, timeout=60)
        codes[level] = out.returncode
        assert "[warning: leaked placement group] fail-on-leak" in out.stdout, out.stdout + out.stderr
    assert codes == {"warning": 1, "error": 0, "never": 0}
    _, (leak,) = doctor(cluster.address)
    command = leak["fix"].removeprefix("remove it: ").replace("python", sys.executable, 1)
    subprocess.run(command, shell=True, check=True, env=env, capture_output=True, timeout=60)  # as printed
    time.sleep(1)
    assert doctor(cluster.address) == (0, [])


def test_a_stateful_group_without_a_snapshot_and_replicas_that_diverged():
    from supervisor.daemon.record import StateRecord

    def group(name: str, state: StateRecord) -> GroupRecord:
        ranks = [RankStatus(r, WorkerState.RUNNING, 0, NODE, NODE) for r in range(3)]
        return GroupRecord(name, "p", "m:C", ["a", "b", "c"], state="running", initialized=True, ranks=ranks, training_state=state)

    protected = StateRecord("sharded", snapshot_every=1, last_snapshot_step=4)
    replicated = StateRecord("replicated", snapshot_every=0, digest_step=4, digests={"0": "aa", "1": "aa", "2": "aa"})
    ok = record(groups={"actor": group("actor", protected), "critic": group("critic", replicated)})
    # The critic has no snapshot, but the actor is sharded: a rollback needs a step both hold.
    (finding,) = diagnose(facts(records=[ok], cluster_ray_version="2.60.0"))
    assert (finding.kind, finding.subject) == (FindingKind.STATE_UNPROTECTED, "job/critic") and "snapshot_every" in finding.fix
    replicated.last_snapshot_step = 4
    assert diagnose(facts(records=[ok], cluster_ray_version="2.60.0")) == []
    # A replicated group alone (three live peers) needs no snapshot.
    alone = StateRecord("replicated", digest_step=4, digests={"0": "aa", "1": "aa", "2": "aa"})
    assert diagnose(facts(records=[record(groups={"critic": group("critic", alone)})], cluster_ray_version="2.60.0")) == []
    protected.held_bytes, protected.bound_bytes, protected.steps_in_memory = 52 * 2**20, 64 * 2**20, [3, 4]
    (finding,) = diagnose(facts(records=[ok], cluster_ray_version="2.60.0"))
    assert (finding.kind, finding.subject) == (FindingKind.STATE_MEMORY, "job/actor")
    assert finding.detail.startswith("snapshots hold 52.0 of snapshot_memory_mb = 64 MiB (steps [3, 4])")
    protected.held_bytes = 16 * 2**20
    # A replaying group whose log nears replay_log_mb: the next boundary snapshots early (said, not alarming).
    protected.replay_log_calls, protected.replay_log_bytes, protected.replay_log_bound_bytes = 3, 400 * 2**20, 512 * 2**20
    (finding,) = diagnose(facts(records=[ok], cluster_ray_version="2.60.0"))
    assert (finding.kind, finding.subject, finding.severity.name) == (FindingKind.REPLAY_LOG, "job/actor", "INFO")
    assert finding.detail.startswith("the replay log holds 3 call(s) taking 400.0 of replay_log_mb = 512 MiB")
    protected.replay_log_bytes = 2**20
    assert diagnose(facts(records=[ok], cluster_ray_version="2.60.0")) == []
    replicated.digests["2"], replicated.diverged_ranks = "bb", [2]
    (finding,) = diagnose(facts(records=[ok], cluster_ray_version="2.60.0"))
    assert (finding.kind, finding.subject, finding.severity.name) == (FindingKind.STATE_DIVERGED, "job/critic rank(s) [2]", "ERROR")
    assert "at step 4 (rank 0: aa, rank 1: aa, rank 2: bb)" in finding.detail
