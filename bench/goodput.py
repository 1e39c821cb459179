"""Goodput under faults: what a failure costs a user, as training steps per minute.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.goodput [--goal] [--window-s 60] [--cycles 2] [--seed 0]

The example RLHF job (examples/rlhf: a rollout group of 4 ranks and a reference group of 2, on two
local nodes of 4 CPUs and 4 declared GPUs each) runs as fast as it can step, in three ways:

* **supervised**: `supervisor start` as it is; a killed rank is replaced into its bundle and the
  call in flight re-run;
* **supervised + standby**: the same with one standby per group, in a spare bundle of each pool,
  allowed to take over a rank on either node (``standby_reach = "any_node"``: the ranks are
  data-parallel replicas; by default a standby serves only the ranks on its own node), warmed up by
  the example's ``warm_up`` and forked from a zygote per node that imported tensordict and the
  example's module (``standby_preload``; ``bench/kill_cost.py`` measures what that saves);
* **checkpoint-restart**, the baseline of verl and its peers: a death ends the job (no restarts
  allowed: the group FAILs, the daemon tears everything down and exits 1) and a new job starts at
  once (a new daemon, new placement groups and actors, the init method again) and resumes from the
  checkpoint the driver wrote after its last step. That is generous to the baseline: a real job
  checkpoints every few hundred steps and loses what came after, and pays for writing checkpoints.

Kills are SIGKILLs of a random rank (uniform over the 6 ranks, from a seeded generator, the same
sequence for each way), one every 30 s or every 10 s.

This machine's pace drifts by up to 10 % within minutes, as much as a fault costs: a fault-free run
minutes away from the faulty one is not a reference. So each supervised way is one job whose windows
alternate: fault-free, a window with a kill every 30 s, fault-free, a window with a kill every 10 s,
``cycles`` times over (60 s windows by default). A faulty window's kills come at its start and every
interval after, and it ends an interval after its last kill: each kill's aftermath (a stall, a standby
starting again in the freed bundle) falls in the window of its kill. The effective-time ratio is the
pace over a way's faulty windows of one rate over its pace over its fault-free windows.

The baseline cannot alternate inside one job (each kill ends its job): it runs fault-free, with kills
every 30 s and every 10 s (120 s each), then fault-free again, as separate runs back to back, against
the mean of its two fault-free runs; its ratios (0.1–0.3) are far beyond the drift. A kill that comes
while it has no ranks (between jobs) waits for the next job's ranks; a later job's start-up counts.

Every job is measured from 20 s after its first step (start-up, and standbys constructing beside the
first steps, excluded for all), from the checkpoint file the driver writes after every step in every
mode, after a short warm-up job that is not counted. Each way is also compared with checkpoint-restart
at the same rate. The plot of steps over time (each rate's faulty windows end to end) goes to
bench/goodput.png.

The goal's figure alone (``--goal``; ``python -m bench --only goodput_goal``): the standby way's
windows with a kill every 30 s sit within this machine's noise of the goal in a run of two, so this
measures just them, many times over: one job alternating fault-free windows and windows with a kill
every 30 s, ``cycles`` times and a fault-free window to end. Each faulty window is taken against the
mean of the fault-free windows on either side of it; the figure is the mean of those ratios, with a
95 % bootstrap interval of that mean.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from .common import Row, Stat, print_rows

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_SPEC = REPO / "examples/rlhf/rlhf.toml"
PLOT = Path(__file__).resolve().parent / "goodput.png"
SAMPLE_S = 0.25
KILL_RATES_S = (30.0, 10.0)  # one SIGKILL every this many seconds
GOAL = ">= 0.95x"  # effective time with standbys at one kill per 30 s
# One cycle of a supervised way's windows: every faulty window has a fault-free one on each side.
CYCLE: tuple[float | None, ...] = (None, KILL_RATES_S[0], None, KILL_RATES_S[1])
GOAL_CYCLE: tuple[float | None, ...] = (None, KILL_RATES_S[0])  # --goal: the goal's rate alone
STANDBY_PRELOAD = ("tensordict", "examples.rlhf.workers")  # what the example's standbys import, bar Ray


class Mode(enum.Enum):
    SUPERVISED = "supervised"
    STANDBY = "supervised + standby"
    CHECKPOINT_RESTART = "checkpoint-restart"


@dataclass
class Window:
    """A stretch of one job: fault-free (``kill_every_s`` None) or with a kill every ``kill_every_s``."""

    kill_every_s: float | None
    start_s: float  # seconds since the job's measurement began
    end_s: float
    steps: int
    kills: list[float] = field(default_factory=list)

    @property
    def steps_per_min(self) -> float:
        return self.steps / (self.end_s - self.start_s) * 60.0


@dataclass
class Timeline:
    """One measured job (or, for checkpoint-restart, the jobs that followed one another in one run):
    (seconds since measurement began, steps done) samples, and its windows."""

    mode: Mode
    samples: list[tuple[float, int]] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    jobs: int = 1

    @property
    def kills(self) -> list[float]:
        return [k for w in self.windows for k in w.kills]

    def stalls(self, window: Window, longer_than_s: float = 0.5) -> list[tuple[float, float]]:
        """``(start, seconds)`` of every stretch of ``window`` without a step longer than ``longer_than_s``."""
        inside = [(t, s) for t, s in self.samples if window.start_s <= t <= window.end_s]
        out, since = [], None
        for (t, steps), (_, before) in zip(inside[1:], inside, strict=False):
            if steps == before:
                since = since if since is not None else t
            elif since is not None:
                if t - since > longer_than_s:
                    out.append((round(since - window.start_s, 1), round(t - since, 1)))
                since = None
        return out


def job_spec(mode: Mode, name: str, checkpoint: Path, preload: bool = True) -> dict[str, Any]:
    """The example job's spec for ``mode``, on an existing cluster, stepping without pauses (``preload``:
    the standby way's standbys are forked from per-node zygotes)."""
    spec = tomllib.loads(EXAMPLE_SPEC.read_text())
    spec["supervisor"] = {"name": name, "orphan_grace_s": 10.0}
    spec["ray"] = {"python_path": [str(REPO)]}
    spec["metrics"] = {"enabled": False}  # no port, and no linger after a failed exit
    for group in spec["groups"].values():
        group["backoff_initial_s"] = 0.0
        # The baseline dies with its first failure; the supervised ways have budget for every kill.
        group["max_restarts"] = 0 if mode is Mode.CHECKPOINT_RESTART else 10_000
    if mode is Mode.STANDBY:
        for pool, group in (("rollout", "rollout"), ("reference", "reference")):
            ranks = sum(spec["pools"][pool]["process_on_nodes"])
            spec["pools"][pool]["capacity_factor"] = 1 + 1 / ranks  # one spare bundle per pool
            spec["groups"][group]["standbys"] = 1
            spec["groups"][group]["standby_warmup_method"] = "warm_up"  # imports paid before a takeover
            if preload:  # ...and paid once per node: each new standby is a fork of a zygote that imported them
                spec["groups"][group]["standby_preload"] = list(STANDBY_PRELOAD)
            # The example's ranks are data-parallel replicas: where one runs does not matter, so the
            # group's one standby takes over a rank on either node (by default only on its own).
            spec["groups"][group]["standby_reach"] = "any_node"
    spec["driver"]["args"] = {**spec["driver"]["args"], "steps": 10**9, "step_interval_s": 0.0, "checkpoint_path": str(checkpoint)}
    return spec


