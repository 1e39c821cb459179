"""Pure parts of the daemon's bookkeeping: the state record, liveness, the status layout, exit codes."""

from __future__ import annotations

import dataclasses

from supervisor.cli.status import (
    DriftedRank,
    GroupStatus,
    PlacementGroupStatus,
    PoolStatus,
    StatusReport,
    SupervisorStatus,
    render_status,
    short_node,
)
from supervisor.daemon.daemon import ExitCode, StopReason
from supervisor.daemon.record import (
    DrainRecord,
    FailureEvent,
    GroupRecord,
    Liveness,
    PoolRecord,
    StandbyRecord,
    SupervisorRecord,
    liveness,
)
from supervisor.daemon.startup import restored_restarts as _restored_restarts
from supervisor.supervision import RankStatus, WorkerState

NOW = 1_800_000_000.0


def record(heartbeat_age_s: float = 0.0) -> SupervisorRecord:
    return SupervisorRecord(
        name="demo", namespace="supervisor.demo", owner="abc", pid=42, host="h", started_at=NOW - 100,
        heartbeat_at=NOW - heartbeat_age_s, heartbeat_interval_s=1.0, orphan_grace_s=30.0,
        pools={"p": PoolRecord("p", "demo.p", ["demo.p:pg2:0"], {"demo.p:pg2:0": ["n1", "n1"]}, [2], "demo.p:pg2:spare1")},
        groups={"g": GroupRecord("g", "p", "m:C", ["g_C_0:0", "g_C_standby-1a2b"], state="running", initialized=True,
                                 ranks=[RankStatus(0, WorkerState.RUNNING, 0, "n1", "n1"), RankStatus(1, WorkerState.RUNNING, 0, "n2", "n1", restarts=1)],
                                 restarts=[[1, "node_lost", NOW - 5], [0, "died", NOW - 900]],
                                 bundles=[[0, 0], [1, 0]], standbys=[StandbyRecord("g_C_standby-3c4d", [0, 1], "n1")], standbys_wanted=1)},
        failures=[FailureEvent(NOW - 5, "g", 1, "node_lost", "ActorDiedError: node gone")],
        drains=[DrainRecord(NOW - 2, "g", 0, "n1", NOW + 28, "no_capacity", "no ready standby")],
        driver_progress={"step": 7},
    )  # fmt: skip


def test_record_round_trips_through_json():
    original = record()
    clone = SupervisorRecord.from_json(original.to_json())
    assert clone == original
    assert clone.groups["g"].ranks[1].drifted and not clone.groups["g"].ranks[0].drifted


def test_a_large_record_is_stored_compressed_with_the_same_content():
    import dataclasses
    import json
    import zlib

    from bench.daemon_scale import simulated_record
    from supervisor.daemon.record import COMPRESS_ABOVE_BYTES

    small, large = record().to_json(), simulated_record("big", 1024, 128)
    assert small.startswith(b"{") and len(small) < COMPRESS_ABOVE_BYTES  # a small record stays readable JSON
    stored = large.to_json()
    assert len(stored) < len(zlib.decompress(stored)) / 10
    assert SupervisorRecord.from_json(stored) == large
    rows = json.loads(zlib.decompress(stored))["groups"]["actor"]["ranks"]
    assert rows["fields"][:4] == ["rank", "state", "generation", "node_id"] and len(rows["rows"]) == 512
    # What an earlier version wrote (an object per rank, uncompressed) still reads.
    assert SupervisorRecord.from_json(json.dumps(dataclasses.asdict(large)).encode()) == large


def test_liveness_by_silence_on_one_clock():
    assert liveness(record(), 0.5) is Liveness.ALIVE
    assert liveness(record(), 3.5) is Liveness.STALE  # more than three beats missed
    assert liveness(record(), 31) is Liveness.ORPHANED  # past the grace period
    assert liveness(dataclasses.replace(record(), state="detached"), 10**6) is Liveness.DETACHED  # never orphaned


def test_restarts_in_window_and_restored_onto_this_clock():
    group = record().groups["g"]
    assert group.restarts_in_window(NOW) == 1  # the one 900 s ago is outside the 600 s window
    history, counts = _restored_restarts(group)
    assert [(h.rank, h.reason.value) for h in history] == [(1, "node_lost"), (0, "died")]
    assert abs(history[0].at - history[1].at - 895.0) < 1e-6
    assert counts == {0: 0, 1: 1}


def test_exit_codes_of_each_stop_reason():
    ok = {StopReason.SIGTERM, StopReason.SIGINT, StopReason.STOP_COMMAND, StopReason.DETACH_COMMAND, StopReason.SIGTERM_DETACH, StopReason.DRIVER_RETURNED}
    for reason in StopReason:
        assert reason.exit_code is (ExitCode.OK if reason in ok else ExitCode.FAILED)


