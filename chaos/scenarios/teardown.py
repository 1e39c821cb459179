"""teardown: many start/stop cycles, each ending one way: SIGTERM, SIGINT, a driver exception, or the
driver's normal end. Each must give its exit code and leave no placement group, actor or record."""

from __future__ import annotations

import enum
import signal
import time
from dataclasses import dataclass, replace

from ..harness import JobOptions
from ..report import Stats
from ..runner import Context


class Ending(enum.Enum):
    SIGTERM = "sigterm"
    SIGINT = "sigint"
    DRIVER_EXCEPTION = "driver exception"
    NORMAL_END = "normal end"


EXIT_CODE = {Ending.SIGTERM: 0, Ending.SIGINT: 0, Ending.DRIVER_EXCEPTION: 1, Ending.NORMAL_END: 0}


@dataclass(frozen=True)
class Params:
    cycles: int
    trained: bool = True  # the job's trained groups (their state checked at each end)


def run(ctx: Context, p: Params) -> None:
    endings = list(Ending)
    teardown: list[float] = []
    for i in range(p.cycles):
        if not ctx.time_left():
            break
        ending = endings[i % len(endings)] if i < len(endings) else ctx.rng.choice(endings)
        options = JobOptions(trained=p.trained)
        if ending is Ending.NORMAL_END:
            options = replace(options, steps=2)
        elif ending is Ending.DRIVER_EXCEPTION:
            options = replace(options, target_token=10_000)  # outside the vocabulary: the driver raises ValueError
        ctx.restart_spec(options)
        daemon = ctx.start(options)
        daemon.wait_running()
        if ending in (Ending.SIGTERM, Ending.SIGINT):
            daemon.wait_steps(1)
            daemon.signal(signal.SIGTERM if ending is Ending.SIGTERM else signal.SIGINT)
        asked = time.monotonic()
        code = daemon.wait_exit(120)
        teardown.append(time.monotonic() - asked)
        ctx.injected(ending.value)
        if code != EXIT_CODE[ending]:
            ctx.violation(f"cycle {i} ({ending.value}): exit code {code}, expected {EXIT_CODE[ending]}")
        leaked_before = len(ctx.report.leaked)
        ctx.check_torn_down()
        if len(ctx.report.leaked) == leaked_before and code == EXIT_CODE[ending]:
            ctx.report.faults_recovered += 1
    ctx.report.recovery = Stats.of(teardown)
    ctx.report.notes["recovery measures"] = "end requested (signal, or driver end) -> daemon exited, torn down"
    ctx.check_steps_and_items(min_steps=1, per_daemon=True)
    if p.trained:
        ctx.check_state_intact(per_daemon=True)


# Quick: one cycle (SIGTERM), for CI's time limit: SIGINT and the driver's own endings (an exception, a
# normal end) are in the full profile and in tests/test_daemon.py's test of every ending.
PROFILES = {"quick": Params(cycles=1, trained=False), "full": Params(cycles=50)}
TIME_LIMIT_S = {"quick": 300.0, "full": 2400.0}
