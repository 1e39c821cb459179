"""The chaos job's driver: the example's (:func:`examples.rlhf.driver.main`) unchanged, and then, when
a stop ended it before its last step, the trained groups' state logged as its end would have.

The example logs each trained rank's step and state digest only when it completes (``rlhf_done``);
most scenarios end the job with ``supervisor stop``, so without this their final state would go
unchecked. The driver has returned, so nothing else calls the groups: the state read here is the one
the job stopped with (the daemon tears the groups down only after this returns).

Event ``chaos_trained_state``: ``state`` as in ``rlhf_done``, and ``rolled_back_to`` when a rollback
happened after the driver's last step (the driver would have resumed from it, not from its
``rlhf_stopped`` ``next_step``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from examples.rlhf.driver import DriverArgs, trained_state
from examples.rlhf.driver import main as example_main
from supervisor.errors import RolledBack

if TYPE_CHECKING:
    from supervisor import DriverContext

__all__ = ["main", "STATE_EVENT"]

STATE_EVENT = "chaos_trained_state"


def main(ctx: DriverContext) -> None:
    example_main(ctx)
    if not ctx.stop_requested.is_set():
        return  # it ran to its end and logged rlhf_done with the state itself
    args = DriverArgs.from_args(ctx.args)
    groups = [ctx.groups[name] for name in (args.critic_group, args.actor_group) if name in ctx.groups]
    if not groups:
        return
    try:
        ctx.log.info(STATE_EVENT, state=trained_state(groups))
    except RolledBack as rolled_back:  # announced to this call: the state is at its step now
        ctx.log.info(
            STATE_EVENT,
            state=trained_state(groups),
            rolled_back_to=rolled_back.step,
            medium=rolled_back.medium,
        )
