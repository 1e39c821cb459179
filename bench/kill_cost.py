"""What one kill costs the job, and where that cost goes.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.kill_cost [--kills 8]

The goodput job's standby way (``bench/goodput.py``: examples/rlhf, one standby per group) runs twice
on one cluster: with its standbys forked from per-node zygotes (``standby_preload``) and with every
standby started as a plain process. Each job gets ``kills`` SIGKILLs of a random rank, ``GAP_S`` apart;
a kill's cost is the steps the job did not do in the ``AFTER_S`` seconds after it, in seconds of the
pace of the last ``PACE_S`` seconds before the next event (when the job has long recovered), and is
split into the first second (detection, the standby's takeover, the call re-run) and the rest (the new
standby's start). The plain job also gets, between its kills, the start of two actors beside the
ranks that do nothing but start: a plain Ray actor, and one that imports tensordict (what a standby
started as a plain process imports): on a machine with few cores, the second's cost is most of a
kill's.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import time
from dataclasses import dataclass, field

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from .common import Row, Stat, print_rows
from .goodput import STANDBY_PRELOAD, Mode, _cluster, _Job, _kill_one

GAP_S = 12.0  # between events: a kill's aftermath is over well before the next
AFTER_S = 8.0  # a kill's cost is counted over this long after it
PACE_S = 3.0  # the reference pace: the last seconds before the next event
SAMPLE_S = 0.01


@dataclass
class _Events:
    """A job's step samples and the times of its events (seconds since the job was first sampled)."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    at: dict[str, list[float]] = field(default_factory=dict)

    def steps_at(self, t: float) -> int:
        i = bisect.bisect_right([s for s, _ in self.samples], t) - 1
        return self.samples[max(i, 0)][1]

    def lost_s(self, kind: str, start_s: float, end_s: float) -> list[float]:
        """Per event of ``kind``: steps not done from ``start_s`` to ``end_s`` after it, in seconds of
        the pace just before the next event."""
        out = []
        for t in self.at[kind]:
            pace = (self.steps_at(t + GAP_S - 0.05) - self.steps_at(t + GAP_S - 0.05 - PACE_S)) / PACE_S
            done = self.steps_at(t + end_s) - self.steps_at(t + start_s)
            out.append((pace * (end_s - start_s) - done) / pace)
        return out


class _Starts:
    """Actor starts beside the ranks (created from this process, on the ranks' nodes, using no CPU)."""

    def __init__(self) -> None:
        import ray

        @ray.remote(num_cpus=0)
        class Plain:
            def ready(self) -> int:
                return os.getpid()

        @ray.remote(num_cpus=0)
        class Importing:
            def __init__(self) -> None:
                import tensordict  # noqa: F401  (a plain standby's imports)

            def ready(self) -> int:
                return os.getpid()

        self.classes = {"plain actor": Plain, "tensordict-importing actor": Importing}
        self.started: list = []

    def start(self, kind: str) -> None:
        self.started.append(self.classes[kind].remote())

    def stop(self) -> None:
        import ray

        for actor in self.started:
            ray.kill(actor)
        self.started.clear()


def _wait_zygotes(job: _Job, count: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum('"zygote_ready"' in line for line in job.log.read_text().splitlines()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{job.name}: {count} zygotes not ready after {timeout_s:g}s (see {job.log})")
        time.sleep(0.5)


def _measure(job: _Job, kinds: list[str], rounds: int, starts: _Starts | None) -> _Events:
    events = _Events(at={k: [] for k in kinds})
    t0 = time.monotonic()

    def sample_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            events.samples.append((time.monotonic() - t0, job._step()))
            time.sleep(SAMPLE_S)

    sample_for(PACE_S)
    for _ in range(rounds):
        for kind in kinds:
            if kind == "kill":
                while not _kill_one(job.name, job.rng):
                    time.sleep(0.05)
            else:
                assert starts is not None
                starts.start(kind)
            events.at[kind].append(time.monotonic() - t0)
            sample_for(GAP_S)
        if starts is not None:
            starts.stop()
    return events


def run(kills: int = 8, seed: int = 0, warmup_s: float = 20.0, settle_s: float = 20.0) -> list[Row]:
    measured: dict[str, _Events] = {}
    with _cluster(seed, warmup_s) as (address, workdir):
        for preload in (True, False):
            tag = "forked" if preload else "plain"
            job = _Job(Mode.STANDBY, f"kill_cost-{tag}", address, workdir, seed, settle_s, preload=preload)
            starts = None if preload else _Starts()
            try:
                if preload:
                    _wait_zygotes(job, count=4)  # two groups on two nodes
                kinds = ["kill"] if preload else ["kill", "plain actor", "tensordict-importing actor"]
                measured[tag] = _measure(job, kinds, kills, starts)
            finally:
                if starts is not None:
                    starts.stop()
                job.stop()
            print(f"kill_cost {tag}: {json.dumps({k: [round(x, 2) for x in measured[tag].lost_s(k, 0, AFTER_S)] for k in kinds})}", flush=True)
    return rows(measured)


def rows(measured: dict[str, _Events]) -> list[Row]:
    forked, plain = measured["forked"], measured["plain"]
    preload = ", ".join(STANDBY_PRELOAD)

    def stat(events: _Events, kind: str, start_s: float, end_s: float) -> Stat:
        return Stat.of(events.lost_s(kind, start_s, end_s))

    kills = len(forked.at["kill"])
    out = [
        Row(
            "kill cost: steps lost per kill (s at the job's pace)", f"standby way, standbys forked from a zygote ({preload}); {kills} kills, {AFTER_S:g} s after each",
            stat(forked, "kill", 0, AFTER_S), "standbys started as plain processes", stat(plain, "kill", 0, AFTER_S), "<= 0.5x", unit="s",
        ),
        Row(
            "kill cost: the first second (detection, takeover, the call re-run)", "standbys forked from a zygote",
            stat(forked, "kill", 0, 1.0), "standbys started as plain processes", stat(plain, "kill", 0, 1.0), unit="s",
        ),
        Row(
            "kill cost: the rest (the new standby's start)", f"standbys forked from a zygote, 1–{AFTER_S:g} s after the kill",
            stat(forked, "kill", 1.0, AFTER_S), "standbys started as plain processes", stat(plain, "kill", 1.0, AFTER_S), unit="s",
        ),
        Row(
            "kill cost: an actor's start beside the ranks", f"an actor that imports tensordict (a plain standby's imports), {AFTER_S:g} s after",
            stat(plain, "tensordict-importing actor", 0, AFTER_S), "a plain Ray actor", stat(plain, "plain actor", 0, AFTER_S), unit="s",
        ),
    ]  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=8, help="kills of each job (and starts of each kind of actor)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print_rows(run(args.kills, args.seed))


if __name__ == "__main__":
    main()
