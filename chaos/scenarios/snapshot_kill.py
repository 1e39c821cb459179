"""snapshot-kill: SIGKILL a rank of the sharded "actor" group while a snapshot copies its state (a
fault hook of the example workers holds the rank inside its state copy). That snapshot never
completes, so the rollback must go to the one before it, every stateful group with it; the driver
replays from there, nothing is lost or applied twice, and the trained state ends bit for bit as a
fault-free run's."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..faults import KillMethod, kill_actor, rank_restarts
from ..harness import JobOptions, rank_actor, wait_until
from ..invariants import check_restarts
from ..report import Stats
from ..runner import Context

GROUP = "actor"
HOLD_S = 5.0  # how long the rank stays inside its state copy: the kill lands well within it


@dataclass(frozen=True)
class Params:
    kills: int


def run(ctx: Context, p: Params) -> None:
    daemon = ctx.start(JobOptions())
    daemon.wait_running()
    daemon.wait_steps(2)  # a complete snapshot to roll back to
    kills: Counter[tuple[str, int]] = Counter()
    recovery: list[float] = []
    for i in range(p.kills):
        if not ctx.time_left():
            break
        rank = ctx.rng.randrange(2)
        seen = len(daemon.events())
        (ctx.fault_dir / f"slowsnapshot-{GROUP}-{rank}").write_text(str(HOLD_S))
        inside = ctx.fault_dir / f"insnapshot-{GROUP}-{rank}"
        step = int(wait_until(partial(_read, inside), 60, f"{GROUP} rank {rank} inside a snapshot", 0.05))
        inside.unlink()
        kill_actor(rank_actor(daemon.record(), GROUP, rank)[1], KillMethod.SIGKILL)
        killed = time.monotonic()
        kills[(GROUP, rank)] += 1
        ctx.injected("SIGKILL inside a snapshot")
        event = wait_until(
            partial(_rollback_after, daemon, seen),
            180,
            f"the rollback after killing {GROUP} rank {rank}",
            0.1,
        )
        recovery.append(time.monotonic() - killed)
        # The snapshot of `step` was being taken: only the one before it is complete.
        if event["to_step"] != step - 1 or event.get("medium") != "memory":
            ctx.violation(
                f"kill {i}: rank {rank} died inside the snapshot of step {step}, but the job rolled back to step {event['to_step']} from {event.get('medium')}, expected step {step - 1} from memory"
            )
        daemon.wait_steps(daemon.steps_done() + 2)  # the job goes on after the replay
        ctx.report.faults_recovered += 1
    ctx.report.violations += check_restarts(kills, rank_restarts(daemon.record()))
    ctx.timings_from_events()
    ctx.report.recovery = Stats.of(recovery)
    ctx.report.notes["recovery measures"] = (
        "SIGKILL inside the snapshot -> the driver told to replay (rlhf_rolled_back)"
    )
    ctx.end_job(daemon, min_steps=3)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def _rollback_after(daemon, seen: int) -> dict | None:
    return next((e for e in daemon.events()[seen:] if e.get("event") == "rlhf_rolled_back"), None)


PROFILES = {"quick": Params(kills=1), "full": Params(kills=6)}
TIME_LIMIT_S = {"quick": 240.0, "full": 900.0}
