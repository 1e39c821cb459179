"""``python -m bench [--quick] [--only NAME ...]``: run every benchmark and write bench/RESULTS.md.

Each benchmark starts its own local cluster on 127.0.0.1 (declared GPUs where a GPU pool is used),
warms up, and times ours and its references in the same run. ``--quick`` cuts repetitions (to check
that everything runs; its figures are not the published ones).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .common import VERL_VERSION, Row

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def _benchmarks(quick: bool) -> dict[str, Callable[[], list[Row]]]:
    from . import (
        daemon_scale,
        data,
        decision,
        detection_cost,
        dispatch,
        fencing,
        goodput,
        kill_cost,
        recovery,
        replay_cost,
        scale,
        standby_recovery,
        state_cost,
        state_goodput,
    )

    return {
        "dispatch": lambda: dispatch.run(reps=30 if quick else 300, budget_s=0.2 if quick else 5.0),
        "detection": lambda: detection_cost.run(reps=30 if quick else 300, kills=2 if quick else 10),
        "data": lambda: data.run(rows=8192 if quick else 65536, reps=3 if quick else 30),
        "recovery": lambda: recovery.run(kills=3 if quick else 20),
        "standby": lambda: standby_recovery.run(kills=2 if quick else 10),
        "scale": lambda: scale.run(rounds=1 if quick else 2, idle_s=5 if quick else 30),
        "decision": lambda: decision.run(reps=20 if quick else 200),
        "fencing": lambda: fencing.run(reps=30 if quick else 300),
        "daemon_scale": lambda: daemon_scale.run(reps=20 if quick else 100, load_s=2 if quick else 10),
        "goodput": lambda: goodput.run(
            window_s=15 if quick else 60, cycles=1 if quick else 2, baseline_s=30 if quick else 120, plot=not quick,
            warmup_s=5 if quick else 20, settle_s=2 if quick else 20,
        ),  # fmt: skip
        "goodput_goal": lambda: goodput.run_goal(
            window_s=15 if quick else 60, cycles=1 if quick else 8, warmup_s=5 if quick else 20, settle_s=2 if quick else 20
        ),
        "kill_cost": lambda: kill_cost.run(kills=2 if quick else 8, warmup_s=5 if quick else 20, settle_s=2 if quick else 20),
        "state_cost": lambda: state_cost.run(blocks=4 if quick else 12, block_steps=5 if quick else 10, kills=1 if quick else 6),
        "state_goodput": lambda: state_goodput.run(**state_goodput.settings(quick)),
        "replay_cost": lambda: replay_cost.run(kills=2 if quick else 6),
    }


# Benchmarks with a section of their own in RESULTS.md (a table, and a figure) rather than rows of the
# main table. `--only NAME` rewrites just that section; for a benchmark of the main table it writes
# (or rewrites) a "re-measured" section of its own, which the next full run folds back into the table.
SECTIONS: dict[str, tuple[str, str | None, str]] = {
    "replay_cost": ("A rank killed inside an update: replayed in its group, or rolled back", None, ""),
    "goodput": ("Goodput under faults", "goodput.png", "Steps over time under faults"),
    "goodput_goal": ("Goodput: the goal alone, many times over", None, ""),
    "kill_cost": ("What one kill costs, and where", None, ""),
    "daemon_scale": ("The daemon at 1,024 ranks", None, ""),
    "state_cost": ("What keeping state costs: snapshots, a peer restore, a rollback", None, ""),
    "state_goodput": ("Goodput of a stateful training loop: state recovery, checkpoint-restart, Ray Train", None, ""),
}


def section_title(name: str) -> tuple[str, str | None, str]:
    return SECTIONS.get(name, (f"{name}, re-measured after the full run", None, ""))


def _fmt(row: Row) -> list[str]:
    ratio = f"{row.ratio:.2f}×" if row.ratio is not None else ""
    met = {True: "met", False: "**missed**", None: ""}[row.met]
    return [
        row.benchmark,
        row.case,
        row.ours.show(row.unit),
        f"{row.reference}: {row.ref.show(row.unit)}" if row.ref else row.reference,
        ratio,
        f"{row.goal.replace('x', '×')} {met}".strip(),
    ]


def render(rows: list[Row], elapsed_s: float, command: str) -> str:
    head = ["benchmark", "case", "ours (median, p95)", "reference (median, p95)", "ratio", "goal"]
    lines = [
        "# Benchmark results",
        "",
        f"One full run of `{command}` on {datetime.date.today().isoformat()}, {platform.machine()} "
        f"({_cores()} cores), Python {platform.python_version()}, ray {_version('ray')}, torch {_version('torch')}; "
        f"verl {VERL_VERSION} installed for the comparison only. Total {elapsed_s / 60:.1f} min.",
        "Ratios are ours / reference, medians, measured in the same run. docs/benchmarks.md discusses each figure.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(_fmt(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render_section(name: str, rows: list[Row], elapsed_s: float, command: str) -> str:
    """A benchmark's own section of RESULTS.md, between markers that `--only NAME` replaces."""
    title, figure, caption = section_title(name)
    head = ["benchmark", "case", "ours", "reference", "ratio", "goal"]
    lines = [
        f"<!-- {name} -->",
        f"## {title}",
        "",
        f"`{command}` on {datetime.date.today().isoformat()} ({elapsed_s / 60:.1f} min), same machine.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(_fmt(row)) + " |" for row in rows),
        *(["", f"![{caption}]({figure})"] if figure else []),
        f"<!-- /{name} -->",
    ]
    return "\n".join(lines) + "\n"


