"""A worker using a dispatch mode registered at import time with verl's own ``register_dispatch_mode``
(imported by the driver and by every worker process alike, as a user's module would be)."""

from __future__ import annotations

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register, register_dispatch_mode

MODE_NAME = "SUPERVISOR_TEST_RANK_PAIRS"


def dispatch_rank_pairs(worker_group, value):
    """Every rank gets ``(its rank, value)``."""
    return ([(rank, value) for rank in range(worker_group.world_size)],), {}


def collect_sum(worker_group, outputs):
    return sum(outputs)


if MODE_NAME not in Dispatch:
    register_dispatch_mode(MODE_NAME, dispatch_rank_pairs, collect_sum)


class PairWorker(Worker):
    @register(dispatch_mode=Dispatch[MODE_NAME])
    def weigh(self, pair):
        """rank * value, summed over the ranks by the mode's collect function."""
        rank, value = pair
        assert rank == self.rank
        return rank * value
