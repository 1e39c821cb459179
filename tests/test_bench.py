"""The benchmark suite's bookkeeping (pure): statistics, goals and the RESULTS.md table. The
benchmarks themselves are a separate command (``python -m bench``), never timed tests."""

from __future__ import annotations

import pytest

from bench.__main__ import render
from bench.common import Row, Stat


def test_stat_median_and_p95():
    stat = Stat.of([0.001 * i for i in range(1, 101)])
    assert (round(stat.median, 4), round(stat.p95, 3), stat.n) == (0.0505, 0.095, 100)
    assert Stat.of([0.5]).show("s") == "0.5 s (p95 0.5)"


def test_goals_compare_the_ratio_of_medians():
    fast, slow = Stat(0.0010, 0.0012, 10), Stat(0.0011, 0.0013, 10)
    assert Row("b", "c", fast, "raw Ray", slow, "<= 1.10x").met is True
    assert Row("b", "c", slow, "raw Ray", fast, "<= 1.05x").met is False  # 1.10x
    assert Row("b", "c", slow, "raw Ray", slow, "< 1.0x").met is False  # equal is not below
    assert Row("b", "c", fast, "no reference", None).met is None and Row("b", "c", fast, "raw", slow).met is None
    assert Row("b", "c", Stat(96, 96, 1), "fault-free", Stat(100, 100, 1), ">= 0.95x", unit="steps/min").met is True
    assert Row("b", "c", Stat(94, 94, 1), "fault-free", Stat(100, 100, 1), ">= 0.95x", unit="steps/min").met is False
    assert Stat(96.04, 96.04, 1).show("steps/min") == "96 steps/min (p95 96)"


def test_results_table_has_one_line_per_row_with_ratio_and_verdict():
    rows = [
        Row("dispatch", "8 ranks", Stat(0.00105, 0.0012, 300), "raw Ray", Stat(0.001, 0.0011, 300), "<= 1.10x"),
        Row("dispatch", "8 ranks", Stat(0.00105, 0.0012, 300), "verl", Stat(0.001, 0.0011, 300), "< 1.0x"),
    ]
    text = render(rows, 60.0, "python -m bench")
    table = [line for line in text.splitlines() if line.startswith("| dispatch")]
    assert table[0] == "| dispatch | 8 ranks | 1.05 ms (p95 1.2) | raw Ray: 1 ms (p95 1.1) | 1.05× | <= 1.10× met |"
    assert table[1].endswith("| 1.05× | < 1.0× **missed** |")
    assert "One full run of `python -m bench`" in text


def test_a_section_is_spliced_in_place_and_appended_when_new():
    from bench.__main__ import render_section, splice_section

    rows = [Row("goodput", "standby", Stat(97, 97, 1), "fault-free", Stat(100, 100, 1), ">= 0.95x", unit="steps/min")]
    section = render_section("goodput", rows, 600.0, "python -m bench --only goodput")
    assert section.startswith("<!-- goodput -->\n## Goodput under faults\n") and section.endswith("![Steps over time under faults](goodput.png)\n<!-- /goodput -->\n")
    assert "| goodput | standby | 97 steps/min (p95 97) | fault-free: 100 steps/min (p95 100) | 0.97× | >= 0.95× met |" in section
    table = "# Benchmark results\n\n| a | b |\n"
    once = splice_section(table, "goodput", section)
    assert once == table + "\n" + section
    again = splice_section(once + "\ntrailer\n", "goodput", section.replace("97 steps", "98 steps"))
    assert again == table + "\n" + section.replace("97 steps", "98 steps") + "\ntrailer\n"


def _timeline(mode, windows):
    """A job whose windows (rate, seconds, steps per second, kills) follow one another, sampled each second."""
    from bench.goodput import Timeline, Window

    timeline, t, steps = Timeline(mode), 0.0, 0
    timeline.samples.append((0.0, 0))
    for rate, seconds, per_s, kills in windows:
        window = Window(rate, t, t + seconds, 0, [t + k for k in kills])
        for _ in range(int(seconds)):
            t += 1.0
            steps += per_s
            timeline.samples.append((t, steps))
        window.steps = per_s * int(seconds)
        timeline.windows.append(window)
    return timeline


