"""slow-stop: a shutdown method that takes 10 s (a checkpoint). `supervisor stop` must wait for it and
exit 0, status must show the daemon stopping meanwhile, a `gc` meanwhile must not collect the job,
and the teardown must leave nothing behind."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from ..faults import cli
from ..harness import BIN, ENV, JobOptions, wait_until
from ..report import Stats
from ..runner import Context

SHUTDOWN_S = 10.0


@dataclass(frozen=True)
class Params:
    rounds: int
    trained: bool = True  # the job's trained groups (their state checked at each end)


def run(ctx: Context, p: Params) -> None:
    stops: list[float] = []
    for i in range(p.rounds):
        if not ctx.time_left():
            break
        options = JobOptions(trained=p.trained)
        daemon = ctx.start(options)
        daemon.wait_running()
        daemon.wait_steps(1)
        (ctx.fault_dir / "slowstop-rollout-all").write_text(str(SHUTDOWN_S))
        asked = time.monotonic()
        stop = subprocess.Popen(
            [str(BIN / "supervisor"), "stop", ctx.name, "--address", ctx.cluster.address],
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        ctx.injected(f"stop with a {SHUTDOWN_S:g}s shutdown method")
        try:
            wait_until(lambda d=daemon: (r := d.record()) is not None and r.state == "stopping", 30, "the daemon to be stopping")
            time.sleep(SHUTDOWN_S / 2)  # well inside the shutdown method
            status = cli(ctx.cluster.address, "status", ctx.name)
            if f"{ctx.name}: stopping" not in status.stdout:
                ctx.violation(f"round {i}: status does not show the daemon stopping during its shutdown method")
            gc = cli(ctx.cluster.address, "gc")
            collected = [line for line in gc.stdout.splitlines() if line.startswith("removed")]
            if any(line.startswith(f"removed supervisor {ctx.name} ") for line in collected):
                ctx.violation(f"round {i}: gc collected a job that was being torn down: {gc.stdout.strip()[-300:]}")
            elif collected:  # the leftovers of earlier scenarios (a SIGKILLed daemon's beats) are gc's to take
                ctx.report.notes[f"round {i}: gc during the stop also"] = collected
            out, err = stop.communicate(timeout=180)
        finally:
            if stop.poll() is None:
                stop.kill()
                stop.wait()
        stops.append(time.monotonic() - asked)
        code = daemon.wait_exit(60)
        (ctx.fault_dir / "slowstop-rollout-all").unlink(missing_ok=True)
        if stop.returncode != 0:
            ctx.violation(f"round {i}: `supervisor stop` exited {stop.returncode}: {err.strip()[-300:]}")
        if code != 0:
            ctx.violation(f"round {i}: the daemon exited {code}, expected 0")
        if stops[-1] < SHUTDOWN_S:
            ctx.violation(f"round {i}: `supervisor stop` returned after {stops[-1]:.1f}s, before the {SHUTDOWN_S:g}s shutdown method ended")
        leaked_before = len(ctx.report.leaked)
        ctx.check_torn_down()
        if len(ctx.report.leaked) == leaked_before and not ctx.report.violations:
            ctx.report.faults_recovered += 1
        ctx.restart_spec(options)
    ctx.report.recovery = Stats.of(stops)
    ctx.report.notes["recovery measures"] = "`supervisor stop` asked -> it returned (the shutdown method takes 10 s)"
    ctx.check_steps_and_items(min_steps=1, per_daemon=True)
    if p.trained:
        ctx.check_state_intact(per_daemon=True)


PROFILES = {"quick": Params(rounds=1, trained=False), "full": Params(rounds=3)}
TIME_LIMIT_S = {"quick": 180.0, "full": 600.0}
