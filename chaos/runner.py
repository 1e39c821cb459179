"""Running one scenario: its context (cluster, daemons, seeded randomness, report), and the checks
every scenario ends with (steps and items, nothing left behind)."""

from __future__ import annotations

import random
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .harness import ChaosCluster, Daemon, JobOptions, stop_everything, wait_nothing_left
from .invariants import account_steps, check_nothing_left, check_steps
from .report import Report, Stats

__all__ = ["Context", "Scenario", "run_scenario"]


@dataclass
class Context:
    """What a scenario works with. ``rng`` is the only source of randomness (``--seed``)."""

    cluster: ChaosCluster
    workdir: Path
    rng: random.Random
    report: Report
    name: str
    deadline: float  # monotonic; a scenario checks it between faults
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def fault_dir(self) -> Path:
        return self.workdir / "faults"

    def start(self, options: JobOptions) -> Daemon:
        """Start a daemon of the example job (a spec written once per run; a restart reuses it)."""
        spec = self.workdir / f"{self.name}.toml"
        if not spec.exists():
            self.fault_dir.mkdir(parents=True, exist_ok=True)
            spec.write_text(options.spec(self.name, self.fault_dir))
        daemon = Daemon(self.name, spec, self.cluster.address, self.workdir / f"daemon-{len(self.daemons)}.log")
        self.daemons.append(daemon)
        return daemon

    def restart_spec(self, options: JobOptions) -> None:
        """The next :meth:`start` writes a fresh spec with ``options``."""
        spec = self.workdir / f"{self.name}.toml"
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        spec.write_text(options.spec(self.name, self.fault_dir))

    def events(self) -> list[dict[str, Any]]:
        return [e for d in self.daemons for e in d.events()]

    def injected(self, kind: str, n: int = 1) -> None:
        self.report.faults_injected[kind] = self.report.faults_injected.get(kind, 0) + n

    def violation(self, text: str) -> None:
        self.report.violations.append(text)

    def time_left(self) -> bool:
        return time.monotonic() < self.deadline

    def check_steps_and_items(self, min_steps: int, allow_reruns: bool = False, per_daemon: bool = False) -> None:
        """Account the driver's steps and items. ``per_daemon``: every daemon ran a job of its own
        (steps start at 0 again), else the daemons are incarnations of one job (a restart resumes)."""
        runs = [d.events() for d in self.daemons] if per_daemon else [self.events()]
        for index, events in enumerate(runs):
            account = account_steps(events)
            self.report.steps_run += len(account.steps)
            self.report.items_checked += account.items
            self.report.items_lost += account.lost
            self.report.items_duplicated += account.duplicated
            prefix = f"run {index}: " if per_daemon else ""
            self.report.violations += [prefix + v for v in check_steps(account, min_steps if not per_daemon else 0, allow_reruns)]
        if per_daemon and self.report.steps_run < min_steps:
            self.violation(f"only {self.report.steps_run} step(s) completed over all runs, expected at least {min_steps}")

    def check_torn_down(self) -> None:
        pgs, actors, record = wait_nothing_left(self.name)
        self.report.leaked += check_nothing_left(pgs, actors, record)

    def timings_from_events(self) -> None:
        """Detection and recovery times as the daemon measured them (death recorded by the GCS →
        detected; death → replacement serving)."""
        events = self.events()
        self.report.detection = Stats.of([e["detection_s"] for e in events if e.get("event") == "worker_failed" and e.get("detection_s") is not None])
        self.report.recovery = Stats.of([e["recovery_s"] for e in events if e.get("event") == "worker_recovered" and e.get("recovery_s") is not None])
        reruns = sum(1 for e in events if e.get("event") == "call_shard_rerun")
        self.report.notes["calls in flight re-run on a replacement"] = reruns


@dataclass(frozen=True)
class Scenario:
    """A fault campaign: ``run(ctx, params)`` with its parameters per profile and a time bound."""

    name: str
    description: str
    run: Callable[[Context, Any], None]
    profiles: dict[str, Any]
    time_limit_s: dict[str, float]


def run_scenario(scenario: Scenario, profile: str, seed: int, cluster: ChaosCluster, workdir: Path) -> Report:
    """Run ``scenario`` once; whatever happens, the report says so and the cluster is left clean."""
    report = Report(scenario.name, profile, seed, time.time())
    name = f"chaos-{scenario.name}"
    stop_everything(name)  # a crashed earlier run's leftovers are not this run's leaks
    run_dir = workdir / f"{scenario.name}-{profile}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    ctx = Context(cluster, run_dir, random.Random(seed), report, name, started + scenario.time_limit_s[profile])
    try:
        scenario.run(ctx, scenario.profiles[profile])
        if not ctx.time_left():
            ctx.violation(f"ran over its time limit of {scenario.time_limit_s[profile]:g}s")
    except Exception as exc:  # the run failed: a violation with the reason, never a crash of the suite
        ctx.violation(f"aborted: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        (run_dir / "traceback.txt").write_text(traceback.format_exc())
    finally:
        for daemon in ctx.daemons:
            daemon.stop()
        stop_everything(name)
        cluster.restore()
    report.duration_s = round(time.monotonic() - started, 1)
    return report
