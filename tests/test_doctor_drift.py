"""`supervisor doctor` on a running supervisor whose ranks drift after a node loss and whose KV reads
time out (its own cluster: a node must be removable, and one Ray connection per test process)."""

from __future__ import annotations

import subprocess
import textwrap
import time

import pytest
from daemon_harness import BIN, ENV, TESTS_DIR, wait_for_record
from test_doctor import doctor


def test_doctor_on_a_running_supervisor_with_drift_and_kv_timeouts(tmp_path):
    """Its own three-node cluster (a CPU head, two nodes of 2 GPUs) so a node can be lost."""
    import signal

    import ray

    from supervisor.daemon.kv import KVStore, KVTimeoutError
    from supervisor.daemon.local_cluster import LocalCluster
    from supervisor.daemon.record import RecordStore

    c = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 0, "include_dashboard": False})
    daemon = None
    try:
        nodes = [c.add_node(num_cpus=4, num_gpus=2) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False, namespace="doctor-drift")
        spec = tmp_path / "drift.toml"
        spec.write_text(textwrap.dedent(f"""
            [supervisor]
            name = "drifty"
            heartbeat_interval_s = 0.5
            [ray]
            python_path = ["{TESTS_DIR}"]
            [pools.p]
            process_on_nodes = [2]
            [groups.g]
            pool = "p"
            class = "workers:CounterWorker"
            probe_period_s = 1.0
            [metrics]
            enabled = false
        """))  # fmt: skip
        daemon = subprocess.Popen([str(BIN / "supervisor"), "start", str(spec), "--address", c.address], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env=ENV)  # fmt: skip
        record = wait_for_record("drifty", daemon)
        assert doctor(c.address) == (0, [])  # a healthy running supervisor
        with pytest.raises(KVTimeoutError):
            KVStore.attach("supervisor.drifty").get("master_addr", timeout_s=0.5, namespace="rolout")
        (victim,) = [n for n in nodes if n.node_id == record.groups["g"].ranks[0].node_id]
        c.remove_node(victim)
        deadline = time.monotonic() + 120
        while sum(r.drifted and r.state == "running" for r in RecordStore().get("drifty").groups["g"].ranks) != 2:
            assert time.monotonic() < deadline, "the ranks did not drift"
            time.sleep(0.3)
        code, found = doctor(c.address)
        assert code == 1
        assert [(f["kind"], f["subject"]) for f in found] == [
            ("restarts", "drifty/g"),
            ("placement drift", "drifty/g rank 0"),
            ("placement drift", "drifty/g rank 1"),
            ("kv reads timing out", "drifty kv namespace 'rolout'"),
        ]
        assert found[3]["detail"].startswith("1 read(s) gave up, the last for 'master_addr': nobody has written to namespace 'rolout'")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
        ray.shutdown()
        c.shutdown()
