"""Driver functions for daemon tests (``[driver] function = "daemon_drivers:..."``); light, no torch."""

from __future__ import annotations

from supervisor.daemon.driver import DriverContext
from supervisor.errors import RolledBack


def count_steps(ctx: DriverContext) -> None:
    """``steps`` steps of one call on every rank of group ``group``, resuming from saved progress.

    Args (``[driver.args]``): steps (5), interval_s (0.2), fail_at (-1: never), group ("counters").
    """
    steps = int(ctx.args.get("steps", 5))
    interval = float(ctx.args.get("interval_s", 0.2))
    fail_at = int(ctx.args.get("fail_at", -1))
    group = ctx.groups[ctx.args.get("group", "counters")]
    start = int(ctx.progress.get("step", 0))
    log = ctx.log
    log.info("count_steps_start", start_step=start, resumed=ctx.resumed)
    for step in range(start, steps):
        if ctx.stop_requested.is_set():
            log.info("count_steps_stopped", step=step)
            return
        if step == fail_at:
            raise RuntimeError(f"driver failed at step {step}")
        values = group.add(0)
        if len(values) != group.world_size:
            raise RuntimeError(f"step {step}: {len(values)} answers from {group.world_size} ranks")
        ctx.save_progress({"step": step + 1})
        if ctx.kv is not None:
            ctx.kv.put("last_step", step, namespace="driver")
        ctx.stop_requested.wait(interval)
    log.info("count_steps_done", start_step=start, steps=steps)


def traffic(ctx: DriverContext) -> None:
    """Calls until stopped: ``add`` on every rank, and every ``fail_every``-th step a call that raises
    (so latency and failure metrics have data). Calls during a recovery wait for it (supervised)."""
    group = ctx.groups[ctx.args.get("group", "counters")]
    fail_every = int(ctx.args.get("fail_every", 5))
    # A stateful group (tests/state_workers.py) trained by steps, with its snapshots and rollbacks.
    trained = ctx.groups[ctx.args["trained"]] if "trained" in ctx.args else None
    train_step = 0
    step = 0
    while not ctx.stop_requested.wait(float(ctx.args.get("interval_s", 0.1))):
        if trained is not None:
            try:
                ctx.step_boundary(train_step)
                trained.train_step(train_step)
                train_step += 1
            except RolledBack as rolled_back:
                train_step = ctx.rolled_back(rolled_back)
            except Exception as exc:
                ctx.log.info("traffic_train_failed", error=str(exc)[:200])
        if ctx.kv is not None and step % fail_every == 0:  # a KV read that waits for its key (the wait metrics)
            ctx.kv.put("traffic_step", step, namespace="traffic")
            ctx.kv.get("traffic_step", timeout_s=10, namespace="traffic")
        try:
            group.add(1)
            if step % fail_every == 0:
                try:
                    group.fail("a method that raises")
                except Exception:
                    pass
        except Exception as exc:  # a rank died mid-call (the call raises under the default policy)
            ctx.log.info("traffic_call_failed", error=str(exc)[:200])
        step += 1
