"""``verl.single_controller.base.worker``."""

from supervisor.core.worker import Worker as Worker
from supervisor.core.worker import WorkerHelper as WorkerHelper

__all__ = ["Worker", "WorkerHelper"]
