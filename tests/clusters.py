"""A local Ray cluster on 127.0.0.1 that this test process is connected to, for a module's fixture."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def connected_cluster(head: dict[str, Any], nodes: Sequence[dict[str, Any]] = ()) -> Iterator[tuple[Any, list[Any]]]:
    """A cluster whose head has ``head`` (``include_dashboard`` off unless given) and one more node per
    entry of ``nodes`` (``add_node`` arguments), this process connected; yields it and the added nodes.
    Disconnects and shuts it down on the way out, whatever happened."""
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    cluster = LocalCluster(initialize_head=True, head_node_args={"include_dashboard": False, **head})
    try:
        added = [cluster.add_node(**node) for node in nodes]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster, added
    finally:
        ray.shutdown()
        cluster.shutdown()
