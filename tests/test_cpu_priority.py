"""A standby's CPU priority (supervisor/core/cpu_priority.py): every thread lowered and restored, and
not lowered at all where it could not be restored. Each case runs in a process of its own (a nice
value, once raised, is this process's for good without CAP_SYS_NICE), with real threads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import json, os, threading
    from supervisor.core import cpu_priority

    def nices():
        out = []
        for tid in os.listdir("/proc/self/task"):
            stat = open(f"/proc/self/task/{tid}/stat").read()
            out.append(int(stat.rsplit(")", 1)[1].split()[16]))  # field 19: nice
        return sorted(out)

    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)  # a thread started before the change
    helper.start()
    before = nices()
    original = cpu_priority.lower(5)
    lowered = nices()
    late = threading.Thread(target=stop.wait)  # started while lowered: inherits it
    late.start()
    cpu_priority.restore(original)
    restored = nices()
    stop.set()
    print(json.dumps({"original": original, "before": before, "lowered": lowered, "restored": restored}))
    """
)


def _probe(prefix: list[str]) -> dict:
    proc = subprocess.run([*prefix, sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_thread_is_lowered_and_restored():
    seen = _probe([])
    base = seen["before"][0]
    assert seen["original"] == base and len(seen["before"]) >= 2 and set(seen["before"]) == {base}
    assert set(seen["lowered"]) == {min(19, base + 5)} and len(seen["lowered"]) == len(seen["before"])
    assert set(seen["restored"]) == {base} and len(seen["restored"]) == len(seen["before"]) + 1  # the late thread too


def test_without_a_way_back_nothing_is_lowered():
    # CI runs as root: drop CAP_SYS_NICE (and keep RLIMIT_NICE at 0, which allows no raise).
    seen = _probe(["prlimit", "--nice=0", "--", "setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"])
    assert seen["original"] is None
    assert seen["before"] == seen["lowered"] == seen["restored"][: len(seen["before"])]


def test_an_rlimit_nice_that_allows_the_way_back_is_enough(monkeypatch):
    # (Raising RLIMIT_NICE needs CAP_SYS_RESOURCE, which this machine's root lacks: the limit's
    # reading is checked here, the lowering itself above.)
    import resource

    from supervisor.core import cpu_priority

    monkeypatch.setattr(cpu_priority, "_has_cap_sys_nice", lambda: False)
    for soft, original, allowed in ((0, 0, False), (20, 0, True), (15, 0, False), (15, 5, True), (resource.RLIM_INFINITY, -5, True)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, s=soft: (s, s))
        assert cpu_priority.can_restore(original) is allowed, (soft, original)
    monkeypatch.setattr(cpu_priority, "_has_cap_sys_nice", lambda: True)
    assert cpu_priority.can_restore(-20)
