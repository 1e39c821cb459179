"""``verl.single_controller.base.worker``."""

from supervisor.core.worker import DistGlobalInfo as DistGlobalInfo
from supervisor.core.worker import DistRankInfo as DistRankInfo
from supervisor.core.worker import Worker as Worker
from supervisor.core.worker import WorkerHelper as WorkerHelper

__all__ = ["Worker", "WorkerHelper", "DistRankInfo", "DistGlobalInfo"]
