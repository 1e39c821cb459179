"""verl's own classes, whatever :mod:`.patch` did to its modules' names (one place for where they are kept)."""

from __future__ import annotations

import importlib

__all__ = ["VERL_RAY_BASE", "ORIGINAL_PREFIX", "verl_original"]

VERL_RAY_BASE = "verl.single_controller.ray.base"
# verl's original classes stay reachable on verl's module under these names once patched.
ORIGINAL_PREFIX = "_supervisor_original_"


def verl_original(name: str) -> type:
    """verl's own class ``name`` (``RayWorkerGroup``, ``RayResourcePool``), patched or not (imports verl)."""
    base = importlib.import_module(VERL_RAY_BASE)
    return getattr(base, ORIGINAL_PREFIX + name, None) or getattr(base, name)  # type: ignore[no-any-return]
