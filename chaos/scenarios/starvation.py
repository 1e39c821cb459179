"""starvation: another placement group holds the GPUs while the job's pools wait. The wait must say
so (the daemon's progress reports and `supervisor status` name what is missing and who holds it);
once the GPUs are released the job must start and run, and a stop must leave nothing."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from ..faults import stop_daemon
from ..harness import BIN, ENV, JobOptions, wait_until
from ..runner import Context

BLOCKER = "chaos-starvation-blocker"


@dataclass(frozen=True)
class Params:
    hold_s: float  # keep the GPUs at least this long after the wait was first reported
    trained: bool = True  # the job's trained groups (their state checked at the end)


def run(ctx: Context, p: Params) -> None:
    import ray
    from ray.util import placement_group, remove_placement_group

    gpus = int(ray.cluster_resources().get("GPU", 0))
    nodes = len(ctx.cluster.gpu_nodes)
    blocker = placement_group([{"GPU": gpus // nodes, "CPU": 1}] * nodes, strategy="SPREAD", name=BLOCKER)
    try:
        ray.get(blocker.ready(), timeout=60)
        ctx.injected("GPUs held by another placement group")
        daemon = ctx.start(JobOptions(progress_interval_s=1.0, trained=p.trained))
        started = time.monotonic()

        def reported():
            for e in daemon.events():
                if e.get("event") == "waiting_for_resources" and any(BLOCKER in b for b in e.get("blocking_placement_groups", [])):
                    return e
            return None

        event = wait_until(reported, 120, "a wait report naming the placement group that holds the GPUs", 0.2)
        ctx.report.detection = ctx.report.detection.of([time.monotonic() - started])
        status = subprocess.run([str(BIN / "supervisor"), "status", ctx.name, "--address", ctx.cluster.address], env=ENV, capture_output=True, text=True, timeout=60)
        if "PENDING" not in status.stdout or "pending placement groups" not in status.stdout:
            ctx.violation(f"`supervisor status` does not show the pending pool and its demand:\n{status.stdout}")
        ctx.report.notes["wait report"] = f"pool {event.get('pool')}: {event.get('bundles_placed')}/{event.get('bundles_requested')} bundles placed; held by: {event.get('blocking_placement_groups')}"
        time.sleep(p.hold_s)
    finally:
        remove_placement_group(blocker)
    released = time.monotonic()
    daemon.wait_running()
    daemon.wait_steps(2)
    ctx.report.recovery = ctx.report.recovery.of([time.monotonic() - released])
    ctx.report.notes["recovery measures"] = "GPUs released -> job running and 2 steps done"
    ctx.report.faults_recovered = 1
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=2)
    if p.trained:
        ctx.check_state_intact()
    ctx.check_torn_down()


PROFILES = {"quick": Params(hold_s=2.0, trained=False), "full": Params(hold_s=30.0)}
TIME_LIMIT_S = {"quick": 180.0, "full": 300.0}