def test_goodput_pools_each_rates_windows_against_the_fault_free_ones_between_them():
    from bench.goodput import Mode, pace, rows, stitched

    standby = _timeline(Mode.STANDBY, [(None, 60, 30, []), (30.0, 60, 27, [0, 30]), (None, 60, 28, []), (10.0, 60, 20, [0, 10, 20, 30, 40, 50])])
    supervised = _timeline(Mode.SUPERVISED, [(None, 60, 30, []), (30.0, 60, 24, [0, 30]), (None, 60, 30, []), (10.0, 60, 15, [0, 10, 20, 30, 40, 50])])
    baseline = [
        _timeline(Mode.CHECKPOINT_RESTART, [(None, 60, 30, [])]),
        _timeline(Mode.CHECKPOINT_RESTART, [(30.0, 120, 9, [30, 60, 90])]),
        _timeline(Mode.CHECKPOINT_RESTART, [(10.0, 120, 3, [10, 40, 70])]),
        _timeline(Mode.CHECKPOINT_RESTART, [(None, 60, 26, [])]),
    ]
    free, windows, kills = pace([standby], None)
    assert (free.median, free.p95, windows, kills) == (29 * 60, 30 * 60, 2, 0)  # pooled; p95 the fastest
    faulty, windows, kills = pace([standby], 30.0)
    assert (faulty.median, windows, kills) == (27 * 60, 1, 2)
    table = {(r.benchmark, r.case.split(" (")[0]): r for r in rows({Mode.STANDBY: [standby], Mode.SUPERVISED: [supervised], Mode.CHECKPOINT_RESTART: baseline})}
    effective = table[("goodput: steps/min with faults / fault-free", "supervised + standby, 1 SIGKILL / 30 s")]
    assert round(effective.ratio, 4) == round(27 / 29, 4) and effective.goal and effective.met is False
    assert "2 in 1 windows of 60 s" in effective.case
    assert round(table[("goodput: steps/min with faults / fault-free", "checkpoint-restart, 1 SIGKILL / 10 s")].ratio, 4) == round(3 / 28, 4)
    # Against the baseline, each way's effective time (its own fault-free pace as the unit), not raw
    # steps/min: the supervised way kept 15 of 30, the baseline 3 of 28 (the mean of its two runs).
    against = table[("goodput: effective time, against checkpoint-restart's", "supervised, 1 SIGKILL / 10 s")]
    assert (against.ours.median, round(against.ref.median, 4)) == (0.5, round(3 / 28, 4))
    assert round(against.ratio, 4) == round(0.5 / (3 / 28), 4) and not against.goal
    assert against.ours.show(against.unit) == "0.5 of fault-free (p95 0.5)"
    xs, ys, marks = stitched([standby], 10.0)
    assert (xs[0], ys[0], xs[-1], ys[-1], marks[:2]) == (0.0, 0, 60.0, 1200, [0.0, 10.0])


def test_goodput_stalls_are_stretches_without_a_step_inside_a_window():
    from bench.goodput import Mode, Timeline, Window

    timeline = Timeline(Mode.SUPERVISED, samples=[(0.0, 0), (1.0, 5), (1.5, 5), (2.0, 5), (3.0, 5), (3.5, 9), (4.0, 12)])
    assert timeline.stalls(Window(30.0, 0.0, 4.0, 12)) == [(1.5, 2.0)]
    assert timeline.stalls(Window(30.0, 3.0, 4.0, 7)) == []


