"""pause: SIGSTOP the daemon past its grace period, start a second one (it takes the job over), then
SIGCONT the first and SIGTERM it, or let its driver carry on (it saves progress on resuming). The
new daemon's record, placement groups and actors must be untouched, the old one must exit 1 having
destroyed nothing, and the job must go on under the new daemon to a clean stop."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, replace

from ..faults import actor_ids, placement_group_ids, stop_daemon
from ..harness import Daemon, JobOptions, wait_until
from ..report import Stats
from ..runner import Context

GRACE_S = 5.0


@dataclass(frozen=True)
class Params:
    rounds: int
    paused_s: float = GRACE_S + 3.0


def run(ctx: Context, p: Params) -> None:
    options = replace(JobOptions(), orphan_grace_s=GRACE_S)
    daemon = ctx.start(options)
    daemon.wait_running()
    daemon.wait_steps(1)
    takeover: list[float] = []
    for i in range(p.rounds):
        if not ctx.time_left():
            break
        sigterm = i % 2 == 0  # else the old driver resumes mid-step and saves its progress
        pgs, actors = placement_group_ids(ctx.name), actor_ids(daemon.record())
        daemon.signal(signal.SIGSTOP)
        paused = time.monotonic()
        ctx.injected("daemon SIGSTOP")
        time.sleep(max(0.0, p.paused_s - 2.0))  # the new start takes a couple of seconds to connect
        successor = ctx.start(options)
        record = successor.wait_running()
        takeover.append(time.monotonic() - paused)
        daemon.signal(signal.SIGCONT)
        if sigterm:
            daemon.signal(signal.SIGTERM)
            ctx.injected("SIGTERM on resuming")
        else:
            ctx.injected("driver resumed (save_progress)")
        code = daemon.wait_exit(120)
        if code != 1:
            ctx.violation(f"round {i}: the superseded daemon exited with {code}, expected 1")
        _check_untouched(ctx, daemon, successor, record, pgs, actors, i)
        successor.wait_steps(successor.steps_done() + 1)  # the job goes on under the new daemon
        ctx.report.faults_recovered += 1
        daemon = successor
    ctx.report.recovery = Stats.of(takeover)
    ctx.report.notes["recovery measures"] = "SIGSTOP of the daemon -> a new daemon has taken the job over (RUNNING)"
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=p.rounds + 1, allow_reruns=True)
    ctx.check_state_intact()
    ctx.check_torn_down()


def _check_untouched(ctx: Context, old: Daemon, new: Daemon, record: object, pgs: dict[str, str], actors: dict[str, str], i: int) -> None:
    now = new.record()
    if now is None or now.owner != record.owner or now.pid != new.proc.pid:  # type: ignore[attr-defined]
        ctx.violation(f"round {i}: the superseded daemon overwrote or deleted the new daemon's record")
        return
    # The new daemon's heartbeat goes on (the old one's writes were refused, not merely outrun).
    seq = now.heartbeat_seq
    try:
        wait_until(lambda: (r := new.record()) is not None and r.heartbeat_seq > seq and r.owner == now.owner, 10, "the new heartbeat")
    except TimeoutError:
        ctx.violation(f"round {i}: the new daemon's heartbeat stopped")
    if placement_group_ids(ctx.name) != pgs:
        ctx.violation(f"round {i}: placement groups changed across the takeover (the old daemon removed or the new one re-created them)")
    if actor_ids(new.record()) != actors:
        ctx.violation(f"round {i}: actors changed across the takeover (the old daemon killed or the new one re-created them)")
    refused = [e for e in old.events() if e.get("event") == "superseded"]
    if not refused:
        ctx.violation(f"round {i}: the old daemon never learnt it was superseded")


PROFILES = {"quick": Params(rounds=2), "full": Params(rounds=5)}
TIME_LIMIT_S = {"quick": 300.0, "full": 900.0}