class Daemon:
    """One `supervisor start` process of the job."""

    def __init__(self, spec_path: Path, address: str, log_path: Path) -> None:
        self.log = log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli.commands", "start", str(spec_path), "--address", address, "--log-json"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip

    def stop(self, timeout_s: float = 120.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


def _read_step(checkpoint: Path) -> int | None:
    try:
        return int(json.loads(checkpoint.read_text())["step"])
    except (OSError, ValueError, KeyError):
        return None


def _live_ranks(name: str) -> list[tuple[str, str]]:
    """(namespace, actor name) of every rank of the supervisor's running record."""
    from supervisor.daemon.record import RecordStore

    record = RecordStore().get(name)
    if record is None or record.state != "running":
        return []
    return [(record.namespace, actor) for g in sorted(record.groups.values(), key=lambda g: g.name) for actor in g.actor_names]


def _kill_one(name: str, rng: random.Random) -> bool:
    """SIGKILL the process of a random rank; False when no rank can be found now."""
    import ray

    from supervisor.core.worker.actor_heartbeat import wait_for_beat

    ranks = _live_ranks(name)
    if not ranks:
        return False
    namespace, actor = ranks[rng.randrange(len(ranks))]
    try:
        pid = wait_for_beat(ray.get_actor(actor, namespace=namespace), timeout_s=5).pid
        os.kill(pid, signal.SIGKILL)
        return True
    except Exception:  # that rank is being replaced: the kill waits for a rank that answers
        return False


class _Job:
    """A way's job (for checkpoint-restart: the jobs that follow one another), sampled while a
    window runs: start it, wait for its first step and ``settle_s``, then :meth:`window` by window."""

    def __init__(self, mode: Mode, tag: str, address: str, workdir: Path, seed: int, settle_s: float, preload: bool = True) -> None:
        import yaml

        workdir.mkdir(parents=True, exist_ok=True)
        self.mode, self.address, self.name = mode, address, f"goodput-{tag}"
        self.checkpoint, self.spec_path, self.log = workdir / f"{tag}.checkpoint", workdir / f"{tag}.yaml", workdir / f"{tag}.log"
        self.spec_path.write_text(yaml.safe_dump(job_spec(mode, self.name, self.checkpoint, preload), sort_keys=False))
        self.rng = random.Random(seed)
        self.timeline = Timeline(mode)
        self.daemon = Daemon(self.spec_path, address, self.log)
        deadline = time.monotonic() + 300
        while _read_step(self.checkpoint) is None:  # the first step: start-up is not measured
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no first step after 300s (see {self.log})")
            time.sleep(0.05)
        # The first seconds of stepping still pay for start-up (standbys constructing beside the
        # ranks, first calls warming caches): not measured, in every way alike.
        settled = time.monotonic() + settle_s
        while time.monotonic() < settled:
            self._check_alive()
            time.sleep(0.05)
        self.t0 = time.monotonic()
        self.timeline.samples.append((0.0, self._step()))

    def _step(self) -> int:
        step = _read_step(self.checkpoint)
        return step if step is not None else (self.timeline.samples[-1][1] if self.timeline.samples else 0)

    def _check_alive(self) -> None:
        if self.daemon.proc.poll() is None:
            return
        if self.mode is not Mode.CHECKPOINT_RESTART:
            raise RuntimeError(f"{self.name}: the daemon exited with {self.daemon.proc.returncode} (see {self.log})")
        self.daemon.log.close()
        self.daemon = Daemon(self.spec_path, self.address, self.log)  # the next job, from the checkpoint
        self.timeline.jobs += 1

    def window(self, kill_every_s: float | None, duration_s: float) -> Window:
        """Run one window of ``duration_s``, with a kill every ``kill_every_s`` (None: none)."""
        start = time.monotonic() - self.t0
        first = self._step()
        self.timeline.samples.append((start, first))
        window = Window(kill_every_s, start, start + duration_s, 0)
        next_kill = self.t0 + start + self._first_kill_s(kill_every_s) if kill_every_s else None
        while (now := time.monotonic()) < self.t0 + window.end_s:
            self._check_alive()
            if next_kill is not None and now >= next_kill and _kill_one(self.name, self.rng):
                window.kills.append(now - self.t0)
                next_kill += kill_every_s  # type: ignore[operator]  # on schedule, whenever this one landed
            self.timeline.samples.append((now - self.t0, self._step()))
            time.sleep(SAMPLE_S)
        last = self._step()
        self.timeline.samples.append((window.end_s, last))
        window.steps = last - first
        self.timeline.windows.append(window)
        return window

    def _first_kill_s(self, kill_every_s: float) -> float:
        # A supervised way's kill owns the interval after it, which ends inside the window. The
        # baseline's long runs kill at the end of each interval, as a job that has run for a while.
        return kill_every_s if self.mode is Mode.CHECKPOINT_RESTART else 0.0

    def stop(self) -> None:
        self.daemon.stop()


def run(
    window_s: float = 60.0, cycles: int = 2, baseline_s: float = 120.0, seed: int = 0, plot: bool = True,
    warmup_s: float = 20.0, settle_s: float = 20.0,
) -> list[Row]:  # fmt: skip
    """Measure the three ways (see the module's docstring). ``window_s``: a supervised way's windows;
    ``baseline_s``: the length of each checkpoint-restart run with kills (its fault-free runs are
    half as long)."""
    if plot:  # at once, not after half an hour of measuring
        _require_matplotlib()
    timelines: dict[Mode, list[Timeline]] = {mode: [] for mode in Mode}
    with _cluster(seed, warmup_s) as (address, workdir):
        for mode in (Mode.SUPERVISED, Mode.STANDBY):
            timelines[mode].append(_alternate(mode, CYCLE * cycles, address, workdir, seed, window_s, settle_s))
        for i, kill_every_s in enumerate((None, *KILL_RATES_S, None)):
            tag = f"checkpoint_restart-{i}"
            job = _Job(Mode.CHECKPOINT_RESTART, tag, address, workdir, seed, settle_s)
            try:
                _report(job.timeline, job.window(kill_every_s, baseline_s if kill_every_s else baseline_s / 2))
            finally:
                job.stop()
            timelines[Mode.CHECKPOINT_RESTART].append(job.timeline)
    table = rows(timelines)
    if plot:
        write_plot(timelines, PLOT)
    return table


def run_goal(window_s: float = 60.0, cycles: int = 8, seed: int = 0, warmup_s: float = 20.0, settle_s: float = 20.0) -> list[Row]:
    """The goal's figure alone (see the module's docstring)."""
    with _cluster(seed, warmup_s) as (address, workdir):
        timeline = _alternate(Mode.STANDBY, (*GOAL_CYCLE * cycles, None), address, workdir, seed, window_s, settle_s)
    return goal_rows(timeline, window_s)


@contextlib.contextmanager
def _cluster(seed: int, warmup_s: float) -> Iterator[tuple[str, Path]]:
    """The two-node local cluster the jobs run on, and a working directory, after a warm-up job."""
    import ray

    from .common import local_cluster

    cluster = local_cluster([{"num_cpus": 1, "num_gpus": 0}, {"num_cpus": 4, "num_gpus": 4}, {"num_cpus": 4, "num_gpus": 4}])
    try:
        with tempfile.TemporaryDirectory(prefix="goodput-") as tmp:
            # The cluster's first job pays for what later ones find warm (worker processes, imports in
            # the page cache): a short run first, not counted.
            warmup = _Job(Mode.SUPERVISED, "warmup", cluster.address, Path(tmp), seed, 0.0)
            try:
                warmup.window(None, warmup_s)
            finally:
                warmup.stop()
            yield cluster.address, Path(tmp)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _alternate(
    mode: Mode, rates: tuple[float | None, ...], address: str, workdir: Path, seed: int, window_s: float, settle_s: float
) -> Timeline:  # fmt: skip
    """One job of a supervised way, through a window of each of ``rates`` in turn."""
    job = _Job(mode, mode.name.lower(), address, workdir, seed, settle_s)
    try:
        for kill_every_s in rates:
            _report(job.timeline, job.window(kill_every_s, window_s))
    finally:
        job.stop()
    return job.timeline


def _require_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit('bench.goodput: the plot needs matplotlib, which is not installed: pip install -e ".[bench]"')


def _report(timeline: Timeline, window: Window) -> None:
    rate = f"kill every {window.kill_every_s:g} s" if window.kill_every_s else "fault-free"
    print(
        f"goodput {timeline.mode.value}, {rate}: {window.steps_per_min:.1f} steps/min over {window.end_s - window.start_s:g} s, "
        f"{len(window.kills)} kills, {timeline.jobs} job(s) so far; stalls (s after the window's start, s): {timeline.stalls(window)}",
        flush=True,
    )  # fmt: skip


def pace(timelines: list[Timeline], kill_every_s: float | None) -> tuple[Stat, int, int]:
    """Steps per minute over every window of this rate (``None``: fault-free), as a Stat whose p95 is
    the window least favourable to supervision (the slowest faulty one, the fastest fault-free one);
    and how many windows and kills that was."""
    windows = [w for t in timelines for w in t.windows if w.kill_every_s == kill_every_s]
    steps = sum(w.steps for w in windows)
    seconds = sum(w.end_s - w.start_s for w in windows)
    paces = [w.steps_per_min for w in windows]
    worst = max(paces) if kill_every_s is None else min(paces)
    return Stat(steps / seconds * 60.0, worst, len(windows)), len(windows), sum(len(w.kills) for w in windows)


def rows(timelines: dict[Mode, list[Timeline]]) -> list[Row]:
    """The RESULTS.md rows: effective time per way and rate, and each way against checkpoint-restart."""
    out = []
    for kill_every_s in KILL_RATES_S:
        for mode in Mode:
            faulty, windows, kills = pace(timelines[mode], kill_every_s)
            reference, free_windows, _ = pace(timelines[mode], None)
            if mode is Mode.CHECKPOINT_RESTART:
                span = f"{kills} in {windows} run(s) of {_length(timelines[mode], kill_every_s):g} s"
                ref_text = f"fault-free runs before and after ({free_windows}; p95: the faster)"
            else:
                span = f"{kills} in {windows} windows of {_length(timelines[mode], kill_every_s):g} s; p95: the slowest"
                ref_text = f"the fault-free windows between ({free_windows}; p95: the fastest)"
            goal = GOAL if mode is Mode.STANDBY and kill_every_s == KILL_RATES_S[0] else ""
            out.append(
                Row(
                    "goodput: steps/min with faults / fault-free", f"{mode.value}, 1 SIGKILL / {kill_every_s:g} s ({span})",
                    faulty, ref_text, reference, goal, unit="steps/min",
                )  # fmt: skip
            )
        # Each way against its own fault-free pace first: the ways run minutes apart, and this machine's
        # pace drifts by more than a fault costs between them (steps/min side by side would compare days).
        base = effective_time(timelines[Mode.CHECKPOINT_RESTART], kill_every_s)
        jobs = sum(t.jobs for t in timelines[Mode.CHECKPOINT_RESTART] if any(w.kill_every_s == kill_every_s for w in t.windows))
        for mode in (Mode.SUPERVISED, Mode.STANDBY):
            out.append(
                Row(
                    "goodput: effective time, against checkpoint-restart's", f"{mode.value}, 1 SIGKILL / {kill_every_s:g} s",
                    effective_time(timelines[mode], kill_every_s), f"checkpoint-restart ({jobs} jobs)", base,
                    unit="of fault-free",
                )  # fmt: skip
            )
    return out


def paired_ratios(timeline: Timeline, kill_every_s: float) -> list[float]:
    """Each window with a kill every ``kill_every_s`` against the mean pace of the fault-free windows
    next to it (either side; a window without a fault-free neighbour is left out)."""
    out = []
    windows = timeline.windows
    for i, window in enumerate(windows):
        if window.kill_every_s != kill_every_s:
            continue
        free = [w.steps_per_min for w in (windows[i - 1] if i else None, windows[i + 1] if i + 1 < len(windows) else None) if w and w.kill_every_s is None]
        if free:
            out.append(window.steps_per_min / (sum(free) / len(free)))
    return out


def bootstrap_interval(values: list[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """A ``level`` bootstrap interval of the mean of ``values`` (percentiles of resampled means; seeded)."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * (resamples - 1))], means[int((1 - tail) * (resamples - 1))]


def goal_rows(timeline: Timeline, window_s: float) -> list[Row]:
    """The RESULTS.md row of ``--goal``: the mean paired ratio, its interval in the p95 column's place."""
    ratios = paired_ratios(timeline, KILL_RATES_S[0])
    low, high = bootstrap_interval(ratios)
    mean = sum(ratios) / len(ratios)
    kills = sum(len(w.kills) for w in timeline.windows if w.kill_every_s == KILL_RATES_S[0])
    case = (
        f"{timeline.mode.value}, 1 SIGKILL / {KILL_RATES_S[0]:g} s ({kills} in {len(ratios)} windows of {window_s:g} s, each against "
        f"the fault-free windows on either side; p95: the low end of the mean's 95 % interval, {low:.3f}–{high:.3f})"
    )  # fmt: skip
    return [Row("goodput: effective time, the goal alone", case, Stat(mean, low, len(ratios)), "fault-free", Stat(1.0, 1.0, len(ratios)), GOAL, unit="of fault-free")]


def effective_time(timelines: list[Timeline], kill_every_s: float) -> Stat:
    """Steps per minute with faults over fault-free, as a Stat whose p95 is the least favourable pair
    (the slowest faulty window over the fastest fault-free one)."""
    faulty, windows, _ = pace(timelines, kill_every_s)
    free, _, _ = pace(timelines, None)
    return Stat(faulty.median / free.median, faulty.p95 / free.p95, windows)


def _length(timelines: list[Timeline], kill_every_s: float) -> float:
    return next(w.end_s - w.start_s for t in timelines for w in t.windows if w.kill_every_s == kill_every_s)


def stitched(timelines: list[Timeline], kill_every_s: float) -> tuple[list[float], list[int], list[float]]:
    """The windows of one rate end to end: (seconds of such windows, steps in them) samples, and the kills."""
    xs: list[float] = []
    ys: list[int] = []
    kills: list[float] = []
    offset_s, offset_steps = 0.0, 0
    for timeline in timelines:
        for w in (w for w in timeline.windows if w.kill_every_s == kill_every_s):
            inside = [(t, s) for t, s in timeline.samples if w.start_s <= t <= w.end_s]
            first = inside[0][1]
            xs += [offset_s + t - w.start_s for t, _ in inside]
            ys += [offset_steps + s - first for _, s in inside]
            kills += [offset_s + k - w.start_s for k in w.kills]
            offset_s, offset_steps = xs[-1], ys[-1]
    return xs, ys, kills


def write_plot(timelines: dict[Mode, list[Timeline]], path: Path) -> None:
    """Steps over time, one panel per kill rate: each way's faulty windows end to end, beside the pace
    of its own fault-free windows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {Mode.SUPERVISED: "tab:blue", Mode.STANDBY: "tab:green", Mode.CHECKPOINT_RESTART: "tab:red"}
    fig, axes = plt.subplots(1, len(KILL_RATES_S), figsize=(6 * len(KILL_RATES_S), 4.2), sharey=True)
    for ax, kill_every_s in zip(axes, KILL_RATES_S, strict=True):
        horizon = 0.0
        for mode in Mode:
            xs, ys, kills = stitched(timelines[mode], kill_every_s)
            horizon = max(horizon, xs[-1])
            ax.plot(xs, ys, color=colors[mode], label=mode.value)
            rate = pace(timelines[mode], None)[0].median / 60.0
            ax.plot([0, xs[-1]], [0, rate * xs[-1]], color=colors[mode], linestyle=":", linewidth=0.9, label=f"{mode.value}, fault-free pace")
            if mode is Mode.STANDBY:
                for k in kills:
                    ax.axvline(k, color="black", alpha=0.15, linewidth=0.8)
        ax.set_title(f"one SIGKILL of a random rank every {kill_every_s:g} s")
        ax.set_xlabel("seconds with faults (a way's faulty windows end to end)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("steps done")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("examples/rlhf: steps over time under faults (bench/goodput.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window-s", type=float, default=60.0, help="length of a supervised way's windows")
    parser.add_argument("--cycles", type=int, default=None, help="times each supervised way goes through its windows (default 2; with --goal 8)")
    parser.add_argument("--baseline-s", type=float, default=120.0, help="length of a checkpoint-restart run with kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--goal", action="store_true", help="only the goal's figure: the standby way at one kill per 30 s, --cycles times (default 8)")
    args = parser.parse_args()
    cycles = {} if args.cycles is None else {"cycles": args.cycles}
    if args.goal:
        print_rows(run_goal(args.window_s, seed=args.seed, **cycles))
    else:
        print_rows(run(args.window_s, baseline_s=args.baseline_s, seed=args.seed, **cycles))


if __name__ == "__main__":
    main()
