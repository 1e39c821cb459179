"""A standby's CPU priority (supervisor/core/worker/cpu_priority.py): every thread lowered and restored, and
not lowered at all where it could not be restored. Each case runs in a process of its own (a nice
value, once raised, is this process's for good without CAP_SYS_NICE), with real threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import json, os, threading
    from supervisor.core.worker import cpu_priority

    def sched():
        out = []
        for tid in os.listdir("/proc/self/task"):
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            out.append([int(fields[16]), int(fields[38])])  # fields 19 and 41: nice, policy
        return sorted(out)

    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)  # a thread started before the change
    helper.start()
    before = sched()
    lowered_by = cpu_priority.lower(INCREMENT, sched_idle=IDLE)
    lowered = sched()
    late = threading.Thread(target=stop.wait)  # started while lowered: inherits it
    late.start()
    cpu_priority.restore(lowered_by)
    restored = sched()
    stop.set()
    print(json.dumps({"changed": lowered_by is not None, "before": before, "lowered": lowered, "restored": restored}))
    """
)


def _probe(prefix: list[str], increment: int = 5, sched_idle: bool = True) -> dict:
    code = f"INCREMENT, IDLE = {increment}, {sched_idle}\n{PROBE}"
    proc = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(("increment", "sched_idle"), [(5, True), (5, False), (0, True)])
def test_every_thread_is_lowered_and_restored(increment, sched_idle):
    seen = _probe([], increment, sched_idle)
    (base,) = {tuple(t) for t in seen["before"]}
    assert base[1] == os.SCHED_OTHER and len(seen["before"]) >= 2 and seen["changed"]
    lowered = (min(19, base[0] + increment), os.SCHED_IDLE if sched_idle else os.SCHED_OTHER)
    assert {tuple(t) for t in seen["lowered"]} == {lowered} and len(seen["lowered"]) == len(seen["before"])
    assert {tuple(t) for t in seen["restored"]} == {base} and len(seen["restored"]) == len(seen["before"]) + 1  # the late thread too


def test_nothing_asked_is_nothing_changed():
    seen = _probe([], 0, False)
    assert not seen["changed"] and seen["before"] == seen["lowered"] == seen["restored"][: len(seen["before"])]


@pytest.mark.parametrize("sched_idle", [True, False])
def test_without_a_way_back_nothing_is_lowered(sched_idle):
    # CI runs as root: drop CAP_SYS_NICE (and keep RLIMIT_NICE at 0, which allows no raise).
    seen = _probe(["prlimit", "--nice=0", "--", "setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"], 5, sched_idle)
    assert not seen["changed"]
    assert seen["before"] == seen["lowered"] == seen["restored"][: len(seen["before"])]


def test_an_rlimit_nice_that_allows_the_way_back_is_enough(monkeypatch):
    # (Raising RLIMIT_NICE needs CAP_SYS_RESOURCE, which this machine's root lacks: the limit's
    # reading is checked here, the lowering itself above.)
    import resource

    from supervisor.core.worker import cpu_priority

    monkeypatch.setattr(cpu_priority, "_has_cap_sys_nice", lambda: False)
    for soft, original, allowed in ((0, 0, False), (20, 0, True), (15, 0, False), (15, 5, True), (resource.RLIM_INFINITY, -5, True)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, s=soft: (s, s))
        assert cpu_priority.can_restore(original) is allowed, (soft, original)
    monkeypatch.setattr(cpu_priority, "_has_cap_sys_nice", lambda: True)
    assert cpu_priority.can_restore(-20)