def test_goodput_goal_takes_each_faulty_window_against_its_fault_free_neighbours():
    from bench.goodput import Mode, bootstrap_interval, goal_rows, paired_ratios

    # fault-free 40/s, kills 36/s, fault-free 44/s, kills 33/s, fault-free 44/s (a 10 s window with a kill at 10 s: ignored)
    timeline = _timeline(Mode.STANDBY, [(None, 60, 40, []), (30.0, 60, 36, [0, 30]), (None, 60, 44, []), (30.0, 60, 33, [0, 30]), (None, 60, 44, []), (10.0, 60, 30, [0])])
    ratios = paired_ratios(timeline, 30.0)
    assert [round(r, 4) for r in ratios] == [round(36 / 42, 4), 0.75]
    assert paired_ratios(timeline, 10.0) == [30 / 44]  # the last window has a neighbour on one side only
    low, high = bootstrap_interval(ratios)
    assert min(ratios) <= low <= sum(ratios) / 2 <= high <= max(ratios)
    assert bootstrap_interval([0.9] * 5) == (0.9, 0.9) and bootstrap_interval(ratios) == (low, high), "seeded"
    (row,) = goal_rows(timeline, 60.0)
    assert row.ours.median == sum(ratios) / 2 and row.ours.p95 == low and row.ratio == row.ours.median and row.met is False
    assert f"{low:.3f}–{high:.3f}" in row.case and "(4 in 2 windows of 60 s" in row.case


def test_kill_cost_counts_the_steps_not_done_after_an_event_at_the_pace_before_the_next():
    from bench.kill_cost import AFTER_S, GAP_S, _Events, rows

    def job(stall_s: float, events_at: list[float]) -> _Events:
        # 10 steps/s, except for ``stall_s`` without a step right after each event.
        samples, steps = [], 0
        for tick in range(int((events_at[-1] + GAP_S + 1) * 10)):
            t = tick / 10
            steps += 0 if any(e < t <= e + stall_s for e in events_at) else 1
            samples.append((t, steps))
        return _Events(samples=samples, at={"kill": events_at, "plain actor": events_at, "tensordict-importing actor": events_at})

    forked, plain = job(0.5, [3.0, 15.0]), job(2.0, [3.0, 15.0])
    assert [round(x, 1) for x in forked.lost_s("kill", 0, AFTER_S)] == [0.5, 0.5]
    assert [round(x, 1) for x in plain.lost_s("kill", 0, 1.0)] == [1.0, 1.0]
    assert [round(x, 1) for x in plain.lost_s("kill", 1.0, AFTER_S)] == [1.0, 1.0]
    table = rows({"forked": forked, "plain": plain})
    assert round(table[0].ratio, 2) == 0.25 and table[0].met is True and "2 kills" in table[0].case


def test_state_cost_alternates_kills_abba_and_names_a_wrong_state():
    from bench.state_cost import Recovery, alternate, rows

    calls = []
    mine, theirs = alternate(
        3, lambda rank: calls.append(("ours", rank)) or Recovery(2.0, True), lambda: calls.append(("ref", 0)) or Recovery(1.0, True), 2, settle_s=0
    )
    assert calls == [("ours", 0), ("ref", 0), ("ref", 0), ("ours", 1), ("ours", 0), ("ref", 0)]
    assert len(mine) == len(theirs) == 3
    snapshot = (Stat(0.0102, 0.011, 12), Stat(0.01, 0.0105, 12), Stat(0.002, 0.003, 120))
    peer = ([Recovery(1.2, True), Recovery(1.4, True)], [Recovery(1.0, True), Recovery(1.0, True)])
    rollback = ([Recovery(3.0, True), Recovery(3.0, False)], [Recovery(1.0, True), Recovery(2.0, True)])
    cost, restore, back = rows(64.0, [40.0, 120.0], snapshot, 10, peer, rollback)
    assert round(cost.ratio, 3) == 1.02 and cost.met is True and "the boundary alone 2.0 ms" in cost.case
    assert "state per rank 40, 120 MiB (mean 80)" in cost.case
    assert round(restore.ratio, 2) == 1.3 and restore.met is True and "digests equal" in restore.case
    assert back.ratio == 2.0 and back.met is True and "**1 kills left a wrong state**" in back.case
    assert restore.ours.show(restore.unit) == "1.3 s (p95 1.4)"


