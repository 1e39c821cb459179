"""Nodes on one machine get agent ports of their own (supervisor.daemon.local_cluster)."""

from __future__ import annotations


def test_every_node_has_its_own_agent_ports_outside_the_ephemeral_range(ray_cluster):
    import ray

    from supervisor.daemon.local_cluster import AGENT_PORT_RANGE

    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    ports = [n[key] for n in nodes for key in ("RuntimeEnvAgentPort", "MetricsAgentPort", "MetricsExportPort")]
    assert len(set(ports)) == len(ports), ports  # no two agents of the machine share a port
    assert all(p in AGENT_PORT_RANGE for p in ports), ports
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


def test_a_port_is_never_handed_out_twice():
    from supervisor.daemon import local_cluster

    picked = local_cluster._free_ports(3)
    assert len(set(picked)) == 3 and all(p in local_cluster.AGENT_PORT_RANGE for p in picked)
    assert not set(picked) & set(local_cluster._free_ports(3))  # never handed out twice
