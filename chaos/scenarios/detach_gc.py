"""detach-gc: `supervisor stop --detach`, wait past the grace period, run `supervisor gc`, start
again. gc must leave the detached job alone (status shows it detached), and the new daemon must
re-adopt the same placement groups and actors and resume the driver."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..faults import actor_ids, cli, placement_group_ids, stop_daemon
from ..harness import JobOptions
from ..report import Stats
from ..runner import Context

GRACE_S = 5.0


@dataclass(frozen=True)
class Params:
    rounds: int
    trained: bool = True  # the job's trained groups (their state checked at the end)


def run(ctx: Context, p: Params) -> None:
    options = replace(JobOptions(trained=p.trained), orphan_grace_s=GRACE_S)
    daemon = ctx.start(options)
    daemon.wait_running()
    daemon.wait_steps(1)
    readoption: list[float] = []
    for i in range(p.rounds):
        if not ctx.time_left():
            break
        pgs, actors = placement_group_ids(ctx.name), actor_ids(daemon.record())
        detach = cli(ctx.cluster.address, "stop", ctx.name, "--detach")
        code = daemon.wait_exit(120)
        ctx.injected("stop --detach")
        if detach.returncode != 0 or code != 0:
            ctx.violation(f"round {i}: `stop --detach` exited {detach.returncode}, the daemon {code}: {detach.stderr.strip()[-300:]}")
        time.sleep(GRACE_S + 3.0)
        gc = cli(ctx.cluster.address, "gc")
        ctx.injected("gc past the grace period")
        if gc.returncode != 0 or "kept supervisor" not in gc.stdout:
            ctx.violation(f"round {i}: gc did not keep the detached job: {gc.stdout.strip()[-300:]}")
        status = cli(ctx.cluster.address, "status", ctx.name)
        if f"{ctx.name}: detached" not in status.stdout:
            ctx.violation(f"round {i}: status does not show the job detached")
        if placement_group_ids(ctx.name) != pgs:
            ctx.violation(f"round {i}: gc removed the detached job's placement groups")
        restarted = time.monotonic()
        daemon = ctx.start(options)
        daemon.wait_running()
        readoption.append(time.monotonic() - restarted)
        if placement_group_ids(ctx.name) != pgs or actor_ids(daemon.record()) != actors:
            ctx.violation(f"round {i}: the next start did not re-adopt the same placement groups and actors")
        daemon.wait_steps(daemon.steps_done() + 1)
        ctx.report.faults_recovered += 1
    ctx.report.recovery = Stats.of(readoption)
    ctx.report.notes["recovery measures"] = "start after a detach and a gc -> the job re-adopted (RUNNING)"
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=p.rounds + 1, allow_reruns=True)
    if p.trained:
        ctx.check_state_intact()
    ctx.check_torn_down()


PROFILES = {"quick": Params(rounds=1, trained=False), "full": Params(rounds=3)}
TIME_LIMIT_S = {"quick": 240.0, "full": 600.0}
