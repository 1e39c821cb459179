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

from .faults import stop_daemon
from .harness import TRAINED_GROUPS, ChaosCluster, Daemon, JobOptions, stop_everything, wait_nothing_left
from .invariants import account_steps, check_nothing_left, check_state_intact, check_steps, final_state
from .reference import ReferenceRun, reference_run
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
        if options.trained:
            self.reference()  # its processes import torch and join their collectives meanwhile
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
            if account.rollbacks:
                key = "rollbacks (the driver replayed from a snapshot)"
                self.report.notes[key] = self.report.notes.get(key, 0) + account.rollbacks
            prefix = f"run {index}: " if per_daemon else ""
            self.report.violations += [prefix + v for v in check_steps(account, min_steps if not per_daemon else 0, allow_reruns)]
        if per_daemon and self.report.steps_run < min_steps:
            self.violation(f"only {self.report.steps_run} step(s) completed over all runs, expected at least {min_steps}")

    def reference(self) -> ReferenceRun:
        """The fault-free reference run of the job's trained groups (one per chaos invocation)."""
        return reference_run(g.recipe() for g in TRAINED_GROUPS)

    def check_state_intact(self, per_daemon: bool = False) -> None:
        """The trained state the job ended with is a fault-free run's at the same step, bit for bit, on
        every rank; each rank's step counter is the number of steps the job ran. ``per_daemon``: every
        daemon ran a job of its own; else the last daemon's end is the job's (an earlier one was
        killed, or superseded, before its end)."""
        runs = [d.events() for d in self.daemons] if per_daemon else [self.daemons[-1].events() if self.daemons else []]
        checked, at_steps = 0, []
        for index, events in enumerate(runs):
            final = final_state(events)
            prefix = f"run {index}: " if per_daemon else ""
            if final is None:
                if not per_daemon:
                    self.violation("state: the job logged no trained state at its end (rlhf_done or chaos_trained_state)")
                continue
            reference = self.reference().digests([final.steps])
            expected = {group: by_step[final.steps] for group, by_step in reference.items()}
            self.report.violations += [f"{prefix}state: {v}" for v in check_state_intact(final, expected)]
            checked += sum(len(ranks) for ranks in final.groups.values())
            at_steps.append(final.steps)
        self.report.notes["trained ranks checked against a fault-free run"] = checked
        self.report.notes["trained state checked at step(s)"] = at_steps
        if per_daemon and not checked:
            self.violation("state: no run logged a trained state at its end")

    def end_job(self, daemon: Daemon, min_steps: int) -> None:
        """The usual end of a scenario: `supervisor stop` (exit 0 expected), then every step's items
        once, the trained state intact and nothing left behind."""
        code = stop_daemon(daemon, self.cluster.address)
        if code != 0:
            self.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
        self.check_steps_and_items(min_steps=min_steps)
        self.check_state_intact()
        self.check_torn_down()

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