def splice_section(text: str, name: str, section: str) -> str:
    """``text`` with the section of ``name`` replaced by ``section`` (appended when it has none)."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->\n"
    if start in text and end in text:
        return text[: text.index(start)] + section + text[text.index(end) + len(end) :]
    return text.rstrip("\n") + "\n\n" + section


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions; does not write RESULTS.md")
    parser.add_argument("--only", nargs="*", default=None, help="run only these benchmarks (their sections of RESULTS.md are rewritten)")
    args = parser.parse_args(argv)
    benchmarks = _benchmarks(args.quick)
    names = args.only or list(benchmarks)
    started = time.monotonic()
    rows: list[Row] = []
    sections: dict[str, tuple[list[Row], float]] = {}
    for name in names:
        print(f"== {name}", flush=True)
        began = time.monotonic()
        # Each in its own process: clusters, actor classes and memory do not leak into the next one.
        code = subprocess.call([sys.executable, "-c", f"import bench.__main__ as m; m._one({name!r}, {args.quick!r})"])
        if code != 0:
            print(f"benchmark {name} failed with exit code {code}", flush=True)
            return 1
        if name in SECTIONS or args.only:
            sections[name] = (_load(name), time.monotonic() - began)
        else:
            rows += _load(name)
    elapsed = time.monotonic() - started
    command = "python -m bench" + (" --quick" if args.quick else "") + (f" --only {' '.join(names)}" if args.only else "")
    # `--only` rewrites its sections in the RESULTS.md there is; a full run renders it all anew.
    text = (RESULTS.read_text() if RESULTS.exists() else "") if args.only else render(rows, elapsed, command)
    for name, (section_rows, section_s) in sections.items():
        text = splice_section(text, name, render_section(name, section_rows, section_s, command))
    print(text)
    if not args.quick:
        RESULTS.write_text(text)
        print(f"written to {RESULTS}")
    return 0


def _one(name: str, quick: bool) -> None:
    import pickle

    rows = _benchmarks(quick)[name]()
    for row in rows:
        print(" | ".join(_fmt(row)), flush=True)
    _rows_path(name).write_bytes(pickle.dumps(rows))


def _load(name: str) -> list[Row]:
    import pickle

    return list(pickle.loads(_rows_path(name).read_bytes()))


def _rows_path(name: str) -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / f"ray-supervisor-bench-{name}.pkl"


if __name__ == "__main__":
    sys.exit(main())
