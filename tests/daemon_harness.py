"""What the tests that run `supervisor start` as a subprocess share: paths, the environment, and
waiting for the daemon's state record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent  # the venv's `supervisor` and `ray`
# Loopback only; the daemon's workers import the test worker classes from tests/. The PYTHONPATH the
# tests run with stays behind it: a checkout other than the venv's editable one (a git worktree) is
# the code its daemons must run.
ENV = {
    **os.environ,
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "PYTHONPATH": os.pathsep.join(dict.fromkeys(filter(None, [str(TESTS_DIR), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))),
}


def log_events(log: Path) -> list[dict[str, Any]]:
    """The JSON log events a daemon wrote to ``log`` (other lines, and a line being written, skipped)."""
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def wait_for_record(
    name: str, proc: subprocess.Popen | None = None, state: str = "running", timeout_s: float = 90.0, log: Path | None = None
) -> Any:
    """The record of supervisor ``name`` once it is in ``state`` (and written by ``proc``, when given).

    Raises:
        AssertionError: ``proc`` exited first (with the tail of ``log``), or the timeout passed.
    """
    from supervisor.daemon.record import RecordStore

    store = RecordStore()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = store.get(name)
        if record is not None and record.state == state and (proc is None or record.pid == proc.pid):
            return record
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None else ""
            raise AssertionError(f"daemon exited with {proc.returncode}: {tail}")
        time.sleep(0.2)
    raise AssertionError(f"supervisor {name} not {state} after {timeout_s}s")
