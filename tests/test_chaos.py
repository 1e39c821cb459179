"""The chaos suite: its pure invariants and report, and the quick profile of every scenario run as users
run it (``python -m chaos all --quick``) against a real local cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from daemon_harness import ENV

from chaos.invariants import (
    StepAccount,
    account_steps,
    check_drift,
    check_nothing_left,
    check_restarts,
    check_steps,
)
from chaos.report import Report, Stats


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


@pytest.mark.timeout(1500)
def test_every_scenario_holds_its_invariants_in_the_quick_profile(tmp_path):
    """``python -m chaos all --quick``: actor kills, a node loss, daemon kills, a hang, a crash loop,
    starvation, teardown cycles, a paused daemon taken over, a daemon killed mid-recovery, a detached
    job past gc, and a slow stop, each against the example RLHF job on one local cluster."""
    proc = subprocess.run(
        [sys.executable, "-m", "chaos", "all", "--quick", "--seed", "1", "--out", str(tmp_path)],
        env=ENV, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    summaries = [line for line in proc.stdout.splitlines() if not line.startswith("{")]
    assert proc.returncode == 0, "\n".join(summaries) + "\n" + proc.stderr[-3000:]
    reports = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(reports) == sorted(
        f"{name}-quick"
        for name in (
            "actor-kill", "node-loss", "supervisor-kill", "hang", "crash-loop", "starvation", "teardown",
            "pause", "kill-during-recovery", "detach-gc", "slow-stop",
        )  # fmt: skip
    )
    for name, report in reports.items():
        assert report["ok"] and report["faults_recovered"] >= 1 and report["items_lost"] == report["items_duplicated"] == 0, name
        assert not report["leaked"], name
