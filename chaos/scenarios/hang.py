"""hang: make a worker hang inside a call (a fault marker the example workers read). The supervisor
must detect it by the call timeout, replace the rank, and re-run its shard: no step fails, nothing is
lost, and the rank's restart is counted as a hang."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from ..faults import group_sizes, rank_restarts
from ..harness import TRAINED_GROUPS, JobOptions, wait_until
from ..invariants import check_restarts
from ..report import Stats
from ..runner import Context

CALL_TIMEOUT_S = 4.0


@dataclass(frozen=True)
class Params:
    hangs: int


def run(ctx: Context, p: Params) -> None:
    daemon = ctx.start(JobOptions(call_timeout_s=CALL_TIMEOUT_S))
    daemon.wait_running()
    daemon.wait_steps(1)
    hangs: Counter[tuple[str, int]] = Counter()
    detection: list[float] = []
    recovery: list[float] = []
    for _ in range(p.hangs):
        if not ctx.time_left():
            break
        sizes = group_sizes(daemon.record())
        group = ctx.rng.choice(sorted(sizes))
        rank = ctx.rng.randrange(sizes[group])
        seen = len(daemon.events())
        marker = ctx.fault_dir / f"hang-{group}-{rank}"
        marker.touch()
        hung_at = time.time()
        ctx.injected("hang in a call")
        hangs[(group, rank)] += 1

        event = wait_until(partial(_event, daemon, seen, "worker_failed", group, rank), 120, f"{group} rank {rank} to be found hung", 0.1)
        if event.get("reason") != "hung":
            ctx.violation(f"{group} rank {rank} hung but was reported {event.get('reason')}")
        recovered = wait_until(partial(_event, daemon, seen, "worker_recovered", group, rank), 120, f"{group} rank {rank} to be replaced", 0.1)
        detection.append(_timestamp(event) - hung_at)
        recovery.append(_timestamp(recovered) - hung_at)
        ctx.report.faults_recovered += 1
        daemon.wait_steps(daemon.steps_done() + 1)
    ctx.report.violations += _check_hang_restarts(hangs, rank_restarts(daemon.record()))
    ctx.report.detection, ctx.report.recovery = Stats.of(detection), Stats.of(recovery)
    ctx.report.notes["times measured from"] = f"the hang marker (the next call hangs; call_timeout_s = {CALL_TIMEOUT_S:g})"
    ctx.end_job(daemon, min_steps=2)


def _check_hang_restarts(hangs: Counter[tuple[str, int]], restarts: dict[tuple[str, int], int]) -> list[str]:
    """Each hung rank restarted once per hang. The peers of a rank hung in a collective (a trained
    group's step) wait for it inside the collective and time out with it: they may be restarted too,
    at most once per hang of their group."""
    trained = {g.name for g in TRAINED_GROUPS}
    hung_in = Counter(group for group, _ in hangs.elements())
    peers = {k for k in restarts if k[0] in trained and k not in hangs and hung_in[k[0]]}
    problems = check_restarts(hangs, {k: n for k, n in restarts.items() if k not in peers})
    problems += [f"{g} rank {r}: {restarts[(g, r)]} restart(s) for {hung_in[g]} hang(s) of a peer" for g, r in sorted(peers) if restarts[(g, r)] > hung_in[g]]
    return problems


def _event(daemon, seen: int, kind: str, group: str, rank: int) -> dict | None:
    """The first ``kind`` event about ``group`` rank ``rank`` after the first ``seen`` events."""
    return next((e for e in daemon.events()[seen:] if e.get("event") == kind and e.get("group") == group and e.get("rank") == rank), None)


def _timestamp(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


PROFILES = {"quick": Params(hangs=1), "full": Params(hangs=10)}
TIME_LIMIT_S = {"quick": 180.0, "full": 1200.0}
