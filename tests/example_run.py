"""One run of the README's main job, `supervisor start examples/rlhf/rlhf.toml`, shared by the tests
that check it (``example_run`` in conftest.py): it takes about a minute of both cores, so it runs once
per session, not once per property.

The run is made as a user's shell would (neither the loopback variable nor Ray's token variables set),
inside a private network namespace that has an address of its own where this machine allows one
(root: ``unshare -n``), so that every listener of the job can be read and judged; elsewhere it runs
plainly and its listeners are not known.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon_harness import BIN, TESTS_DIR, log_events

from supervisor.daemon.auth import RUNTIME_DIR_ENV
from supervisor.daemon.loopback import LOOPBACK_ENV

REPO = TESTS_DIR.parent
TEST_HOST_IP = "10.99.0.1"  # the namespace's own address: what Ray's address discovery finds there
# A namespace with only `lo`, given a second, non-loopback address and a default route through it, so
# that an address picked "from the outside" is TEST_HOST_IP. No packet leaves it.
NETNS_SETUP = f"ip link set lo up && ip addr add {TEST_HOST_IP}/32 dev lo && ip route add default dev lo src {TEST_HOST_IP}"
# A user's shell: neither the loopback variable nor any of Ray's token variables.
USER_ENV = {k: v for k, v in os.environ.items() if k != LOOPBACK_ENV and not k.startswith("RAY_AUTH")}
RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class ExampleRun:
    """What one run of the example job left: its exit code, its JSON log, and (in a namespace) every
    TCP listener seen while it ran and the address Ray would pick there on its own."""

    returncode: int | None
    events: list[dict[str, Any]]
    log_tail: str
    listeners: set[str] | None  # None: not run in a namespace (see netns_unavailable)
    discovered_ip: str | None
    netns_unavailable: str | None


def netns_unavailable() -> str | None:
    """Why a private network namespace cannot be made here (None: it can)."""
    for tool in ("unshare", "nsenter", "ip", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "-n", "sh", "-c", NETNS_SETUP], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a private network namespace here (unshare -n needs root): {probe.stderr.strip()}"
    return None


def wait_for_namespace(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Until ``proc`` runs in a network namespace of its own that has the test-host address (before
    that, nsenter would enter this one)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if os.readlink(f"/proc/{proc.pid}/ns/net") != own:
                addrs = subprocess.run(["nsenter", "-t", str(proc.pid), "-n", "ip", "-o", "addr"], capture_output=True, text=True).stdout
                if f"{TEST_HOST_IP}/32" in addrs and "default" in subprocess.run(
                    ["nsenter", "-t", str(proc.pid), "-n", "ip", "route"], capture_output=True, text=True
                ).stdout:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not get its own network namespace within {timeout_s}s (exit {proc.poll()})")


def listen_addresses(pid: int) -> set[str]:
    """The local address of every TCP listener in the network namespace of ``pid``."""
    out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-ltnH"], capture_output=True, text=True).stdout
    return {line.split()[3] for line in out.splitlines() if len(line.split()) >= 4}


def on_loopback(local: str) -> bool:
    host = local.rpartition(":")[0].strip("[]")
    if host in ("*", ""):
        return False
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the daemon tears down), then SIGKILL if it takes too long."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def run_example_job(workdir: Path) -> ExampleRun:
    """Run the example job to its end (in a namespace where one can be made), as a user would."""
    log = workdir / "daemon.log"
    reason = netns_unavailable()
    start = f"exec {BIN / 'supervisor'} start examples/rlhf/rlhf.toml --log-json"
    command = ["unshare", "-n", "sh", "-c", f"{NETNS_SETUP} && {start}"] if reason is None else ["sh", "-c", start]
    env = {**USER_ENV, RUNTIME_DIR_ENV: str(workdir / "run")}
    listeners: set[str] | None = None if reason else set()
    discovered = None
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        if listeners is not None:
            wait_for_namespace(proc)
            # The namespace is one where Ray, left to itself, would pick the test-host address (so a
            # listener check is not passed for want of any other address).
            discovered = subprocess.run(
                ["nsenter", "-t", str(proc.pid), "-n", sys.executable, "-c",
                 "from ray._common.network_utils import node_ip_address_from_perspective as f; print(f())"],
                env=USER_ENV, capture_output=True, text=True, timeout=60,
            ).stdout.strip()  # fmt: skip
        while proc.poll() is None and time.monotonic() < deadline:
            if listeners is not None:
                listeners |= listen_addresses(proc.pid)
            time.sleep(0.5)
    finally:
        stop(proc)
    return ExampleRun(proc.returncode, log_events(log), log.read_text()[-3000:], listeners, discovered, reason)
