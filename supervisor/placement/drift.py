"""Placement drift: a rank running on another node than its bundle had when the pool was created (pure).

When a node dies, Ray re-places the lost bundles on other nodes; a replacement that goes back into "its"
bundle then runs elsewhere. Nothing fails, but collectives that were intra-node become cross-node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RankPlacement", "compute_drift", "is_drifted", "count_drifted"]


def is_drifted(original_node: str | None, current_node: str | None) -> bool:
    """The drift rule: both nodes known, and different (an unknown node is not drift)."""
    return original_node is not None and current_node is not None and original_node != current_node


@dataclass(frozen=True)
class RankPlacement:
    """Where a rank's bundle was at pool creation and where the rank runs now."""

    rank: int
    original_node: str | None
    current_node: str | None

    @property
    def drifted(self) -> bool:
        return is_drifted(self.original_node, self.current_node)


def compute_drift(original: Mapping[int, str | None], current: Mapping[int, str | None]) -> list[RankPlacement]:
    """Per-rank placement for every rank in ``original`` (unknown current nodes count as not drifted)."""
    return [RankPlacement(rank, original.get(rank), current.get(rank)) for rank in sorted(original)]


def count_drifted(original: Mapping[int, str | None], current: Mapping[int, str | None]) -> int:
    """How many ranks of ``original`` drifted (the drift gauge), without building a placement per rank."""
    return sum(1 for rank, node in original.items() if is_drifted(node, current.get(rank)))
