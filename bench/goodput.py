"""Goodput under faults: what a failure costs a user, as training steps per minute.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.goodput [--fault-free-s 60] [--faulty-s 120] [--seed 0]

The example RLHF job (examples/rlhf: a rollout group of 4 ranks and a reference group of 2, on two
local nodes of 4 CPUs and 4 declared GPUs each) runs back to back, as fast as it can step, in three ways:

* **supervised**: `supervisor start` as it is; a killed rank is replaced into its bundle and the
  call in flight re-run;
* **supervised + standby**: the same with one standby per group, in a spare bundle of each pool,
  allowed to take over a rank on either node (``standby_reach = "any_node"``: the ranks are
  data-parallel replicas; by default a standby serves only the ranks on its own node);
* **checkpoint-restart**, the baseline of verl and its peers: a death ends the job (no restarts
  allowed: the group FAILs, the daemon tears everything down and exits 1) and a new job starts at
  once (a new daemon, new placement groups and actors, the init method again) and resumes from the
  checkpoint the driver wrote after its last step. That is generous to the baseline: a real job
  checkpoints every few hundred steps and loses what came after, and pays for writing checkpoints.

After a short warm-up job (not counted), each way runs fault-free, then with a SIGKILL of a random
rank (uniform over the 6 ranks, from a seeded generator, the same sequence for each way) every 30 s
and every 10 s, then fault-free again, its four runs back to back; its fault-free pace is the mean of
the two (the machine's pace drifts by several per cent over minutes). A kill that comes while the
baseline has no ranks (between jobs) waits for the next job's ranks. Steps are counted from 20 s after the
first step of the first job (start-up, and the standbys constructing beside the first steps, excluded
for all; a later job's start-up counts) over the run's duration, from the
checkpoint file the driver writes after every step in every mode. The effective-time ratio is steps
per minute with faults over fault-free, for the same way; each way is also compared with
checkpoint-restart at the same rate. The plot of steps over time goes to bench/goodput.png.
"""

from __future__ import annotations

import argparse
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
AFTER = -1.0  # key of a way's second fault-free run, after its faulty ones


class Mode(enum.Enum):
    SUPERVISED = "supervised"
    STANDBY = "supervised + standby"
    CHECKPOINT_RESTART = "checkpoint-restart"


@dataclass
class Timeline:
    """One run: (seconds since the first step, steps done) samples, kill times, jobs started."""

    mode: Mode
    kill_every_s: float | None
    duration_s: float
    samples: list[tuple[float, int]] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    jobs: int = 1

    @property
    def steps(self) -> int:
        inside = [s for t, s in self.samples if t <= self.duration_s]
        return (inside[-1] - self.samples[0][1]) if inside else 0

    def stalls(self, longer_than_s: float = 0.5) -> list[tuple[float, float]]:
        """``(start, seconds)`` of every stretch without a step longer than ``longer_than_s``."""
        out, since = [], None
        for (t, steps), (_, before) in zip(self.samples[1:], self.samples, strict=False):
            if steps == before:
                since = since if since is not None else t
            elif since is not None:
                if t - since > longer_than_s:
                    out.append((round(since, 1), round(t - since, 1)))
                since = None
        return out

    @property
    def steps_per_min(self) -> float:
        return self.steps / self.duration_s * 60.0


def job_spec(mode: Mode, name: str, checkpoint: Path) -> dict[str, Any]:
    """The example job's spec for ``mode``, on an existing cluster, stepping without pauses."""
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

    from supervisor.core.heartbeat import wait_for_beat

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


