"""``verl.single_controller.base``."""

from .worker import Worker as Worker
from .worker_group import ClassWithInitArgs as ClassWithInitArgs
from .worker_group import ResourcePool as ResourcePool
from .worker_group import WorkerGroup as WorkerGroup

__all__ = ["Worker", "WorkerGroup", "ClassWithInitArgs", "ResourcePool"]
