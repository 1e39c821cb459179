"""Where an earlier supervisor left a group's actors, as a state record keeps it for re-adoption."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...placement.layout import BundleRef

__all__ = ["GroupPlacement"]


@dataclass(frozen=True)
class GroupPlacement:
    """Where an earlier supervisor left a group's actors: what a state record keeps to re-adopt them
    once standbys have taken ranks over (Ray cannot rename an actor, so names no longer follow the layout).

    Attributes:
        actor_names: each rank's actor name, in rank order.
        bundles: each rank's bundle, in rank order.
        standbys: standby actor name by bundle.
    """

    actor_names: list[str]
    bundles: list[BundleRef]
    standbys: dict[BundleRef, str] = field(default_factory=dict)
