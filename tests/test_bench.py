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