def test_state_goodput_kills_come_at_a_windows_start_and_every_interval_inside_it():
    from bench.state_goodput import kill_times

    assert kill_times(100.0, 60.0, 30.0) == [100.0, 130.0]
    assert kill_times(0.0, 60.0, 10.0) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert kill_times(0.0, 15.0, 30.0) == [0.0] and kill_times(0.0, 15.0, 10.0) == [0.0, 10.0]
    assert kill_times(0.0, 60.0, None) == []


def test_state_goodput_ways_are_chosen_by_name_and_an_unknown_one_is_named():
    import argparse

    from bench.state_goodput import Way, parse_ways

    assert parse_ways("supervised_forked, RAY_TRAIN") == (Way.SUPERVISED_FORKED, Way.RAY_TRAIN)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown way.s. forked: the ways are supervised,"):
        parse_ways("forked")
    with pytest.raises(argparse.ArgumentTypeError, match="none given"):
        parse_ways(" , ")


def test_a_process_is_named_by_pid_and_start_time_and_a_stale_one_is_never_killed():
    import subprocess
    import sys

    from bench.state_goodput import Proc, parse_start_ticks

    line = "4242 (ray::Some (odd) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 19 20"
    assert parse_start_ticks(line) == 987654
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = Proc.of(child.pid)
        assert proc is not None and proc.pid == child.pid
        assert Proc(child.pid, proc.start + 1).kill() is False and child.poll() is None  # another process by that pid: left alone
        assert proc.kill() is True
        assert child.wait(10) == -9
        assert proc.kill() is False and Proc.of(child.pid) is None
    finally:
        child.kill()
        child.wait()


def test_a_ranks_zero_state_round_trips_through_dcp_into_a_fresh_rank_bit_exact(tmp_path):
    import torch

    from bench.state_goodput import load_dcp, optimizer_template, save_dcp
    from supervisor.core.state_tree import host_copy, state_digest

    def rank():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    model, optim = rank()
    for _ in range(3):
        optim.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optim.step()
    trained = {"step": 3, "model": model.state_dict(), "optim": optim.state_dict()}
    save_dcp(host_copy(trained), str(tmp_path / "rank-0"))
    fresh_model, fresh_optim = rank()  # a fresh Adam has no per-parameter state: the template adds it
    fresh = {"step": 0, "model": fresh_model.state_dict(), "optim": fresh_optim.state_dict()}
    assert fresh["optim"]["state"] == {}
    loaded = load_dcp(fresh, str(tmp_path / "rank-0"))
    fresh_model.load_state_dict(loaded["model"])
    fresh_optim.load_state_dict(loaded["optim"])
    assert loaded["step"] == 3
    assert state_digest({"step": 3, "model": fresh_model.state_dict(), "optim": fresh_optim.state_dict()}) == state_digest(trained)
    assert set(optimizer_template({"optim.state.1.exp_avg": ((2,), torch.float32), "model.weight": ((2, 4), torch.float32)})) == {1}


