"""The benchmark suite's bookkeeping (pure): statistics, goals and the RESULTS.md table. The
benchmarks themselves are a separate command (``python -m bench``), never timed tests."""

from __future__ import annotations

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
