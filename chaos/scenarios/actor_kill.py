"""actor-kill: kill random worker actors of the running job (SIGKILL of the process, or ``ray.kill``) at
random moments, mostly inside a rollout or reference call, some while the previous replacement
initialises. Every kill must be recovered (one restart per killed actor), every step's items must
come back exactly once, and nothing may be left after the job is stopped."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from ..faults import KillMethod, group_sizes, kill_actor, rank_restarts
from ..harness import JobOptions, rank_actor, wait_until
from ..invariants import check_restarts
from ..runner import Context


@dataclass(frozen=True)
class Params:
    kills: int
    init_kill_probability: float = 0.15  # kill the replacement again while it initialises
    gap_s: tuple[float, float] = (0.2, 1.5)  # random pause before each kill


def run(ctx: Context, p: Params) -> None:
    daemon = ctx.start(JobOptions())
    daemon.wait_running()
    daemon.wait_steps(1)
    kills: Counter[tuple[str, int]] = Counter()
    done = 0
    while done < p.kills and ctx.time_left():
        time.sleep(ctx.rng.uniform(*p.gap_s))
        record = daemon.record()
        sizes = group_sizes(record)
        group = ctx.rng.choice(sorted(sizes))
        rank = ctx.rng.randrange(sizes[group])
        method = ctx.rng.choice(list(KillMethod))
        name, handle = rank_actor(record, group, rank)
        old_id = handle._actor_id.hex()
        kill_actor(handle, method)
        kills[(group, rank)] += 1
        ctx.injected(method.value)
        done += 1
        if done < p.kills and ctx.rng.random() < p.init_kill_probability:
            replacement = wait_until(partial(_new_actor, record, name, old_id), 60, f"a replacement of {group} rank {rank}", 0.01)
            import ray

            ray.kill(replacement, no_restart=True)  # during its start or init method
            kills[(group, rank)] += 1
            ctx.injected("kill during init")
            done += 1
        wait_until(partial(_recovered, daemon, kills), 120, f"recovery of {group} rank {rank}", 0.1)
        ctx.report.faults_recovered = sum(kills.values())
    steps = daemon.steps_done()
    daemon.wait_steps(steps + 2)  # the job still makes progress
    ctx.report.violations += check_restarts(kills, rank_restarts(daemon.record()))
    ctx.timings_from_events()
    ctx.end_job(daemon, min_steps=3)


def _new_actor(record, name: str, old_id: str):
    import ray

    try:
        handle = ray.get_actor(name, namespace=record.namespace)
    except ValueError:
        return None
    return handle if handle._actor_id.hex() != old_id else None


def _recovered(daemon, kills: Counter) -> bool:
    record = daemon.record()
    if record is None or any(g.state != "running" for g in record.groups.values()):
        return False
    restarts = rank_restarts(record)
    states = {(name, r.rank): r.state for name, g in record.groups.items() for r in g.ranks}
    return all(restarts.get(k, 0) >= n and states.get(k) == "running" for k, n in kills.items())


PROFILES = {"quick": Params(kills=4), "full": Params(kills=100)}
TIME_LIMIT_S = {"quick": 240.0, "full": 1800.0}
