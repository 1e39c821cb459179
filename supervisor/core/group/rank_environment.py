"""How a group's ranks get their environment and learn a new rendezvous: a strategy the group holds.

The group (:class:`~.group.WorkerGroup`) and its replacement component
(:class:`~.group_replacement.RankReplacement`) ask the strategy for a rank's environment whenever
an actor starts or a standby takes a rank over, tell it of every rendezvous picked, and give it a
say before a replaced rank's new actor starts. The library's own contract is
:class:`ContractEnvironment`; an integration hands in its own (verl's: exactly verl's variables, and
ranks of a collective rebuild that wait for rank 0's new rendezvous), so no subclass overrides the
group's private methods.
"""

from __future__ import annotations

from typing import Protocol

from ..worker.env import Rendezvous, WorkerIdentity, worker_env_vars

__all__ = ["RankEnvironment", "ContractEnvironment"]


class RankEnvironment(Protocol):
    def env_vars(self, identity: WorkerIdentity, rendezvous: Rendezvous, user_env: dict[str, str]) -> dict[str, str]:
        """The environment rank ``identity.rank`` starts with (or a standby adopts), on ``rendezvous``."""
        ...

    def rendezvous_picked(self, rendezvous: Rendezvous) -> None:
        """A new rendezvous was picked for the group (rank 0 was replaced, or the group re-forms)."""
        ...

    def before_new_actor(self, rank: int) -> None:
        """``rank``'s old actor is gone and its new one is about to start: a strategy may wait here
        (bounded) for what the new actor needs at once, such as a rendezvous being picked."""
        ...


class ContractEnvironment:
    """The library's contract (:func:`~supervisor.core.worker.env.worker_env_vars`); nothing to wait for."""

    def env_vars(self, identity: WorkerIdentity, rendezvous: Rendezvous, user_env: dict[str, str]) -> dict[str, str]:
        return worker_env_vars(identity, rendezvous, user_env)

    def rendezvous_picked(self, rendezvous: Rendezvous) -> None:
        pass

    def before_new_actor(self, rank: int) -> None:
        pass
