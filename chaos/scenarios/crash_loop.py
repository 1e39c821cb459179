"""crash-loop: a worker that dies on every start, as soon as it gets work (a fault marker the example
workers read: each incarnation of the rank exits in its first data call). The supervisor replaces it
until the restart budget (``max_restarts``) is spent; then the group must be FAILED and the daemon must
escalate cleanly: exit 1, the failure naming the rank and the budget, everything torn down."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..harness import JobOptions
from ..runner import Context

MAX_RESTARTS = 3


@dataclass(frozen=True)
class Params:
    loops: int  # separate runs, each crash-looping a different rank


def run(ctx: Context, p: Params) -> None:
    options = JobOptions(max_restarts=MAX_RESTARTS)
    for i in range(p.loops):
        if not ctx.time_left():
            break
        group, rank = ("rollout", 1 + i % 3) if i % 2 == 0 else ("reference", i % 2)
        ctx.restart_spec(options)
        daemon = ctx.start(options)
        daemon.wait_running()
        daemon.wait_steps(1)
        (ctx.fault_dir / f"crashloop-{group}-{rank}").touch()  # the rank's next call kills it, and so on
        started = time.monotonic()
        ctx.injected("crash loop")
        code = daemon.wait_exit(180)
        escalated = time.monotonic() - started
        (ctx.fault_dir / f"crashloop-{group}-{rank}").unlink()
        events = daemon.events()
        failed = [e for e in events if e.get("event") == "group_failed"]
        replaced = [e for e in events if e.get("event") == "worker_replaced" and e.get("group") == group and e.get("rank") == rank]
        if code != 1:
            ctx.violation(f"a crash-looping {group} rank {rank} ended the daemon with exit code {code}, expected 1")
        message = failed[0].get("message", "") if failed else ""
        if f"rank {rank} " not in message or "budget" not in message:
            ctx.violation(f"the group failure does not name {group} rank {rank} and the restart budget: {message!r}")
        if len(replaced) != MAX_RESTARTS:
            ctx.violation(f"{len(replaced)} replacements of {group} rank {rank}, expected the budget's {MAX_RESTARTS}")
        ctx.report.faults_recovered += 1 if code == 1 and failed else 0
        ctx.report.notes.setdefault("crash loop started -> daemon exited 1 (s)", []).append(round(escalated, 1))
        ctx.report.notes.setdefault("replacements before escalation", []).append(len(replaced))
        ctx.check_torn_down()
    ctx.timings_from_events()
    ctx.check_steps_and_items(min_steps=1, per_daemon=True)


PROFILES = {"quick": Params(loops=1), "full": Params(loops=4)}
TIME_LIMIT_S = {"quick": 240.0, "full": 900.0}
