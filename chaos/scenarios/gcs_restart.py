"""gcs-restart: the head's GCS process killed and started again (GCS fault tolerance: it reloads its
tables from Redis) several times under the running job. The daemon must keep its job: no rank judged
dead, no restart charged, no takeover of its record, no teardown; every step's items exactly once, the
trained state bit-exact, and the record's owner and fence generation and its event history intact
afterwards. Noted: how long the driver's steps stalled around each restart."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..faults import rank_restarts
from ..harness import JobOptions, event_time
from ..runner import Context


@dataclass(frozen=True)
class Params:
    restarts: int
    outage_s: float  # from the kill to the new GCS process (a real head's restart takes about this)
    gap_s: tuple[float, float] = (3.0, 6.0)  # running time between restarts


def run(ctx: Context, p: Params) -> None:
    from supervisor.daemon.record import RecordStore

    daemon = ctx.start(JobOptions())
    daemon.wait_running()
    daemon.wait_steps(2)
    before = daemon.record()
    history_before = [(e.time, e.kind) for e in RecordStore().events(ctx.name)]
    windows: list[tuple[float, float]] = []
    for _ in range(p.restarts):
        if not ctx.time_left():
            break
        time.sleep(ctx.rng.uniform(*p.gap_s))
        killed = time.time()
        ctx.cluster.restart_gcs(p.outage_s)
        ctx.injected("gcs restart")
        daemon.wait_steps(daemon.steps_done() + 2)
        ctx.report.faults_recovered += 1
        windows.append((killed, time.time()))
    after = daemon.record()
    events = daemon.events()
    restarts = sum(rank_restarts(after).values())
    if (after.owner, after.generation) != (before.owner, before.generation):
        ctx.violation(f"the record changed hands: owner/generation {before.owner[:8]}/{before.generation} -> {after.owner[:8]}/{after.generation}")
    if restarts:
        ctx.violation(f"{restarts} restart(s) charged across GCS restarts")
    false = [e for e in events if e.get("event") in ("worker_failed", "group_failed")]
    if false:
        ctx.violation(f"{len(false)} failure(s) judged while the GCS restarted, first: {false[0].get('event')} {false[0].get('detail') or false[0].get('message')}")
    back = sum(1 for e in events if e.get("event") == "gcs_reachable_again")
    if back < len(windows):
        ctx.violation(f"the daemon saw {back} of {len(windows)} GCS outage(s) end")
    history = [(e.time, e.kind) for e in RecordStore().events(ctx.name)]
    if history[: len(history_before)] != history_before:
        ctx.violation("the event history lost or changed events across GCS restarts")
    steps = [event_time(e) for e in events if e.get("event") == "rlhf_step"]
    ctx.report.notes["GCS outages seen by the daemon (s)"] = [e.get("outage_s") for e in events if e.get("event") == "gcs_reachable_again"]
    ctx.report.notes["longest gap between steps around each restart (s)"] = [round(_longest_gap(steps, a, b), 2) for a, b in windows]
    gaps = sorted(b - a for a, b in zip(steps, steps[1:], strict=False))
    ctx.report.notes["median gap between steps (s)"] = round(gaps[len(gaps) // 2], 2) if gaps else None
    ctx.end_job(daemon, min_steps=2)



def _longest_gap(steps: list[float], start: float, end: float) -> float:
    """The longest time between two consecutive steps, of those gaps that overlap ``[start, end]``."""
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False) if b >= start and a <= end]
    return max(gaps, default=0.0)


PROFILES = {"quick": Params(restarts=3, outage_s=3.0), "full": Params(restarts=10, outage_s=5.0)}
TIME_LIMIT_S = {"quick": 300.0, "full": 1200.0}
