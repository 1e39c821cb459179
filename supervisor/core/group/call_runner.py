"""The seam through which a supervisor takes over a group's blocking calls.

Core owns the contract, supervision fills it: a :class:`~supervisor.core.group.group.WorkerGroup` holds a
``call_runner`` (``None`` by default), and a bound method's blocking call goes through it when it is
set. Supervision installs one while it supervises the group (``GroupSupervisor.start``, removed by
``stop``), so core never imports supervision. An unsupervised group runs its calls directly: one Ray
call per rank, then ``ray.get``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..worker.registration import MethodSpec

__all__ = ["CallRunner", "PerRank"]

# rank -> (args, kwargs) of that rank's shard of one call.
PerRank = dict[int, tuple[tuple[Any, ...], dict[str, Any]]]


class CallRunner(Protocol):
    """Runs the blocking calls of a supervised group."""

    def run_call(self, group: Any, spec: MethodSpec, method_name: str, per_rank: PerRank) -> list[Any]:
        """Run ``method_name`` (registered as ``spec``) on the ranks of ``per_rank``, wait, and return
        their results in rank order.

        Raises:
            WorkerFailedError: a rank failed and the call's in-flight policy is to raise.
            GroupFailedError: the group failed instead of replacing a failed rank.
            Exception: whatever the method itself raised, unchanged.
        """
        ...
