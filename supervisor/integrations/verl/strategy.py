"""Which restart strategy a supervised verl group gets (pure).

Ranks that joined a torch.distributed process group (verl's FSDP and Megatron workers) cannot take
back one lone replacement: the survivors' communicators still hold the dead peer, so the whole group
is rebuilt (one_for_all). Independent replicas are replaced one at a time (one_for_one).

Whether a class forms a process group is observed on the started ranks (is torch.distributed
initialised in the process?), after construction and again after the program's init call, rather
than read from the source: verl's workers join the group through helpers in other modules (and
Megatron through its own parallel-state setup), a class may import torch.distributed without ever
joining a group, and a subclass may change the base's behaviour. The process itself is the one
reliable witness.
"""

from __future__ import annotations

from ...supervision.restart_policy import RestartStrategy

__all__ = ["choose_strategy"]


def choose_strategy(
    host_strategy: RestartStrategy | None, keyword: RestartStrategy | None, collective: bool
) -> RestartStrategy:
    """The strategy of one group.

    Args:
        host_strategy: the host's strategy when its spec set one (``GroupSettings.strategy_set``):
            the operator running the program decides over the program's code.
        keyword: the constructor's ``restart_strategy`` (library use).
        collective: some rank has joined a torch.distributed process group.
    """
    if host_strategy is not None:
        return host_strategy
    if keyword is not None:
        return keyword
    return RestartStrategy.ONE_FOR_ALL if collective else RestartStrategy.ONE_FOR_ONE
