"""Choose the group's rendezvous: rank 0's node address and a port that is free there."""

from __future__ import annotations

from typing import Any

from .env import Rendezvous

__all__ = ["pick_rendezvous"]


def _probe_master_addr_port() -> tuple[str, int]:
    from supervisor.worker import find_free_port, node_ip_address

    return node_ip_address(), find_free_port()


def pick_rendezvous(placement_group: Any, bundle_index: int, timeout_s: float = 120.0) -> Rendezvous:
    """Run a zero-CPU task in rank 0's bundle that reports its node address and a free port.

    The task runs where rank 0 will run, so MASTER_ADDR is that node and the port was free on it.
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(num_cpus=0)(_probe_master_addr_port)
    ref = probe.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=placement_group, placement_group_bundle_index=bundle_index
        )
    ).remote()
    addr, port = ray.get(ref, timeout=timeout_s)
    return Rendezvous(master_addr=str(addr), master_port=int(port))