def run_one(mode: Mode, kill_every_s: float | None, duration_s: float, address: str, workdir: Path, seed: int, settle_s: float = 0.0) -> Timeline:
    """Run the job ``mode`` for ``duration_s`` of stepping, killing a rank every ``kill_every_s``, from
    ``settle_s`` after the first step."""
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"{mode.name.lower()}-{int(kill_every_s or 0)}"
    name = f"goodput-{tag}"
    checkpoint, spec_path = workdir / f"{tag}.checkpoint", workdir / f"{tag}.yaml"
    import yaml

    spec_path.write_text(yaml.safe_dump(job_spec(mode, name, checkpoint), sort_keys=False))
    log = workdir / f"{tag}.log"
    timeline = Timeline(mode, kill_every_s, duration_s)
    daemon = Daemon(spec_path, address, log)
    rng = random.Random(seed)
    try:
        deadline = time.monotonic() + 300
        while _read_step(checkpoint) is None:  # the first step: start-up is not measured
            if daemon.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no first step (see {log})")
            time.sleep(0.05)
        # The first seconds of stepping still pay for start-up (standbys constructing beside the
        # ranks, first calls warming caches): not measured, in every way alike.
        settled = time.monotonic() + settle_s
        while time.monotonic() < settled:
            if daemon.proc.poll() is not None:
                raise RuntimeError(f"{name}: the daemon exited with {daemon.proc.returncode} (see {log})")
            time.sleep(0.05)
        t0 = time.monotonic()
        first = _read_step(checkpoint) or 0
        timeline.samples.append((0.0, first))
        next_kill = t0 + kill_every_s if kill_every_s else None
        while (now := time.monotonic()) < t0 + duration_s:
            if daemon.proc.poll() is not None:
                if mode is not Mode.CHECKPOINT_RESTART:
                    raise RuntimeError(f"{name}: the daemon exited with {daemon.proc.returncode} (see {log})")
                daemon.log.close()
                daemon = Daemon(spec_path, address, log)  # the next job, from the checkpoint
                timeline.jobs += 1
            if next_kill is not None and now >= next_kill and _kill_one(name, rng):
                timeline.kills.append(now - t0)
                next_kill += kill_every_s  # type: ignore[operator]
            step = _read_step(checkpoint)
            if step is not None:
                timeline.samples.append((now - t0, step))
            time.sleep(SAMPLE_S)
        step = _read_step(checkpoint)
        timeline.samples.append((duration_s, step if step is not None else timeline.samples[-1][1]))
    finally:
        daemon.stop()
    return timeline


def run(fault_free_s: float = 60.0, faulty_s: float = 120.0, seed: int = 0, plot: bool = True, warmup_s: float = 20.0, settle_s: float = 20.0) -> list[Row]:
    import ray

    from .common import local_cluster

    cluster = local_cluster([{"num_cpus": 1, "num_gpus": 0}, {"num_cpus": 4, "num_gpus": 4}, {"num_cpus": 4, "num_gpus": 4}])
    timelines: dict[tuple[Mode, float | None], Timeline] = {}  # (way, kill every; None: fault-free; AFTER)
    try:
        with tempfile.TemporaryDirectory(prefix="goodput-") as tmp:
            # The cluster's first job pays for what later ones find warm (worker processes, imports in
            # the page cache): a short run first, not counted.
            run_one(Mode.SUPERVISED, None, warmup_s, cluster.address, Path(tmp) / "warmup", seed)
            # Each way's runs back to back, its faulty runs between two fault-free ones: this machine's
            # pace drifts by several per cent over minutes, and the mean of a reference before and
            # one after is measured where the faulty runs were.
            for mode in Mode:
                for kill_every_s in (None, *KILL_RATES_S, None):
                    duration = fault_free_s if kill_every_s is None else faulty_s
                    key = (mode, kill_every_s) if (mode, kill_every_s) not in timelines else (mode, AFTER)
                    workdir = Path(tmp) / ("after" if key[1] == AFTER else "")  # a checkpoint of its own
                    timeline = run_one(mode, kill_every_s, duration, cluster.address, workdir, seed, settle_s)
                    timelines[key] = timeline
                    print(
                        f"goodput {mode.value}, kill every {kill_every_s or '-'} s: {timeline.steps_per_min:.1f} steps/min, "
                        f"{len(timeline.kills)} kills, {timeline.jobs} job(s); stalls (s): {timeline.stalls()}", flush=True,
                    )  # fmt: skip
    finally:
        ray.shutdown()
        cluster.shutdown()
    if plot:
        write_plot(timelines, PLOT)
    return rows(timelines)