def test_checkpoint_restart_keeps_the_last_complete_checkpoint_and_the_one_before(tmp_path):
    from bench.state_goodput import _prune, step_dir

    for step in range(1, 6):
        (tmp_path / step_dir("", step)).mkdir()
    _prune(str(tmp_path), keep=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004", "step-000000005"]


def test_ray_train_files_are_written_whole_and_read_as_none_when_absent(tmp_path):
    from bench.state_goodput import TrainFiles, read_json, stop_step, write_json

    files = TrainFiles(str(tmp_path))
    assert stop_step(files) is None and read_json(files.progress) is None
    write_json(files.stop, {"at": 42})
    assert stop_step(files) == 42 and [p.name for p in tmp_path.iterdir()] == ["stop.json"]


def test_state_goodput_rows_give_each_ways_effective_time_and_supervised_against_the_others():
    from bench.state_goodput import Outcome, Way, rows

    def outcome(way, free_per_s, per_s_30, per_s_10, exact):
        timeline = _timeline(way, [(None, 60, free_per_s, []), (30.0, 60, per_s_30, [0, 30]), (None, 60, free_per_s, []), (10.0, 60, per_s_10, [0, 10, 20, 30, 40, 50]), (None, 60, free_per_s, [])])
        return Outcome(timeline, 1000, ["d"] * 4, exact)

    outcomes = {
        Way.SUPERVISED: outcome(Way.SUPERVISED, 20, 19, 16, True),
        Way.CHECKPOINT_RESTART: outcome(Way.CHECKPOINT_RESTART, 10, 6, 2, True),
        Way.RAY_TRAIN: outcome(Way.RAY_TRAIN, 5, 2, 1, False),
    }
    table = rows(outcomes, 60.0)

    def row(benchmark, case):
        (found,) = [r for r in table if r.benchmark == benchmark and r.case.startswith(case)]
        return found

    supervised = row("state goodput: steps/min with faults / fault-free", f"{Way.SUPERVISED.value}, 1 SIGKILL / 30 s")
    assert supervised.ratio == 0.95 and supervised.met is True and "2 in 1 windows of 60 s; final state bit-exact" in supervised.case
    ray_train = row("state goodput: steps/min with faults / fault-free", f"{Way.RAY_TRAIN.value}, 1 SIGKILL / 10 s")
    assert ray_train.ratio == 0.2 and not ray_train.goal and "**final state differs" in ray_train.case
    against = row("state goodput: effective time, supervised against ray-train's", "1 SIGKILL / 30 s")
    assert (against.ours.median, against.ref.median, against.goal, against.met) == (0.95, 0.4, ">= 2.0x", True)
    assert not row("state goodput: effective time, supervised against checkpoint-restart's", "1 SIGKILL / 10 s").goal
    without = rows({Way.SUPERVISED: outcomes[Way.SUPERVISED], Way.CHECKPOINT_RESTART: outcomes[Way.CHECKPOINT_RESTART]}, 60.0)
    assert not any("ray-train" in r.benchmark or "Ray Train" in r.case for r in without)  # skipped: no rows of it
    failed = Outcome(outcomes[Way.SUPERVISED].timeline, 700, [], None, failure="group sg-all FAILED: out of init attempts")
    (row, *_) = rows({Way.SUPERVISED_ALL: failed}, 60.0)
    assert "**the group FAILED and the job stopped: group sg-all FAILED: out of init attempts**" in row.case


def test_a_faulty_window_lasts_until_the_job_steps_again_past_where_it_was():
    import time

    from bench.state_goodput import Way, run_windows

    class Victim:
        def __init__(self, job):
            self.job = job

        def kill(self):
            job = self.job
            job.frozen, job.stalled_until, job.lost_s = job.progress(), time.monotonic() + 0.8, job.lost_s + 0.8
            return True

    class Job:
        """A step every 10 ms, and none for 0.8 s after a kill (longer than the window)."""

        def __init__(self):
            self.started, self.stalled_until, self.lost_s, self.frozen = time.monotonic(), 0.0, 0.0, 0

        def progress(self):
            now = time.monotonic()
            return self.frozen if now < self.stalled_until else int((now - self.started - self.lost_s) * 100)

        def victim(self, rank):
            return Victim(self)

    timeline = run_windows(Job(), Way.SUPERVISED, (None, 10.0, None), window_s=0.3, settle_s=0.0, seed=0)
    free, faulty, after = timeline.windows
    assert len(faulty.kills) == 1 and faulty.end_s - faulty.start_s >= 0.8  # extended past its 0.3 s
    assert round(free.end_s - free.start_s, 1) == 0.3 and round(after.end_s - after.start_s, 1) == 0.3
    assert after.steps > 0  # the fault-free window after it starts with the job stepping


def test_a_reference_that_did_nothing_gives_an_infinite_ratio_or_none():
    import math

    zero, some = Stat(0.0, 0.0, 1), Stat(0.2, 0.2, 1)
    assert Row("b", "c", some, "ref", zero, ">= 2.0x").ratio == math.inf and Row("b", "c", some, "ref", zero, ">= 2.0x").met is True
    assert Row("b", "c", zero, "ref", zero, ">= 2.0x").ratio is None and Row("b", "c", zero, "ref", zero, ">= 2.0x").met is None
