"""Resource budgets (pure): bundle and cluster misfits with their arithmetic, CPU oversubscription."""

from __future__ import annotations

from supervisor.placement.budget import WorkerBudget, bundle_misfits, cluster_misfits, cpu_oversubscription


def test_bundle_misfits_per_pool_and_resource():
    bundles = {"gpus": {"CPU": 2, "GPU": 1}, "cpu": {"CPU": 4}}
    workers = [
        WorkerBudget("rollout", "gpus", 1, 0.5),
        WorkerBudget("critic", "gpus", 1, 0.5),
        WorkerBudget("ref", "gpus", 0.5, 0.5),
        WorkerBudget("reward", "cpu", 4, 0),
    ]
    assert bundle_misfits(bundles, workers) == [
        ("gpus", "rollout 0.5 + critic 0.5 + ref 0.5 GPU = 1.5 > 1 GPU per bundle"),
        ("gpus", "rollout 1 + critic 1 + ref 0.5 CPU = 2.5 > 2 CPU per bundle"),
    ]
    assert bundle_misfits(bundles, workers[:2] + workers[3:]) == []


def test_cluster_misfits_sum_every_pool():
    totals = {"rollout": {"CPU": 8, "GPU": 8}, "ref": {"CPU": 4, "GPU": 4}}
    assert cluster_misfits(totals, {"CPU": 32, "GPU": 8}) == ["pools rollout 8 + ref 4 GPU = 12 > 8 GPU in the cluster"]
    assert cluster_misfits(totals, {"CPU": 32, "GPU": 12}) == []
    assert cluster_misfits({"p": {"TPU": 1}}, {"CPU": 1}) == ["pools p 1 TPU = 1 > 0 TPU in the cluster"]


def test_cpu_oversubscription_counts_data_processes_per_node():
    w = WorkerBudget("rollout", "p", 1, 1, data_processes=3)
    loads = cpu_oversubscription([("a" * 56, w), ("a" * 56, w), ("b" * 56, w)], {"a" * 56: 8, "b" * 56: 8})
    assert loads == []  # exactly full is not oversubscribed
    loads = cpu_oversubscription([("a" * 56, w)] * 3, {"a" * 56: 8})
    assert [load.describe() for load in loads] == [f"node {'a' * 12}: workers need 12 CPUs (3 reserved + 9 data processes) of 8"]
