"""``verl.single_controller.base.worker``."""

from supervisor.core.worker.worker_base import DistGlobalInfo as DistGlobalInfo
from supervisor.core.worker.worker_base import DistRankInfo as DistRankInfo
from supervisor.core.worker.worker_base import Worker as Worker
from supervisor.core.worker.worker_base import WorkerHelper as WorkerHelper

__all__ = ["Worker", "WorkerHelper", "DistRankInfo", "DistGlobalInfo"]
