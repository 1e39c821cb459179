"""Supervision of a worker group: a level-based reconcile loop per group.

One module per concern:

* :mod:`.lifecycle`, :mod:`.init_policy`: ``create_group`` and ``init_group``, and the init rules;
* :mod:`.restart_policy`: strategy, budget, backoff;
* :mod:`.death_verdict`: what a death or a silence means (the classification of errors is
  :mod:`supervisor.failure`'s);
* :mod:`.supervised_call`, :mod:`.in_flight_policy`: blocking calls that survive rank failures (:class:`InFlightPolicy`);
* :mod:`.states`: rank and group states, the one transition check, :class:`RankStatus`;
* :mod:`.config`: :class:`SupervisionConfig`;
* :mod:`.reconcile`: the pure ``decide(state, observations, config, now) -> Plan``, over
  :mod:`.observations` and :mod:`.plan` (the loop's state, the plan, the recovery steps);
* :mod:`.record_sink`: where the loop writes a group's state through (the daemon's record);
* :mod:`.detection`: death watches and heartbeats of running ranks (:mod:`.death_watch`);
* :mod:`.recovery`: replacement and init tasks, on threads the supervisor owns;
* :mod:`.standbys`: pre-started standbys;
* :mod:`.gate`: what blocking calls see of the group, and how they report failures;
* :mod:`.supervisor`: :class:`GroupSupervisor`, which observes, decides and executes.

Owns: keeping a group running: detection, the restart decision, recovery, standbys, and blocking
calls that survive rank failures (it installs :class:`~.supervised_call.SupervisedCallRunner` in
the seam :mod:`supervisor.core.group.call_runner` defines).

May import: ``core``, ``state``, ``placement``, ``observability``, ``failure``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``);
core never imports it.
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
