"""Programs `supervisor run` runs in tests/test_run.py: plain Python, no verl. ``group`` builds a
supervised group through the run's host as the verl integration does (a pool named under the
supervisor, the host's fence and hooks, registered in the record), then serves calls until told.

    python run_programs.py group OUT EXIT_CODE   # report to OUT (JSON lines); exit EXIT_CODE when OUT.stop exists
    python run_programs.py sigterm OUT           # on SIGTERM write OUT and exit 42
    python run_programs.py lost-host OUT         # a subprocess hosts the run and dies; then as sigterm
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def report(out: Path, **fields: object) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(fields) + "\n")


def group(out: Path, exit_code: int) -> int:
    import ray

    from supervisor import ClassWithInitArgs, GroupSupervisor, ResourcePool, create_group
    from supervisor.daemon.ownership import namespace_of, pool_prefix_of
    from supervisor.integrations.verl.host import HostedGroup
    from supervisor.run.run_host import RunHost

    ray.init()  # RAY_ADDRESS, from the run
    host = RunHost.from_environment()
    pool_name = host.pool_name("counters pool")
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix=pool_prefix_of(host.name, pool_name), detached=True)
    pool.fence = host.fence
    pool.adopt_from_any_namespace = True  # as the verl integration sets for a host's pools
    from workers import CounterWorker

    group = create_group(
        pool, ClassWithInitArgs(CounterWorker), name_prefix="counters_", detached=True, namespace=namespace_of(host.name), hooks=host.hooks
    )
    supervisor = GroupSupervisor(group, host.settings("counters").config, host.hooks)
    supervisor.start()
    host.register(HostedGroup("counters", pool_name, "workers:CounterWorker", group, supervisor))

    @ray.remote(num_cpus=0)
    def environment() -> dict[str, str | None]:
        return {k: os.environ.get(k) for k in ("SUPERVISOR_RUN", "PYTHONPATH")}

    report(
        out, event="ready", pid=os.getpid(), pool=pool_name, pgs=[pg.id.hex() for pg in pool.pgs], actors=list(group.worker_names),
        task_env=ray.get(environment.remote()), config=str(supervisor.config.restart),
    )  # fmt: skip
    stop = out.with_suffix(".stop")
    while not stop.exists():
        report(out, event="call", values=group.add(1))
        time.sleep(0.3)
    return exit_code


def sigterm(out: Path) -> int:
    def handler(signum: int, frame: object) -> None:
        out.write_text("SIGTERM")
        sys.exit(42)

    signal.signal(signal.SIGTERM, handler)
    out.with_suffix(".ready").write_text("ready")
    time.sleep(120)
    return 1


def host_and_die(out: Path) -> int:
    import ray

    from supervisor.run.run_host import RunHost

    ray.init()
    RunHost.from_environment()
    report(out, event="hosted", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
    return 1


def lost_host(out: Path) -> int:
    import subprocess

    subprocess.run([sys.executable, __file__, "host", str(out)])
    return sigterm(out.with_suffix(".txt"))


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    modes = {"group": lambda: group(out, int(sys.argv[3])), "sigterm": lambda: sigterm(out), "host": lambda: host_and_die(out), "lost-host": lambda: lost_host(out)}
    sys.exit(modes[mode]())
