"""Where supervised verl groups live: the process-wide host that names their pools and records them.

A :class:`~supervisor.integrations.verl.SupervisedRayWorkerGroup` is created by verl's own trainer,
deep inside a program that knows nothing of the supervisor. What it needs from outside (the
supervisor's name and owner fence, the hooks that feed the state record, each group's supervision
settings) comes from the one :class:`GroupHost` of the process. ``supervisor run`` installs a factory
for it in the child before the program starts (:func:`set_host_factory`); the host is made on first use,
after the program's own ``ray.init``. Without a host (verl's classes used as a plain library), groups
are still supervised, with the library's defaults, and appear in no record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...core.group.group import WorkerGroup
    from ...fencing import Fence
    from ...observability.hooks import LifecycleHooks
    from ...supervision.config import SupervisionConfig
    from ...supervision.record_sink import RecordSink
    from ...supervision.supervisor import GroupSupervisor

__all__ = ["GroupSettings", "HostedGroup", "GroupHost", "set_host_factory", "current_host", "made_host"]


@dataclass(frozen=True)
class GroupSettings:
    """How the host wants one group supervised.

    Attributes:
        config: the supervision settings (restart policy, probes, in-flight outcomes...).
        strategy_set: the restart strategy was chosen explicitly (a spec); False lets the group pick
            one_for_all for ranks that form a torch.distributed group, one_for_one otherwise.
    """

    config: SupervisionConfig
    strategy_set: bool = False


@dataclass(frozen=True)
class HostedGroup:
    """A supervised group the host shows in its record."""

    name: str  # the group's name (verl's name_prefix)
    pool: str  # its pool's name under the supervisor
    worker_class: str  # "module:Qualname" of the user's worker class
    group: WorkerGroup
    supervisor: GroupSupervisor


class GroupHost(Protocol):
    """The supervisor a process's verl groups belong to."""

    name: str  # the supervisor's name: pools are named ``pool_prefix_of(name, pool)``, actors live in ``namespace_of(name)``
    fence: Fence  # every destructive action of the groups goes through it
    hooks: LifecycleHooks  # feeds the failure log, the events and the metrics
    record: RecordSink  # every supervisor of the host writes its groups' state through it

    def pool_name(self, requested: str) -> str:
        """A pool name under this supervisor for a pool verl calls ``requested`` (unique in the host)."""
        ...

    def settings(self, group: str, pool: str = "") -> GroupSettings:
        """How to supervise the group named ``group`` (verl's name_prefix), made in verl's pool ``pool``
        (its name_prefix: settings may name the pool, since verl's trainer names its groups at random)."""
        ...

    def register(self, hosted: HostedGroup) -> None:
        """Show ``hosted`` in the record from now on (and persist it now)."""
        ...

    def unregister(self, name: str) -> None:
        """The group was torn down by its program."""
        ...

    def close(self) -> None:
        """The program is exiting: stop the host's own threads (what it owns stays for its owner)."""
        ...


_lock = threading.Lock()
_factory: Callable[[], GroupHost] | None = None
_host: GroupHost | None = None


def set_host_factory(factory: Callable[[], GroupHost] | None) -> None:
    """Install what makes the process's host on first use (None: no host; forgets a host made already)."""
    global _factory, _host
    with _lock:
        _factory, _host = factory, None


def current_host() -> GroupHost | None:
    """The process's host, made on the first call after :func:`set_host_factory` (None: no host).

    Raises whatever the factory raises (a dead cluster, a supervisor of that name owned elsewhere):
    a group must not start unsupervised when the user asked for supervision."""
    global _host
    with _lock:
        if _host is None and _factory is not None:
            _host = _factory()
        return _host


def made_host() -> GroupHost | None:
    """The process's host if one was made already; never makes one (for the program's exit)."""
    with _lock:
        return _host
