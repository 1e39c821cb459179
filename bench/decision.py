"""Decision cost: one supervision tick's pure decisions over a simulated 10,000-worker group (no Ray).

    .venv/bin/python -m bench.decision [--workers 10000] [--reps 200]

A tick here is what the supervisor decides when failures arrive: the restart decision (strategy,
sliding-window budget, backoff) over 10 failed ranks with 1,000 restarts in the history, the drift of
every rank, and where each replacement goes (own bundle, standby or spare) with 100 standbys and 100
free spare bundles.
"""

from __future__ import annotations

import argparse

from supervisor.drift import compute_drift
from supervisor.restart_policy import Failure, FailureReason, RestartPolicy, RestartRecord, decide
from supervisor.standby import BundleRef, plan_replacements

from .common import Row, Stat, measure


def run(workers: int = 10_000, reps: int = 200) -> list[Row]:
    per_node = 8
    nodes = {r: f"node-{r // per_node}" for r in range(workers)}
    original = dict(nodes)
    current = {r: (f"node-{r // per_node + 1}" if r % 97 == 0 else n) for r, n in nodes.items()}  # ~1% drifted
    failed = [r * (workers // 10) + 3 for r in range(10)]
    failures = [Failure(r, FailureReason.DIED, "ActorDiedError", nodes[r]) for r in failed]
    history = [RestartRecord(i % workers, FailureReason.DIED, 1000.0 + i * 0.1) for i in range(1000)]
    policy = RestartPolicy(max_restarts=100_000, restart_window_s=600)
    rank_bundles = {r: BundleRef(r // per_node, r % per_node) for r in range(workers)}
    spare_pg = workers // per_node
    placed = {b: nodes[r] for r, b in rank_bundles.items() if r not in failed[:5]}  # half the failures lost their node
    standbys = {BundleRef(spare_pg, i): f"node-{i}" for i in range(100)}
    free = [BundleRef(spare_pg, 100 + i) for i in range(100)]
    placed.update({b: f"node-{b.bundle_index}" for b in [*standbys, *free]})

    def decide_only() -> None:
        decide(failures, history, workers, policy, 1200.0)

    def drift_only() -> None:
        compute_drift(original, current)

    def plan_only() -> None:
        plan_replacements(failed, rank_bundles, placed, standbys, free)

    def tick() -> None:
        decide_only()
        drift_only()
        plan_only()

    case = f"{workers} workers, 10 failures"
    return [
        Row("decision tick (restart decision + drift + placement plan)", case, Stat.of(measure(tick, reps)), "", None, unit="ms"),
        Row("  restart decision", case, Stat.of(measure(decide_only, reps)), "", None, unit="ms"),
        Row("  drift of every rank", case, Stat.of(measure(drift_only, reps)), "", None, unit="ms"),
        Row("  replacement plan", case, Stat.of(measure(plan_only, reps)), "", None, unit="ms"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    for row in run(args.workers, args.reps):
        print(f"{row.benchmark}: {row.ours.show()}")


if __name__ == "__main__":
    main()
