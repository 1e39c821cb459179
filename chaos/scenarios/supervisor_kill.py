"""supervisor-kill: SIGKILL the daemon mid-run and start it again. The new daemon must re-adopt the
job (same placement groups, same actors), the driver must resume from its saved step (re-running at
most the step in flight, skipping none), and a final stop must leave nothing."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from ..faults import actor_ids, stop_daemon
from ..harness import JobOptions, leftovers
from ..report import Stats
from ..runner import Context


@dataclass(frozen=True)
class Params:
    kills: int
    gap_s: tuple[float, float] = (0.5, 3.0)


def run(ctx: Context, p: Params) -> None:
    options = JobOptions()
    daemon = ctx.start(options)
    daemon.wait_running()
    daemon.wait_steps(1)
    readoption: list[float] = []
    for _ in range(p.kills):
        if not ctx.time_left():
            break
        time.sleep(ctx.rng.uniform(*p.gap_s))
        record = daemon.record()
        pgs_before, actors_before = leftovers(ctx.name)[0], actor_ids(record)
        daemon.signal(signal.SIGKILL)
        killed = time.monotonic()
        daemon.wait_exit(30)
        ctx.injected("daemon SIGKILL")
        daemon = ctx.start(options)
        daemon.wait_running()
        readoption.append(time.monotonic() - killed)
        if leftovers(ctx.name)[0] != pgs_before:
            ctx.violation("a restarted daemon re-created placement groups instead of adopting them")
        if actor_ids(daemon.record()) != actors_before:
            ctx.violation("a restarted daemon re-created actors instead of adopting them")
        daemon.wait_steps(1)  # the resumed driver makes progress
        ctx.report.faults_recovered += 1
    ctx.report.recovery = Stats.of(readoption)
    ctx.report.notes["recovery measures"] = "daemon SIGKILL -> a new daemon has re-adopted the job (RUNNING)"
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=p.kills + 1, allow_reruns=True)
    ctx.check_state_intact()
    ctx.check_torn_down()


PROFILES = {"quick": Params(kills=1), "full": Params(kills=10)}
TIME_LIMIT_S = {"quick": 240.0, "full": 1200.0}
