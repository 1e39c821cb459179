"""Choose the group's rendezvous: rank 0's node address and a port that is free there."""

from __future__ import annotations

from typing import Any

from ..worker.env import Rendezvous

__all__ = ["master_addr_port", "pick_rendezvous"]


def _first_bindable_port(start: int, stop: int) -> int | None:
    import socket

    for port in range(start, stop):
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return port
    return None


def master_addr_port(master_port_range: list[int] | None = None) -> tuple[str, str]:
    """This node's address and a free port on it, as strings; the first free port of
    ``[start, stop)`` when ``master_port_range`` is given.

    Raises:
        RuntimeError: no port of ``master_port_range`` is free.
    """
    from supervisor.core.worker.worker_base import find_free_port, node_ip_address

    if master_port_range is None:
        port = find_free_port()
    else:
        start, stop = master_port_range[0], master_port_range[1]
        found = _first_bindable_port(start, stop)
        if found is None:
            raise RuntimeError(f"master_addr_port: no port of [{start}, {stop}) is free on this node")
        port = found
    return node_ip_address(), str(port)


def pick_rendezvous(
    placement_group: Any, bundle_index: int, avoid_port: int | None = None, timeout_s: float = 120.0, rank_zero: Any = None
) -> Rendezvous:
    """Run a zero-CPU task in rank 0's bundle that reports its node address and a free port.

    The task runs where rank 0 will run, so MASTER_ADDR is that node and the port was free on it.
    ``avoid_port`` (the previous rendezvous) is never reused: stale peers may still connect to it.
    ``rank_zero``: the actor that will be rank 0, already running in that bundle (a standby taking
    over), asks it instead: one call, where a task may wait for Ray to start a worker process.
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from ..worker.worker_base import free_address_here

    if rank_zero is not None:
        addr, port = ray.get(rank_zero._supervisor_free_address.remote(avoid_port), timeout=timeout_s)
        return Rendezvous(master_addr=str(addr), master_port=int(port))
    probe = ray.remote(num_cpus=0)(free_address_here)
    ref = probe.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=placement_group, placement_group_bundle_index=bundle_index
        )
    ).remote(avoid_port)
    addr, port = ray.get(ref, timeout=timeout_s)
    return Rendezvous(master_addr=str(addr), master_port=int(port))
