"""The state layer: what training changed in a rank, and how it survives the rank.

A rank has three kinds of data: its *spec* (how to build it), its *process* (the actor) and its
*state* (what training changed). The supervision loop restores the first two; this layer restores the
third. A group declares its :class:`StateKind`:

* ``none``: nothing to restore (rollout, reference, reward);
* ``replicated``: every rank holds the same state (DDP replicas): a replacement copies a live peer's;
* ``sharded``: each rank holds its own part (FSDP, ZeRO): snapshots at step boundaries live in
  keeper actors, one copy on the shard's node and one on another, and a failure rolls every
  stateful group of the job back to the newest step all of them can restore.

Owns: the state contract (``state_dict`` / ``load_state_dict`` on the worker), digests, snapshot
keepers, the pure planning of copies and rollback targets, the disk fallback
(``torch.distributed.checkpoint``), and the job-wide :class:`StateDomain`.

May import: ``core`` (the group, the worker endpoints), ``observability``, ``fencing``, ``errors``
(checked against the import graph by ``tests/test_layers.py``). Never ``supervision`` or ``daemon`` (they build on it).
"""

from __future__ import annotations

from ..errors import StateLostError as StateLostError
from .domain import Rollback as Rollback
from .domain import StateDomain as StateDomain
from .kinds import StateConfig as StateConfig
from .kinds import StateKind as StateKind
from .kinds import StateRecovery as StateRecovery

__all__ = ["StateKind", "StateRecovery", "StateConfig", "StateDomain", "Rollback", "StateLostError"]
