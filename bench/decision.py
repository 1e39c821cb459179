"""Decision cost: one pass of the reconcile loop's pure ``decide`` over a simulated 10,000-worker group
(no Ray).

    .venv/bin/python -m bench.decision [--workers 10000] [--reps 200]

The tick is what the loop decides when failures arrive: 10 ranks fail at once with 1,000 restarts
in the history; ``decide`` folds the failures into the state, checks the sliding-window budget and
the backoffs, and plans where each replacement goes (own bundle, standby or spare, with 100 standbys
and 100 free spare bundles); then the drift of every rank. Its parts are timed on their own too, and
the quiet pass (nothing observed) that the loop makes between failures.
"""

from __future__ import annotations

import argparse

from supervisor.placement.drift import compute_drift, count_drifted
from supervisor.placement.standby import BundleRef, plan_replacements
from supervisor.supervision import SupervisionConfig
from supervisor.supervision.reconcile import PlacementSeen, RankFailed, decide, initial_state
from supervisor.supervision.restart_policy import Failure, FailureReason, RestartPolicy, RestartRecord

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

    config = SupervisionConfig(restart=policy, init_method="init_model")
    state = initial_state(workers, history)
    seen = PlacementSeen(rank_bundles, placed, standbys, tuple(free))
    observations = [*(RankFailed(f) for f in failures), seen]
    quiet = decide(decide(state, observations, config, 1200.0).state, [], config, 1200.0)
    assert quiet.empty

    def decide_only() -> None:
        plan = decide(state, observations, config, 1200.0)
        assert len(plan.replacements) == len(failures)

    def quiet_pass() -> None:
        decide(state, [], config, 1200.0)

    def drift_only() -> None:
        compute_drift(original, current)

    def plan_only() -> None:
        plan_replacements(failed, rank_bundles, placed, standbys, free)

    def drift_count() -> None:
        count_drifted(original, current)

    def tick() -> None:
        decide_only()  # includes the replacement plan
        drift_count()  # what the loop publishes after a recovery (the drift gauge)

    case = f"{workers} workers, 10 failures"
    return [
        Row("decision tick (decide + drift gauge)", case, Stat.of(measure(tick, reps)), "goal: median <= 10 ms", None, unit="ms"),
        Row("  decide (failures, budget, backoff, where)", case, Stat.of(measure(decide_only, reps)), "", None, unit="ms"),
        Row("  quiet pass (nothing observed)", f"{workers} workers", Stat.of(measure(quiet_pass, reps)), "", None, unit="ms"),
        Row("  drifted ranks (the gauge)", case, Stat.of(measure(drift_count, reps)), "", None, unit="ms"),
        Row("  drift of every rank (GroupSupervisor.drift())", case, Stat.of(measure(drift_only, reps)), "", None, unit="ms"),
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