def report(alive: bool) -> StatusReport:
    sup = SupervisorStatus(
        name="demo", liveness="alive" if alive else "orphaned", state="running", pid=42, host="h", started_at=NOW - 3725,
        heartbeat_at=NOW - (0.4 if alive else 95), heartbeat_age_s=0.4 if alive else 95, metrics_address="127.0.0.1:9400",
        pools=[PoolStatus("p", [PlacementGroupStatus("demo.p:pg2:0", "RESCHEDULING", 1, 2, ["a" * 56, None])])],
        groups=[GroupStatus("g", "p", "recovering", 2, 1, 1, 0, 1, 600.0, 10, [DriftedRank(1, "a" * 56, "b" * 56)], not alive, None, 2, 1, 1)],
        failures=[],
    )  # fmt: skip
    return StatusReport(generated_at=NOW, supervisors=[sup])


def test_render_running_supervisor():
    text = render_status(report(alive=True))
    lines = text.splitlines()
    assert lines[0].startswith("======== Supervisor status: ") and lines[0].endswith(" ========")
    assert lines[1:4] == ["Supervisors", "-" * 63, "Running:"]
    assert lines[4] == " demo: running, pid 42 on h, up 1h02m05s, heartbeat 0.4s ago, metrics on 127.0.0.1:9400"
    assert lines[5:7] == ["Not running:", " (no stopped supervisors)"]
    assert f" demo.p:pg2:0 RESCHEDULING 1/2 bundles placed [0:{short_node('a' * 56)} 1:(unplaced)]" in lines
    assert " workers: 1 alive, 1 restarting, 0 failed" in lines
    assert " drift: rank 1 node_aaaaaaaaaaaa -> node_bbbbbbbbbbbb" in lines
    assert " standbys: 1/2 ready, 1 starting" in lines
    assert lines[-4:] == ["Pending Demands:", " (no resource demands)", "Warnings:", " (no warnings)"]


def test_a_rank_on_a_draining_node_shows_its_deadline_and_why_it_is_not_handed_over():
    with_drains = dataclasses.replace(report(alive=True).supervisors[0], drains=[
        DrainRecord(NOW - 2, "g", 0, "a" * 56, NOW + 28, "no_capacity", "no ready standby"),
        DrainRecord(NOW - 2, "g", 1, "a" * 56, None),
    ])  # fmt: skip
    lines = render_status(StatusReport(generated_at=NOW, supervisors=[with_drains])).splitlines()
    assert " draining: rank 0 on node node_aaaaaaaaaaaa, deadline in 28s; no hand-over (no_capacity): no ready standby" in lines
    assert " draining: rank 1 on node node_aaaaaaaaaaaa, no deadline; hand-over on its way" in lines


def test_render_shows_failed_record_writes_and_detached_jobs():
    failing = report(alive=True)
    failing.supervisors[0].record_write_failures = 3
    failing.supervisors[0].last_record_write_error = "GetTimeoutError: the GCS did not answer"
    assert "; 3 record write(s) failed, last: GetTimeoutError: the GCS did not answer" in render_status(failing)
    detached = report(alive=False)
    detached.supervisors[0].liveness = "detached"
    detached.supervisors[0].detached_grace_s = 86400.0
    text = render_status(detached)
    assert " demo: detached 1m35s ago (pid 42 on h); its pools and workers run on: start the same spec to re-adopt them" in text
    assert "(`supervisor gc` collects it after 24h00m00s, or with --include-detached)" in text and "orphaned" not in text


def test_render_daemon_down_says_since_when_and_where_counts_come_from():
    text = render_status(report(alive=False))
    assert "Running:\n (no running supervisors)" in text
    assert "daemon not running since " in text and "(last heartbeat 1m35s ago, pid 42 on h); orphaned: `supervisor gc`" in text
    assert " workers: 1 alive, 1 restarting, 0 failed (from the cluster: daemon not running)" in text


def test_render_empty_cluster():
    text = render_status(StatusReport(generated_at=NOW))
    assert "Pools\n" + "-" * 63 + "\n (no pools)" in text
    assert "Groups\n" + "-" * 63 + "\n (no groups)\nRecent failures:\n (no failures)" in text


