"""What the layers above core use of a worker group: the one public interface between them.

Supervision (detection, the recovery tasks, the supervised calls), the state domain, the daemon and
the integrations reach a group only through :class:`SupervisedGroup`; none of them touches a
private attribute of a core object (``tests/test_layers.py`` checks it by reading the code).
:class:`~.group.WorkerGroup` is the implementation; its replacement operations are carried out by
the :class:`~.group_replacement.RankReplacement` it holds, with the
:class:`~.rank_environment.RankEnvironment` strategy it was given (verl's integration supplies its
own), never by a subclass overriding private methods.

Three seams run the other way: supervision installs itself into a group it supervises by setting
``supervisor``, ``call_runner`` (blocking calls then survive rank failures) and ``state_domain``,
and is told of every new rendezvous through ``on_rendezvous_picked`` before any actor has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...fencing import Fence
    from ...placement.layout import BundleRef, BundleSlot
    from ...placement.pool import ResourcePool
    from ..worker.env import Rendezvous
    from ..worker.zygote import NodeZygotes
    from .actor_class import ClassWithInitArgs
    from .call_runner import CallRunner
    from .group_replacement import Predecessor, Standby

__all__ = ["SupervisedGroup"]


class SupervisedGroup(Protocol):
    """A group of one actor per rank, as the layers above core see it.

    Identity and placement: ``name`` (metrics, logs), ``name_prefix`` and ``namespace`` (actor
    names), ``world_size``, ``workers`` (each rank's actor handle), ``worker_names``, ``slots`` (each
    rank's place in the layout), ``rank_bundles`` (where each rank runs now), ``rank_nodes`` (the
    node of each rank's current actor, once known), ``placement_groups``, ``resource_pool``,
    ``cls_with_init``, ``fence`` (through which actors are killed), ``current_rendezvous``.
    """

    name: str
    name_prefix: str
    namespace: str
    rank_nodes: dict[int, str]
    resource_pool: ResourcePool | None
    cls_with_init: ClassWithInitArgs | None
    predecessors: dict[int, Predecessor]
    # The seams supervision fills while it supervises the group (None: unsupervised).
    supervisor: Any
    call_runner: CallRunner | None
    state_domain: Any
    on_rendezvous_picked: Callable[[Rendezvous], None] | None

    @property
    def world_size(self) -> int: ...
    @property
    def workers(self) -> list[Any]: ...
    @property
    def worker_names(self) -> list[str]: ...
    @property
    def slots(self) -> list[BundleSlot]: ...
    @property
    def rank_bundles(self) -> list[BundleRef]: ...
    @property
    def standbys(self) -> dict[BundleRef, Standby]: ...
    @property
    def placement_groups(self) -> list[Any]: ...
    @property
    def current_rendezvous(self) -> Rendezvous | None: ...
    @property
    def fence(self) -> Fence: ...
    @property
    def zygotes(self) -> NodeZygotes | None: ...

    def call_actor(self, worker: Any, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call a method on one of the group's actors; its ObjectRef."""
        ...

    def replace_worker(self, rank: int, name_release_timeout_s: float = 30.0, bundle: BundleRef | None = None, fork: bool = True) -> Any:
        """Kill ``rank``'s actor and start a fresh one (same name, rank, environment) in its bundle or
        ``bundle``; a new rank 0 brings a new rendezvous. The new handle."""
        ...

    def take_over(self, rank: int, bundle: BundleRef, timeout_s: float = 60.0, keep_old: bool = False) -> Any:
        """The standby in ``bundle`` becomes ``rank`` (``keep_old``: a hand-over; the old actor is kept
        as a predecessor until :meth:`end_predecessor`). Its handle."""
        ...

    def restore_predecessor(self, rank: int) -> None:
        """A hand-over whose successor failed: the old actor is ``rank`` again."""
        ...

    def end_predecessor(self, rank: int) -> None:
        """End the old actor of a handed-over rank."""
        ...

    def pick_new_rendezvous(self, rank_zero: Any = None, timeout_s: float = 120.0) -> Rendezvous:
        """A new rendezvous on rank 0's node, never the port in use (``rank_zero``: its running actor)."""
        ...

    def propagate_rendezvous(self, survivors: list[int], timeout_s: float = 60.0) -> list[int]:
        """Give the live ``survivors`` the current rendezvous; returns those that could not take it
        (dead or stuck), which the caller replaces: this replaces nothing."""
        ...

    def start_standbys(
        self, bundles: list[BundleRef], nice: int = 0, sched_idle: bool = False, preload: tuple[str, ...] = (),
        nodes: Mapping[BundleRef, str] | None = None,
    ) -> list[Standby]:  # fmt: skip
        """Start a rank-less standby in each of ``bundles``."""
        ...

    def drop_standby(self, bundle: BundleRef) -> None:
        """Forget and kill the standby in ``bundle``."""
        ...

    def all_bundles(self) -> list[BundleRef]:
        """Every bundle the group may use (its ranks', then the pool's spares)."""
        ...

    def placed_bundles(self) -> dict[BundleRef, str]:
        """The node of every bundle placed now on an alive node."""
        ...

    def kill(self) -> None:
        """End every actor of the group (idempotent)."""
        ...
