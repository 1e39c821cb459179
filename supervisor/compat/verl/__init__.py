"""verl's import paths on top of ray-supervisor.

Code written for verl's single controller runs by changing the import prefix::

    from verl.single_controller.ray import RayWorkerGroup        # before
    from supervisor.compat.verl.single_controller.ray import RayWorkerGroup   # after
"""

from __future__ import annotations

from typing import Any

__all__ = ["DataProto"]


def __getattr__(name: str) -> Any:
    # Lazy, like supervisor/__init__: importing the compat package must not import torch.
    if name == "DataProto":
        from supervisor.core.protocol import DataProto

        return DataProto
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
