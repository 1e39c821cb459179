"""Nodes on one machine get agent ports of their own (supervisor.daemon.local_cluster)."""

from __future__ import annotations

import pytest


def test_every_node_has_its_own_agent_ports_outside_the_ephemeral_range(ray_cluster):
    import ray

    from supervisor.daemon.local_cluster import AGENT_PORT_RANGE

    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    ports = [n[key] for n in nodes for key in ("RuntimeEnvAgentPort", "MetricsAgentPort", "MetricsExportPort")]
    assert len(set(ports)) == len(ports), ports  # no two agents of the machine share a port
    assert all(p in AGENT_PORT_RANGE for p in ports), ports
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


def test_a_port_in_use_or_handed_out_before_is_skipped(monkeypatch):
    import socket

    from supervisor.daemon import local_cluster

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        taken = busy.getsockname()[1]
        free = [p for p in local_cluster.AGENT_PORT_RANGE if p not in local_cluster._handed_out][:3]
        order = [taken, free[0], free[0], free[1], free[2]]
        # The candidates in this order: a port something listens on, a free one, the same one again...
        monkeypatch.setattr(local_cluster.random, "sample", lambda population, k: order + [p for p in population if p not in order])
        monkeypatch.setattr(local_cluster, "_ephemeral_ports", lambda: range(0))
        first = local_cluster._free_ports(1)
        second = local_cluster._free_ports(2)
    finally:
        busy.close()
    assert first == [free[0]] and second == [free[1], free[2]]  # not the busy port, not free[0] again


def test_too_few_free_ports_is_a_clear_error(monkeypatch):
    from supervisor.daemon import local_cluster

    monkeypatch.setattr(local_cluster, "_ephemeral_ports", lambda: local_cluster.AGENT_PORT_RANGE)
    with pytest.raises(RuntimeError, match="only 0 of 1 free agent ports"):
        local_cluster._free_ports(1)