def rows(timelines: dict[tuple[Mode, float | None], Timeline]) -> list[Row]:
    """The RESULTS.md rows: effective time per way and rate, and each way against checkpoint-restart."""
    out = []
    for kill_every_s in KILL_RATES_S:
        for mode in Mode:
            faulty = timelines[(mode, kill_every_s)]
            kills = f"1 SIGKILL / {kill_every_s:g} s ({len(faulty.kills)} in {faulty.duration_s:g} s)"
            goal = GOAL if mode is Mode.STANDBY and kill_every_s == 30.0 else ""
            out.append(
                Row(
                    "goodput: steps/min with faults / fault-free", f"{mode.value}, {kills}", _per_min(faulty),
                    "fault-free (mean of before and after; p95: the faster)", fault_free(timelines, mode), goal, unit="steps/min",
                )  # fmt: skip
            )
        base = timelines[(Mode.CHECKPOINT_RESTART, kill_every_s)]
        for mode in (Mode.SUPERVISED, Mode.STANDBY):
            out.append(
                Row(
                    "goodput: steps/min, against checkpoint-restart", f"{mode.value}, 1 SIGKILL / {kill_every_s:g} s",
                    _per_min(timelines[(mode, kill_every_s)]), f"checkpoint-restart ({base.jobs} jobs)", _per_min(base),
                    unit="steps/min",
                )  # fmt: skip
            )
    return out


def _per_min(t: Timeline) -> Stat:
    return Stat(t.steps_per_min, t.steps_per_min, 1)


def fault_free(timelines: dict[tuple[Mode, float | None], Timeline], mode: Mode) -> Stat:
    """A way's fault-free pace: the mean of its run before its faulty runs and the one after."""
    rates = [timelines[(mode, k)].steps_per_min for k in (None, AFTER) if (mode, k) in timelines]
    return Stat(sum(rates) / len(rates), max(rates), len(rates))


def write_plot(timelines: dict[tuple[Mode, float | None], Timeline], path: Path) -> None:
    """Steps over time, one panel per kill rate: the three ways, each beside its fault-free pace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {Mode.SUPERVISED: "tab:blue", Mode.STANDBY: "tab:green", Mode.CHECKPOINT_RESTART: "tab:red"}
    fig, axes = plt.subplots(1, len(KILL_RATES_S), figsize=(6 * len(KILL_RATES_S), 4.2), sharey=True)
    for ax, kill_every_s in zip(axes, KILL_RATES_S, strict=True):
        horizon = timelines[(Mode.SUPERVISED, kill_every_s)].duration_s
        for mode in Mode:
            t = timelines[(mode, kill_every_s)]
            first = t.samples[0][1]
            ax.plot([s[0] for s in t.samples], [s[1] - first for s in t.samples], color=colors[mode], label=mode.value)
            rate = fault_free(timelines, mode).median / 60.0  # each way's own fault-free pace
            ax.plot([0, horizon], [0, rate * horizon], color=colors[mode], linestyle=":", linewidth=0.9, label=f"{mode.value}, fault-free pace")
        for k in timelines[(Mode.STANDBY, kill_every_s)].kills:
            ax.axvline(k, color="black", alpha=0.15, linewidth=0.8)
        ax.set_title(f"one SIGKILL of a random rank every {kill_every_s:g} s")
        ax.set_xlabel("seconds since the first step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("steps done")
    axes[0].legend(loc="upper left")
    fig.suptitle("examples/rlhf: steps over time under faults (bench/goodput.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault-free-s", type=float, default=60.0)
    parser.add_argument("--faulty-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print_rows(run(args.fault_free_s, args.faulty_s, args.seed))


if __name__ == "__main__":
    main()
