"""The chaos suite: its pure invariants and report, and the quick profile of every scenario run as users
run it (``python -m chaos all --quick``) against a real local cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import ENV

from chaos.invariants import (
    FinalState,
    RankState,
    StepAccount,
    account_steps,
    check_drift,
    check_nothing_left,
    check_restarts,
    check_state_intact,
    check_steps,
    final_state,
)
from chaos.report import Report, Stats


def _failed_daemon_logs(reports: Path, work: Path, lines: int = 40) -> str:
    """The last lines of every daemon log of each scenario that failed (what CI's output keeps)."""
    out = []
    for report in sorted(reports.glob("*.json")):
        if json.loads(report.read_text()).get("ok", True):
            continue
        for log in sorted((work / report.stem).glob("daemon-*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out += [f"\n--- {report.stem}/{log.name} (last {len(tail)} lines)", *tail]
    return "\n".join(out)


LIFECYCLE_ONLY_IN_QUICK = ("starvation", "teardown", "slow-stop", "detach-gc")


# First in the module, the longest test of the suite: under xdist a worker is handed its next module
# while the last two tests of its current one run (tests/conftest.py), and that module would wait
# behind this test; the quick unit tests come after it instead.
@pytest.mark.timeout(2100)
def test_every_scenario_holds_its_invariants_in_the_quick_profile(tmp_path):
    """``python -m chaos all --quick``: actor kills, a node loss under load, daemon kills, a hang, a crash
    loop, starvation, teardown cycles, a paused daemon taken over, a daemon killed mid-recovery, a
    detached job past gc, a slow stop, a kill inside a snapshot, a node lost with its shards' second
    copies, a preemption notice handed over, one too short, and GCS restarts,
    each against the example RLHF job (its trained groups too) on one local cluster. Every scenario
    whose job ends cleanly checks the trained state against a fault-free reference run computed for
    real (chaos/reference.py), so that computation runs here too."""
    work = tmp_path / "work"  # the daemons' logs, kept: a failure shows their last lines below
    proc = subprocess.run(
        [sys.executable, "-m", "chaos", "all", "--quick", "--seed", "1", "--out", str(tmp_path), "--workdir", str(work)],
        env=ENV, capture_output=True, text=True, timeout=2100,
    )  # fmt: skip
    summaries = [line for line in proc.stdout.splitlines() if not line.startswith("{")]
    assert proc.returncode == 0, "\n".join(summaries) + "\n" + proc.stderr[-3000:] + _failed_daemon_logs(tmp_path, work)
    reports = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(reports) == sorted(
        f"{name}-quick"
        for name in (
            "actor-kill", "node-loss", "supervisor-kill", "hang", "crash-loop", "starvation", "teardown",
            "pause", "kill-during-recovery", "detach-gc", "slow-stop", "snapshot-kill", "copies-loss", "preempt",
            "preempt-short", "gcs-restart",
        )  # fmt: skip
    )
    for name, report in reports.items():
        assert report["ok"] and report["faults_recovered"] >= 1 and report["items_lost"] == report["items_duplicated"] == 0, name
        assert not report["leaked"], name
        # crash-loop's jobs fail by design (no state at their end); the daemon-lifecycle scenarios run
        # without the trained groups in the quick profile (CI's time), with them in the full one.
        if name.removesuffix("-quick") not in ("crash-loop", *LIFECYCLE_ONLY_IN_QUICK):
            assert report["notes"]["trained ranks checked against a fault-free run"] >= 4, name
    # A preemption with notice costs nothing: no restart charged, no step rolled back, a hand-over timed.
    notes = reports["preempt-quick"]["notes"]
    assert notes["restarts charged"] == notes["steps rolled back"] == 0 and notes["hand-over (call boundary -> successor serving, s)"]


def _steps(steps, lost=0, duplicated=0):
    return StepAccount(list(steps), 64 * len(steps), lost, duplicated, [f"step 1 generate: {lost} lost, {duplicated} duplicated"] if lost or duplicated else [])


def test_steps_must_be_contiguous_complete_and_lossless():
    assert check_steps(_steps([0, 1, 2]), min_steps=3) == []
    assert check_steps(_steps([0, 2]), min_steps=1) == ["steps skipped: [1]"]
    assert check_steps(_steps([0, 1, 1, 2]), min_steps=1) == ["steps run more than once: [1]"]
    assert check_steps(_steps([0, 1, 1, 2]), min_steps=1, allow_reruns=True) == []  # the step a killed daemon was in
    assert check_steps(_steps([0, 1, 2, 0]), min_steps=1, allow_reruns=True) == ["the driver went back from step 2 to 0"]
    assert check_steps(_steps([0]), min_steps=2) == ["only 1 step(s) completed, expected at least 2"]
    assert check_steps(_steps([0, 1], lost=3), min_steps=1) == ["items: step 1 generate: 3 lost, 0 duplicated"]


def test_step_accounting_reads_the_drivers_events():
    events = [
        {"event": "rlhf_step", "step": 0, "items": 64},
        {"event": "worker_failed"},
        {"event": "rlhf_step", "step": 1, "items": 64},
        {"event": "rlhf_items_mismatch", "step": 2, "method": "generate", "lost": 2, "duplicated": 1},
    ]
    account = account_steps(events)
    assert (account.steps, account.items, account.lost, account.duplicated) == ([0, 1], 128, 2, 1)


def test_a_rollback_announces_the_steps_the_driver_replays():
    events = [
        {"event": "rlhf_start", "start_step": 0},
        *({"event": "rlhf_step", "step": s, "items": 64} for s in range(5)),
        {"event": "rlhf_rolled_back", "from_step": 5, "to_step": 3},
        *({"event": "rlhf_step", "step": s, "items": 64} for s in range(3, 7)),
    ]
    account = account_steps(events)
    assert account.rollbacks == 1 and account.steps == [0, 1, 2, 3, 4, 3, 4, 5, 6]
    assert check_steps(account, min_steps=7) == []  # 3 and 4 replayed, as announced
    skipping = account_steps([*events[:7], {"event": "rlhf_step", "step": 5, "items": 64}])
    assert check_steps(skipping, min_steps=1) == ["steps skipped on a replay: [3, 4]"]
    unannounced = account_steps([*events[:6], {"event": "rlhf_step", "step": 3, "items": 64}])
    assert check_steps(unannounced, min_steps=1) == ["steps run more than once: [3]"]
    # A restarted daemon's driver resumes from the trained state's step, which its start announces.
    restart = [*events[:6], {"event": "rlhf_start", "start_step": 3}, {"event": "rlhf_step", "step": 3, "items": 64}]
    assert check_steps(account_steps(restart), min_steps=1, allow_reruns=True) == []
    assert check_steps(account_steps(restart), min_steps=1) == ["the driver restarted at step 3 after step 4"]


def _final(steps, **groups):
    return FinalState(steps, {g: [RankState(r, s, d) for r, (s, d) in enumerate(ranks)] for g, ranks in groups.items()})


def test_trained_state_must_be_the_fault_free_runs_bit_for_bit():
    reference = {"actor": ["a0", "a1"], "critic": ["c", "c"]}
    assert check_state_intact(_final(7, actor=[(7, "a0"), (7, "a1")], critic=[(7, "c"), (7, "c")]), reference) == []
    assert check_state_intact(_final(7, actor=[(7, "a0"), (7, "x")], critic=[(7, "c"), (7, "c")]), reference) == [
        "actor rank 1: state digest x at step 7, a fault-free run has a1"
    ]
    # A step applied twice (or skipped) shows in the counter, whatever the digest.
    assert check_state_intact(_final(7, actor=[(8, "a0"), (7, "a1")], critic=[(7, "c"), (7, "c")]), reference) == [
        "actor rank 0: state at step 8, but the job ran 7 step(s)"
    ]
    assert check_state_intact(_final(7, actor=[(7, "a0")]), reference) == [
        "actor: state of ranks [0], expected ranks 0..1",
        "critic: state of ranks [], expected ranks 0..1",
    ]


def test_final_state_is_read_from_the_jobs_end_or_its_stop():
    state = {"actor": [{"rank": 0, "step": 4, "digest": "a"}]}
    done = [{"event": "rlhf_done", "steps": 4, "run_steps": 4, "state": state}]
    assert final_state(done) == _final(4, actor=[(4, "a")])
    stopped = [{"event": "rlhf_stopped", "next_step": 9}, {"event": "chaos_trained_state", "state": state}]
    assert final_state(stopped) == _final(9, actor=[(4, "a")])
    late_rollback = [{"event": "rlhf_stopped", "next_step": 9}, {"event": "chaos_trained_state", "state": state, "rolled_back_to": 4}]
    assert final_state(late_rollback) == _final(4, actor=[(4, "a")])
    assert final_state([{"event": "rlhf_stopped", "next_step": 9}]) is None


def test_restarts_drift_and_leaks_are_compared_exactly():
    assert check_restarts({("rollout", 1): 2}, {("rollout", 1): 2, ("reference", 0): 0}) == []
    assert check_restarts({("rollout", 1): 2}, {("rollout", 1): 1, ("reference", 0): 1}) == [
        "reference rank 0: 0 kill(s) but 1 restart(s)",
        "rollout rank 1: 2 kill(s) but 1 restart(s)",
    ]
    assert check_drift({("rollout", 0)}, {("rollout", 0)}) == []
    assert check_drift({("rollout", 0)}, {("rollout", 1)}) == [
        "moved but not reported drifted: [('rollout', 0)]",
        "reported drifted but did not move: [('rollout', 1)]",
    ]
    assert check_nothing_left(["x.p:pg2:0"], ["kv"], True) == ["placement group x.p:pg2:0", "actor kv", "state record"]


def test_report_is_ok_only_without_violations_losses_or_leaks(tmp_path):
    report = Report("actor-kill", "quick", 7, 0.0, detection=Stats.of([0.004, 0.002, 0.010]))
    assert report.ok and report.detection == Stats(3, 0.004, 0.01, 0.01)
    json_path, text_path = report.write(tmp_path)
    assert json.loads(json_path.read_text())["ok"] is True
    assert "chaos actor-kill (quick, seed 7): OK" in text_path.read_text()
    for broken in ({"items_lost": 1}, {"items_duplicated": 1}, {"leaked": ["actor kv"]}, {"violations": ["steps skipped: [3]"]}):
        assert not Report("x", "quick", 0, 0.0, **broken).ok