def test_teardown_scope():
    from supervisor.daemon.daemon import TeardownScope, teardown_scope

    assert teardown_scope(StopReason.SIGTERM, adopting=True) is TeardownScope.EVERYTHING
    assert teardown_scope(StopReason.GROUP_FAILED, adopting=True) is TeardownScope.EVERYTHING
    assert teardown_scope(StopReason.START_FAILED, adopting=False) is TeardownScope.EVERYTHING
    # A failed re-adoption keeps the job that survived the crash; a superseded daemon owns nothing.
    assert teardown_scope(StopReason.START_FAILED, adopting=True) is TeardownScope.NOTHING
    assert teardown_scope(StopReason.SUPERSEDED, adopting=False) is TeardownScope.NOTHING
    assert teardown_scope(StopReason.DETACH_COMMAND, adopting=False) is TeardownScope.NOTHING
    assert teardown_scope(StopReason.SIGTERM_DETACH, adopting=False) is TeardownScope.NOTHING


def test_wide_adds_every_rank_and_the_document_carries_a_schema_version():
    import yaml

    from supervisor.cli.status import (
        STATUS_SCHEMA_VERSION,
        RankRow,
        _rank_rows,
        status_to_json,
        status_to_yaml,
    )

    processes = {"g_C_0:0": [("ab" * 16, 4242, "n1")], "g_C_standby-1a2b": [("x", 1, "n1"), ("y", 2, "n2")]}
    rows = _rank_rows(record().groups["g"], record().failures, processes)
    assert rows == [
        RankRow(0, "running", "n1", "n1", "g_C_0:0", "ab" * 16, 4242, 0, None),
        # Two live actors of that name (another supervisor's namespace): the one on this rank's node.
        RankRow(1, "running", "n2", "n1", "g_C_standby-1a2b", "y", 2, 1, "node_lost: ActorDiedError: node gone"),
    ]
    processes["g_C_standby-1a2b"].append(("z", 3, "n2"))  # still two candidates: none is shown
    ambiguous = _rank_rows(record().groups["g"], [], processes)[1]
    assert (ambiguous.actor_id, ambiguous.pid) == (None, None)
    wide = report(alive=True)
    wide.supervisors[0].groups[0].ranks = rows
    text = render_status(wide, wide=True)
    header = next(line for line in text.splitlines() if "RANK" in line)
    assert header.split() == ["RANK", "STATE", "NODE", "ORIGINAL", "NODE", "ACTOR", "ID", "PID", "RESTARTS", "LAST", "FAILURE"]
    assert any(line.split()[:7] == ["0", "running", "node_n1", "node_n1", "ab" * 16, "4242", "0"] for line in text.splitlines())
    assert "RANK" not in render_status(wide)  # the default view stays as it was
    document = status_to_json(wide)
    assert document["schema_version"] == STATUS_SCHEMA_VERSION == 1
    assert yaml.safe_load(status_to_yaml(wide)) == document


def test_a_stateful_group_shows_its_state_kind_and_last_snapshot_when_wide_and_divergence_always():
    from supervisor.cli.status import status_to_json
    from supervisor.daemon.record import StateRecord

    state = StateRecord(
        "sharded", snapshot_every=1, last_snapshot_step=12, last_snapshot_at=NOW - 3, held_bytes=3 * 2**20, bound_bytes=64 * 2**20,
        steps_in_memory=[11, 12, 13], steps_on_disk=[10], last_rollback_step=9, last_rollback_medium="memory",
    )  # fmt: skip
    rec = record()
    rec.groups["g"].training_state = state
    assert SupervisorRecord.from_json(rec.to_json()) == rec  # the record carries it
    shown = report(alive=True)
    shown.supervisors[0].groups[0].training_state = state
    wide = render_status(shown, wide=True)
    assert "state: sharded, last complete snapshot at step 12, 3s ago (every 1 step(s)); 3.0/64 MiB in memory (steps [11, 12, 13])" in wide
    assert "state on disk: steps [10]" in wide and "last rollback: to step 9 from memory" in wide
    assert "replay log" not in wide  # it rolls back
    state.replay_log_calls, state.replay_log_bytes, state.replay_log_bound_bytes = 2, 3 * 2**20, 512 * 2**20
    assert SupervisorRecord.from_json(rec.to_json()) == rec
    assert "recovery: replay; replay log: 2 call(s) since the newest snapshot, 3.0/512 MiB" in render_status(shown, wide=True)
    assert "state:" not in render_status(shown)  # the default view stays short...
    state.kind, state.diverged_ranks, state.digest_step, state.digests = "replicated", [1], 12, {"0": "aa", "1": "bb", "2": "aa"}
    assert "state DIVERGED: rank(s) [1] differ from their replicas at step 12" in render_status(shown)  # ...unless replicas diverged
    assert status_to_json(shown)["supervisors"][0]["groups"][0]["training_state"]["diverged_ranks"] == [1]
