"""``verl.single_controller.base.worker``."""

from supervisor.worker import Worker as Worker
from supervisor.worker import WorkerHelper as WorkerHelper

__all__ = ["Worker", "WorkerHelper"]
