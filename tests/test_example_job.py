"""The README's main job: `supervisor start examples/rlhf/rlhf.toml` on its embedded two-node Ray
(run once per session, ``example_run``; test_security.py judges the same run's listeners)."""

from __future__ import annotations

import subprocess


def _processes_of(gcs_address: str) -> list[str]:
    """Live processes of the Ray cluster at ``gcs_address`` (its GCS, raylets and workers name it)."""
    port = gcs_address.rpartition(":")[2]
    out = subprocess.run(["pgrep", "-af", f"{gcs_address}|gcs_server_port={port}"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_the_example_job_runs_to_completion_and_leaves_nothing_running(example_run):
    events = example_run.events
    assert example_run.returncode == 0, example_run.log_tail
    steps = [e for e in events if e["event"] == "rlhf_step"]
    assert [e["step"] for e in steps] == list(range(20))
    assert all(e["rollout_s"] > 0 and e["ref_s"] > 0 and e["ref_log_prob_mean"] <= 0 for e in steps)
    (done,) = [e for e in events if e["event"] == "rlhf_done"]
    assert done["run_steps"] == 20
    ready = {e["group"]: e for e in events if e["event"] == "group_ready"}
    assert {g: e["world_size"] for g, e in ready.items()} == {"rollout": 4, "reference": 2, "actor": 2, "critic": 2}
    # Every rank was forked from its node's zygote (the groups' shared `preload`): two zygotes for ten ranks.
    assert {e["group"]: e["forked"] for e in events if e["event"] == "group_created"} == {
        "rollout_": 4, "reference_": 2, "actor_": 2, "critic_": 2,
    }  # fmt: skip
    assert len([e for e in events if e["event"] == "zygote_ready"]) == 2
    (removed,) = [e for e in events if e["event"] == "owned_resources_removed"]
    assert len([a for a in removed["actors"] if a.startswith("rlhf-demo.zygote-")]) == 2, "teardown removed the zygotes' keepers"
    # The trained groups trained: every step's losses, and every rank ends at step 20; the critic's
    # replicas agree bit for bit, the actor's ZeRO shards differ (each rank holds its own part).
    assert all(sorted(e["losses"]) == ["actor", "critic"] and all(len(v) == 2 for v in e["losses"].values()) for e in steps)
    assert {g: [r["step"] for r in ranks] for g, ranks in done["state"].items()} == {"actor": [20, 20], "critic": [20, 20]}
    critic, actor = ([r["digest"] for r in done["state"][g]] for g in ("critic", "actor"))
    assert critic[0] == critic[1] and actor[0] != actor[1]
    (stopped,) = [e for e in events if e["event"] == "supervisor_stopped"]
    assert stopped["reason"] == "driver returned" and stopped["exit_code"] == 0
    (started,) = [e for e in events if e["event"] == "embedded_ray_started"]
    assert started["address"].startswith("127.0.0.1:")
    assert not _processes_of(started["address"]), "the embedded Ray was not stopped"
