"""Supervision for unmodified verl programs, on the installed verl's own classes.

* :class:`SupervisedRayWorkerGroup`: a drop-in for ``verl.single_controller.ray.RayWorkerGroup``;
* :class:`SupervisedRayResourcePool`: a drop-in for ``verl.single_controller.ray.RayResourcePool``;
* :mod:`.patch`: ``install()`` makes verl's own modules hand these out;
* :mod:`.host`: what ``supervisor run`` provides to the groups (names, fence, hooks, the record).

Importing this package imports neither verl nor torch (``supervisor run`` reads :mod:`.host` where
verl is not installed); the two classes load verl on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .supervised_group import SupervisedRayWorkerGroup as SupervisedRayWorkerGroup
    from .supervised_pool import SupervisedRayResourcePool as SupervisedRayResourcePool

__all__ = ["SupervisedRayWorkerGroup", "SupervisedRayResourcePool"]


def __getattr__(name: str) -> Any:
    if name == "SupervisedRayWorkerGroup":
        from .supervised_group import SupervisedRayWorkerGroup

        return SupervisedRayWorkerGroup
    if name == "SupervisedRayResourcePool":
        from .supervised_pool import SupervisedRayResourcePool

        return SupervisedRayResourcePool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
