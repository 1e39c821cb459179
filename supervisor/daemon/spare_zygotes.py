"""Zygotes on the nodes a lost node's ranks may be re-placed on, started before they are needed.

When a node is lost, Ray re-places its bundles on whatever node has room, often one the job had no
rank on, and so no zygote: its replacements would each import what the job preloads, side by side on
the same cores, or wait for a zygote started then. The daemon keeps one ready on every live node that
could hold a bundle of the job's pools instead (checked every :data:`SPARE_CHECK_S`, so a node that
joins gets one too), and a node loss's ranks are forked at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import first_line
from ..observability.log import get_logger

__all__ = ["SPARE_CHECK_S", "nodes_that_fit", "warm_spare_nodes"]

log = get_logger("daemon")

SPARE_CHECK_S = 10.0


def nodes_that_fit(nodes: Iterable[Mapping[str, Any]], bundles: Sequence[Mapping[str, float]]) -> list[str]:
    """Live nodes (``ray.nodes()`` entries) whose total resources hold at least one of ``bundles`` (pure)."""
    fit = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        total = node.get("Resources") or {}
        if any(all(total.get(k, 0.0) >= v for k, v in bundle.items() if v > 0) for bundle in bundles):
            fit.append(str(node["NodeID"]))
    return sorted(fit)


def warm_spare_nodes(zygotes: Iterable[Any], bundles: Sequence[Mapping[str, float]]) -> None:
    """Start the job's zygotes (each :class:`~supervisor.core.worker.zygote.NodeZygotes`) on every node that
    could hold a bundle and has none yet; a failure is logged and tried again at the next check."""
    import ray

    zygotes = list(zygotes)
    if not zygotes or not bundles:
        return
    try:
        nodes = nodes_that_fit(ray.nodes(), bundles)
        for keeper in zygotes:
            keeper.warm(nodes)
    except Exception as exc:
        log.debug("spare_zygotes_not_started", error=first_line(exc))
