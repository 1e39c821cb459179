"""Supervision of a worker group: a level-based reconcile loop per group.

Layers, each in its own module (the failure classifier they share is :mod:`supervisor.supervision.failures`):

* :mod:`.states`: rank and group states, and the one transition check;
* :mod:`.config`: :class:`SupervisionConfig` and :class:`InFlightPolicy`;
* :mod:`.reconcile`: the pure ``decide(state, observations, config, now) -> Plan``;
* :mod:`.detection`: sentinels and probes of running ranks;
* :mod:`.recovery`: replacement and init tasks, on threads the supervisor owns;
* :mod:`.standbys`: pre-started standbys;
* :mod:`.supervisor`: :class:`GroupSupervisor`, which observes, decides and executes, and gates calls.
"""

from ..errors import GroupFailedError
from .config import InFlightPolicy, SupervisionConfig
from .states import GroupState, RankStatus, WorkerState
from .supervisor import GroupSupervisor

__all__ = [
    "GroupState",
    "WorkerState",
    "InFlightPolicy",
    "SupervisionConfig",
    "RankStatus",
    "GroupSupervisor",
    "GroupFailedError",
]
