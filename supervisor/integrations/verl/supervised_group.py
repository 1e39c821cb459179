"""``SupervisedRayWorkerGroup``: verl's ``RayWorkerGroup``, with our detection, replacement and record.

A drop-in for the installed verl's ``verl.single_controller.ray.RayWorkerGroup`` (same constructor),
so verl's trainer takes it as ``ray_worker_group_cls`` and the classes it is given (verl's
``RayResourcePool``, ``RayClassWithInitArgs``, ``Worker`` subclasses decorated with verl's
``register``) run unchanged. Underneath is our :class:`~supervisor.core.group.group.WorkerGroup`
(:class:`VerlRanks`), created by :func:`~supervisor.supervision.lifecycle.create_group` and
supervised by a :class:`~supervisor.supervision.supervisor.GroupSupervisor`; this object forwards
everything else to it (bound methods, ``execute_all``, ``world_size``...).

verl's contract on every rank, a replacement included: the same bundle, actor name, RANK,
WORLD_SIZE, WG_PREFIX, WG_BACKEND, RAY_LOCAL_WORLD_SIZE and the group's MASTER_ADDR/MASTER_PORT
(a fresh one when rank 0 is replaced, told to the others). verl 0.9.1 has no register-center actor
any more (``ray_wait_register_center_timeout`` is accepted and unused, as in verl). The init the
program ran (``init_model``, with its arguments) is re-run on replacements, but only once the program
has run it: a rank lost before that gets no premature init. A colocated class (verl's trainer) or a
fused one is one supervised group whose ``spawn`` (and ``fuse``) gives role views (:mod:`.roles`);
every role's init the program ran is replayed on a replacement, in the program's order.
"""

from __future__ import annotations

import dataclasses
import random
import string
import threading
import time
from functools import partial
from typing import Any

from ...core.group.actor_class import ClassWithInitArgs
from ...core.group.binding import BoundGroupMethod, registered_methods
from ...core.group.dispatch import make_nd_compute_dataproto_dispatch_fn, mesh_of
from ...core.group.group import DEFAULT_NAMESPACE, WorkerGroup
from ...core.group.protocol_family import ProtocolFamily, register_protocol_family
from ...core.worker.env import Rendezvous, WorkerIdentity, verl_worker_env_vars
from ...core.worker.worker_base import (
    MESH_INFO_METHOD,
    RUN_IN_ORDER_METHOD,
    SupervisedEndpoints,
    fused_method_name,
)
from ...errors import ConfigError, UnknownMethodError, first_line
from ...observability.hooks import default_hooks
from ...observability.log import get_logger
from ...retrying import Backoff, WaitReport, retry
from ...state.kinds import StateConfig, StateKind
from ...supervision.config import SupervisionConfig
from ...supervision.lifecycle import create_group
from ...supervision.record_sink import NO_RECORD
from ...supervision.restart_policy import RestartStrategy
from ...supervision.states import WorkerState
from ...supervision.supervised_call import InFlightPolicy
from ...supervision.supervisor import GroupSupervisor
from .host import HostedGroup, current_host
from .modes import read_verl_method_spec
from .program_exit import stop_at_exit
from .roles import (
    FUSED_WORKER,
    ROLE_SETUP_METHODS,
    UPDATE_METHODS,
    ArmingInit,
    CountingUpdate,
    SupervisedRoleGroup,
    class_kind,
    colocated_kind,
    role_classes,
    trained_roles,
)
from .strategy import choose_strategy
from .supervised_pool import POOL_NAME_ATTR, library_pool_of

__all__ = ["SupervisedRayWorkerGroup", "VerlRanks", "DEFAULT_INIT_METHOD"]

log = get_logger("verl")

# The method verl's trainer calls once on every role's group after creating it.
DEFAULT_INIT_METHOD = "init_model"

# verl options of the device and of profiling; they change nothing a supervised group does.
_ACCEPTED_VERL_KWARGS = ("device_name", "profile_steps", "worker_nsight_options", "master_port_range")


def _verl_family() -> ProtocolFamily:
    import verl.protocol as vp

    return ProtocolFamily("verl", vp.DataProto, vp.DataProtoFuture, vp.pad_dataproto_to_divisor, vp.unpad_dataproto)


register_protocol_family("verl", _verl_family)


class VerlRankEnvironment:
    """The environment strategy of a :class:`VerlRanks` group (a
    :class:`~supervisor.core.group.rank_environment.RankEnvironment`): exactly verl's variables, and,
    when the group is ``collective`` (its ranks join a process group in their constructor), a
    replaced rank other than 0 waits (bounded by ``rendezvous_wait_s``) for rank 0's replacement,
    running side by side in a one_for_all rebuild, to pick the rebuild's new rendezvous: its
    constructor connects to it at once."""

    def __init__(self, ranks: VerlRanks) -> None:
        self.ranks = ranks
        self.cond = threading.Condition()
        self.generation = 0  # rendezvous picked so far
        self.env_generation: dict[int, int] = {}  # rank -> the rendezvous its actor was created with

    def env_vars(self, identity: WorkerIdentity, rendezvous: Rendezvous, user_env: dict[str, str]) -> dict[str, str]:
        self.env_generation[identity.rank] = self.generation
        return verl_worker_env_vars(identity, rendezvous, user_env)

    def rendezvous_picked(self, rendezvous: Rendezvous) -> None:
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def before_new_actor(self, rank: int) -> None:
        ranks = self.ranks
        if not ranks.collective or rank == 0:
            return
        seen = self.env_generation.get(rank, 0)
        started = reported = time.monotonic()
        with self.cond:
            while self.generation <= seen and 0 in ranks.ranks_being_rebuilt():
                now = time.monotonic()
                if now - started >= ranks.rendezvous_wait_s:
                    log.warning("replacement_rendezvous_not_picked", group=ranks.name, rank=rank, waited_s=round(now - started, 1))
                    return
                if now - reported >= 5.0:
                    reported = now
                    log.info("replacement_waiting_for_rendezvous", group=ranks.name, rank=rank, waited_s=round(now - started, 1))
                self.cond.wait(0.25)


class VerlRanks(WorkerGroup):
    """The WorkerGroup under a :class:`SupervisedRayWorkerGroup`: verl's registrations, verl's
    environment variables (:class:`VerlRankEnvironment`), verl's DataProtoFuture for non-blocking calls.
    """

    read_method_spec = staticmethod(read_verl_method_spec)
    protocol_family = "verl"

    collective = False  # its ranks join a process group in their constructor (see VerlRankEnvironment)
    rendezvous_wait_s = 30.0

    def __init__(self, *args: Any, roles: tuple[str, ...] = (), fused_roles: dict[str, type] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, environment=VerlRankEnvironment(self), **kwargs)
        self._bind_fused_roles(fused_roles or {})
        self._qualify_role_meshes(roles)

    def _bind_fused_roles(self, roles: dict[str, type]) -> None:
        # A fused worker's roles are not methods of its class: each registered method of a role is bound
        # as role_fwmn_method, and call_actor sends it through _fuw_execute.
        for role, role_cls in roles.items():
            for name, spec in registered_methods(role_cls, self.read_method_spec).items():
                fused = fused_method_name(role, name)
                setattr(self, fused, BoundGroupMethod(self, fused, spec))
                self.method_names.append(fused)

    def _qualify_role_meshes(self, roles: tuple[str, ...]) -> None:
        # The roles of a colocated worker register their meshes on their own inner workers, and may use
        # the same name ("train" for every engine worker): a role's mesh methods ask for (role, mesh).
        longest_first = sorted(roles, key=len, reverse=True)
        for name in list(self.method_names):
            role = next((r for r in longest_first if name.startswith(r + "_")), None)
            bound = getattr(self, name, None)
            mesh = mesh_of(bound.spec.dispatch_mode) if role is not None and isinstance(bound, BoundGroupMethod) else None
            if isinstance(mesh, str):
                spec = dataclasses.replace(bound.spec, dispatch_mode=make_nd_compute_dataproto_dispatch_fn((role, mesh)))  # type: ignore[union-attr]
                setattr(self, name, BoundGroupMethod(self, name, spec))

    def read_mesh_info(self, mesh_name: Any, timeout_s: float = 120.0) -> tuple[list[int], list[bool]]:
        # One call for both: verl's Worker registers them together, on the worker or on a role's. A
        # rank being replaced (dead, or not set up again yet) answers once it serves: wait for it.
        import ray

        def recovering(exc: BaseException) -> bool:
            return isinstance(exc, ray.exceptions.RayActorError) or (isinstance(exc, ray.exceptions.RayError) and bool(self.ranks_being_rebuilt()))

        report = WaitReport(log, "mesh_info_waiting_for_ranks", {"group": self.name, "mesh": str(mesh_name)})
        answers = retry(lambda: self.execute_all_sync(MESH_INFO_METHOD, mesh_name), Backoff.fixed(0.5), recovering, timeout_s=timeout_s, report=report)
        return [int(a[0]) for a in answers], [bool(a[1]) for a in answers]

    def ranks_being_rebuilt(self) -> set[int]:
        """The ranks its supervisor is recovering now (none without a supervisor)."""
        supervisor = self.supervisor
        if supervisor is None:
            return set()
        return {r.rank for r in supervisor.ranks() if r.state is not WorkerState.RUNNING}


def _supervised_class(user_cls: type) -> type:
    """``user_cls`` with the supervisor's endpoints (death-watch target, heartbeat, node info, rendezvous) mixed in,
    under the user's class name (verl's actor names use it)."""
    cached = _SUPERVISED.get(user_cls)
    if cached is None:
        # __module__ is ours and the qualname not found in it, so Ray pickles the class by value,
        # the user's class by reference.
        cached = type(
            user_cls.__name__,
            (user_cls, SupervisedEndpoints),
            {"__module__": __name__, "__qualname__": f"supervised.{user_cls.__qualname__}", "__doc__": user_cls.__doc__},
        )
        _SUPERVISED[user_cls] = cached
    return cached


_SUPERVISED: dict[type, type] = {}


class _SupervisedClassWithInitArgs(ClassWithInitArgs):
    """verl's RayClassWithInitArgs as ours: the same class, arguments and actor options, the class
    made with the supervisor's endpoints."""

    @property
    def user_cls(self) -> type:
        return _supervised_class(super().user_cls)

    @property
    def original_cls(self) -> type:
        return super().user_cls

    @classmethod
    def from_verl(cls, verl_cia: Any) -> _SupervisedClassWithInitArgs:
        ours = cls(verl_cia.cls, *verl_cia.args, **verl_cia.kwargs)
        ours.update_options(dict(getattr(verl_cia, "_options", {}) or {}))
        ours.set_additional_resource(dict(getattr(verl_cia, "_additional_resource", {}) or {}))
        ours.fused_worker_used = bool(getattr(verl_cia, "fused_worker_used", False))
        return ours


def _random_prefix() -> str:
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(6))  # verl's default


class SupervisedRayWorkerGroup:
    """verl's ``RayWorkerGroup(resource_pool=None, ray_cls_with_init=None, bin_pack=True,
    name_prefix=None, detached=False, worker_names=None, worker_handles=None,
    ray_wait_register_center_timeout=300, **kwargs)``, supervised.

    verl's kwargs ``master_addr``/``master_port``, ``use_gpu``, ``worker_env`` keep their meaning;
    ``device_name``, ``profile_steps``, ``worker_nsight_options`` and ``master_port_range`` are
    accepted and change nothing. Keywords for library use (a host's settings win over them):

    Args:
        restart_strategy: one_for_one or one_for_all (default: one_for_all when a started rank has
            joined a torch.distributed process group, see :mod:`.strategy`).
        supervision: the supervision settings (default: the host's, else the library's, with
            in-flight calls retried: verl's ``register`` cannot mark methods idempotent).
        init_method: the method re-run on replacements once the program has called it
            (``init_model``; None: never).

    Raises:
        ConfigError: bad input (a split pool, an unknown init method, a dispatch mode verl does not
            know); nothing is created.
        InfeasibleResourcesError / ResourceWaitTimeout / ActorStartError: as ``create_group``;
            nothing this call created survives.
    """

    def __init__(
        self,
        resource_pool: Any = None,
        ray_cls_with_init: Any = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_wait_register_center_timeout: int = 300,
        *,
        restart_strategy: RestartStrategy | str | None = None,
        supervision: SupervisionConfig | None = None,
        init_method: str | None = DEFAULT_INIT_METHOD,
        **kwargs: Any,
    ) -> None:
        self.ray_cls_with_init = ray_cls_with_init
        self.name_prefix = name_prefix if name_prefix is not None else _random_prefix()
        self._ray_wait_register_center_timeout = ray_wait_register_center_timeout
        self.device_name = kwargs.get("device_name", "cuda")
        self.profile_steps = kwargs.get("profile_steps")
        self.worker_nsight_options = kwargs.get("worker_nsight_options")
        self.sub_cls_name = ""
        self.wg_dict = None
        self.fused_worker_used = bool(getattr(ray_cls_with_init, "fused_worker_used", False))
        self.supervisor: GroupSupervisor | None = None
        self._host = None
        self._hosted = False
        self._init_method: str | None = None
        # A WorkerDict (every role's methods, prefixed) or a fused worker (every role behind _fuw_execute):
        # its role groups come from spawn().
        self._roles_kind = colocated_kind(ray_cls_with_init)
        self._colocated = self._roles_kind is not None
        # Its roles, when verl's class shows them (else any method's prefix may be a role).
        known = role_classes(self._roles_kind, getattr(ray_cls_with_init, "cls", None)) if self._colocated else None
        self._roles: tuple[str, ...] | None = tuple(known) if known is not None else (None if self._colocated else ())
        self._role_classes = known
        self._init_calls: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {}  # in the program's order
        self._init_lock = threading.Lock()
        self._init_timeout_s = 0.0  # one init's timeout (a colocated group's replay scales it)
        self._strategy_fixed = False
        master_addr, master_port = kwargs.pop("master_addr", None), kwargs.pop("master_port", None)
        use_gpu = kwargs.pop("use_gpu", resource_pool.use_gpu if resource_pool is not None else True)
        worker_env = kwargs.pop("worker_env", None) or None
        for key in _ACCEPTED_VERL_KWARGS:
            kwargs.pop(key, None)
        if kwargs:  # verl ignores what it does not know; so do we, but say so
            log.warning("verl_kwargs_ignored", group=self.name_prefix, kwargs=sorted(kwargs))
        if resource_pool is None:
            self._group = self._attach(worker_names, worker_handles, ray_cls_with_init)
            return
        if ray_cls_with_init is None:
            raise ConfigError("ray_cls_with_init is required to create workers in a resource pool")
        if use_gpu and not resource_pool.use_gpu:
            raise ConfigError("use_gpu is True but resource_pool.use_gpu is False")
        cls_with_init = _SupervisedClassWithInitArgs.from_verl(ray_cls_with_init)
        # Bad modes fail here, before anything exists.
        methods = list(registered_methods(cls_with_init.user_cls, read_verl_method_spec))
        self._fused_roles = role_classes(FUSED_WORKER, cls_with_init.user_cls) if self._roles_kind == FUSED_WORKER else None
        for role, role_cls in (self._fused_roles or {}).items():
            methods += [fused_method_name(role, m) for m in registered_methods(role_cls, read_verl_method_spec)]
        armable = init_method is not None and self._has_init(methods, init_method)
        if init_method is not None and not armable and init_method != DEFAULT_INIT_METHOD:
            raise ConfigError(
                f"init_method {init_method!r} is not a registered method of {cls_with_init.original_cls.__name__} "
                f"(registered: {', '.join(sorted(m for m in methods if not m.startswith('_')))})"
            )
        self._group = self._create(
            resource_pool, cls_with_init, bin_pack, detached, worker_env, master_addr, master_port,
            _parse_strategy(restart_strategy), supervision, init_method if armable else None,
        )  # fmt: skip

    # -- construction ---------------------------------------------------------------------------
    def _attach(self, worker_names: list[str] | None, worker_handles: list[Any] | None, ray_cls_with_init: Any) -> WorkerGroup:
        # Attached actors were created elsewhere, so nothing here can replace them: not supervised.
        cls = _SupervisedClassWithInitArgs.from_verl(ray_cls_with_init) if ray_cls_with_init is not None else None
        host = current_host()
        namespace = _namespace(host)
        log.info("verl_group_attached", group=self.name_prefix, supervised=False)
        return VerlRanks(
            cls_with_init=cls, name_prefix=self.name_prefix, worker_names=worker_names, worker_handles=worker_handles, namespace=namespace
        )

    def _create(
        self,
        verl_pool: Any,
        cls_with_init: _SupervisedClassWithInitArgs,
        bin_pack: bool,
        detached: bool,
        worker_env: dict[str, str] | None,
        master_addr: str | None,
        master_port: int | str | None,
        keyword_strategy: RestartStrategy | None,
        supervision: SupervisionConfig | None,
        init_method: str | None,
    ) -> WorkerGroup:
        import ray

        host = current_host()
        self._host = host
        settings = host.settings(self.name_prefix, pool=str(getattr(verl_pool, "name_prefix", "") or "")) if host is not None else None
        config = settings.config if settings is not None else (supervision or SupervisionConfig())
        hooks = host.hooks if host is not None else default_hooks()
        pool = library_pool_of(verl_pool, "STRICT_PACK" if bin_pack else "PACK", host)
        owned_pgs = pool.pgs is None
        group = create_group(
            pool,
            cls_with_init,
            name_prefix=self.name_prefix,
            detached=detached or host is not None,  # a host's daemon owns them past this process
            worker_env=worker_env,
            namespace=_namespace(host),
            hooks=hooks,
            group_factory=partial(
                VerlRanks, master_addr=master_addr, master_port=master_port, roles=self._roles or (), fused_roles=self._fused_roles
            ),
            actor_start_timeout_s=config.actor_start_timeout_s,
        )
        try:
            self._init_method = config.init_method or init_method
            if config.init_method is not None and not self._has_init(group.method_names, config.init_method):
                raise ConfigError(
                    f"init_method {config.init_method!r} (the spec's, for group {self.name_prefix}) is not a registered "
                    f"method of {cls_with_init.original_cls.__name__}"
                )
            host_strategy = config.restart.strategy if settings is not None and settings.strategy_set else None
            self._strategy_fixed = host_strategy is not None or keyword_strategy is not None
            collective = _collective(group)
            strategy = choose_strategy(host_strategy, keyword_strategy, collective)
            group.collective = collective  # type: ignore[attr-defined]
            config = dataclasses.replace(
                config,
                restart=dataclasses.replace(config.restart, strategy=strategy),
                init_method=None,  # armed once the program ran it (see _init_ran)
                rejoin_new_rank_zero=collective,  # independent replicas: a new rank 0 leaves the others alone
                in_flight=config.in_flight or InFlightPolicy.RETRY,
                standbys=0,  # verl's Worker reads RANK in its constructor: no rank-less standbys
            )
            trained = trained_roles(self._roles_kind, self._role_classes, cls_with_init.user_cls, dict(cls_with_init.kwargs))
            if trained and not config.state.stateful:
                # Never a silent re-initialisation: a lost rank of these roles fails the group, saying so.
                config = dataclasses.replace(config, state=StateConfig(kind=StateKind.SHARDED, lost_hint=verl_lost_hint(trained)))
            self._init_timeout_s = config.init_policy.timeout_s
            record = host.record if host is not None else NO_RECORD
            self.supervisor = GroupSupervisor(group, config, hooks, record=record).start()
            if trained and self.supervisor.state_domain is not None and config.state.lost_hint:
                self.supervisor.state_domain.count_updates("update")
            stop_at_exit(self.supervisor)
            if self._init_method is not None and not self._colocated:  # a role's is armed by its role group
                setattr(group, self._init_method, ArmingInit(self, getattr(group, self._init_method), self._init_method))
            log.info(
                "verl_group_supervised", group=group.name, strategy=strategy.value, collective=collective,
                hosted=host is not None, pool=pool.name_prefix, world_size=group.world_size,
            )  # fmt: skip
            if host is not None:
                host.register(
                    HostedGroup(
                        name=self.name_prefix,
                        pool=str(getattr(verl_pool, POOL_NAME_ATTR, pool.name_prefix)),
                        worker_class=_worker_class_label(cls_with_init.original_cls),
                        group=group,
                        supervisor=self.supervisor,
                    )
                )
                self._hosted = True
        except BaseException:
            if self.supervisor is not None:
                self.supervisor.stop()
            group.kill()
            if owned_pgs and ray.is_initialized():
                pool.teardown()
            raise
        return group

    def _init_ran(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        supervisor = self.supervisor
        if supervisor is None:
            return
        group = self._group
        with self._init_lock:  # role inits may run from several threads; each change sees the last
            entry = (method, tuple(args), dict(kwargs))
            changes: dict[str, Any] = {}
            if self._colocated and _same_call(self._init_calls.get(method), entry):
                pass  # the same setup again (a reset between phases): nothing new to replay
            elif self._colocated:  # every role's setup call, replayed in one call in the program's order
                self._init_calls[method] = entry
                calls = tuple(self._init_calls.values())
                policy = supervisor.config.init_policy
                changes = dict(
                    init_method=RUN_IN_ORDER_METHOD, init_args=(calls,), init_kwargs={},
                    # One call loads every role's model: each gets the timeout one init would.
                    init_policy=dataclasses.replace(policy, timeout_s=self._init_timeout_s * len(calls)),
                )  # fmt: skip
            elif supervisor.config.init_method is None:
                changes = dict(init_method=method, init_args=entry[1], init_kwargs=entry[2])
            if changes:  # before the probe below: a replacement started meanwhile replays this call too
                supervisor.config = dataclasses.replace(supervisor.config, **changes)
            # A process group formed by this call (verl's workers join theirs in init_model): its ranks
            # meet at rank 0, so a new rank 0 needs them all, and unless a strategy was given, a lost
            # rank needs them all rebuilt. Once formed, there is nothing more to look for.
            if not getattr(group, "collective", False) and _collective(group):
                group.collective = True  # type: ignore[attr-defined]
                # New recovery tasks and every later plan read the supervisor's config.
                config = dataclasses.replace(supervisor.config, rejoin_new_rank_zero=True)
                changes["rejoin_new_rank_zero"] = True
                if not self._strategy_fixed and config.restart.strategy is RestartStrategy.ONE_FOR_ONE:
                    config = dataclasses.replace(config, restart=dataclasses.replace(config.restart, strategy=RestartStrategy.ONE_FOR_ALL))
                    log.info("verl_group_strategy", group=group.name, strategy="one_for_all", why="process group formed by init")
                supervisor.config = config
        if changes:
            supervisor.record_changed()

    # -- verl's surface -------------------------------------------------------------------------
    @property
    def group(self) -> WorkerGroup:
        """Our WorkerGroup underneath."""
        return self._group

    @property
    def restart_strategy(self) -> RestartStrategy | None:
        return self.supervisor.config.restart.strategy if self.supervisor is not None else None

    @property
    def resource_pool(self) -> Any:
        return self._group.resource_pool

    @property
    def init_method(self) -> str | None:
        """The method re-run on replacements once the program ran it (a colocated group's: each role's)."""
        return self._init_method

    @property
    def role_setup_methods(self) -> tuple[str, ...]:
        """The methods of a role whose calls a replacement replays: the init and verl's setup calls."""
        return (self._init_method, *ROLE_SETUP_METHODS) if self._init_method is not None else ()

    def role_method(self, role: str, name: str) -> str:
        """The name on the group of ``role``'s method ``name``: ``role_name`` on a WorkerDict,
        ``role_fwmn_name`` (called through ``_fuw_execute``) on a fused worker."""
        return fused_method_name(role, name) if self._roles_kind == FUSED_WORKER else f"{role}_{name}"

    def _has_init(self, methods: list[str], name: str) -> bool:
        """Whether the class has init method ``name``: registered, or a role's (roles unknown: a
        WorkerDict whose roles verl does not show, so any prefix)."""
        if name in methods:
            return True
        if self._roles is None:
            return any(m.endswith("_" + name) for m in methods)
        return any(self.role_method(role, name) in methods for role in self._roles)

    def spawn(self, prefix_set: Any) -> dict[str, Any]:
        """verl's: one group per role. A colocated or fused group's roles are views of this supervised
        group (:class:`~.roles.SupervisedRoleGroup`); any other group's are verl's attached copies."""
        if not self._colocated or self.supervisor is None:
            return self._group.spawn(prefix_set)  # type: ignore[no-any-return]
        roles = list(prefix_set)
        unknown = [r for r in roles if self._roles is not None and r not in self._roles]
        if unknown:
            raise ConfigError(f"group {self.name_prefix} has no role {unknown[0]!r} (roles: {', '.join(sorted(self._roles or ()))})")
        return {role: SupervisedRoleGroup(self, role) for role in roles}

    def fuse(self, prefix_set: Any) -> None:
        """verl's: the role groups as attributes (``group.actor_rollout.init_model()``)."""
        if self.wg_dict is None:
            self.wg_dict = self.spawn(prefix_set)
        for role, role_group in self.wg_dict.items():
            setattr(self, role, role_group)

    def counting(self, name: str, bound: Any) -> Any:
        """``bound``, counted as an update of the group's state when ``name`` is one of verl's update
        methods and no snapshot keeps that state (see :func:`.roles.trained_roles`)."""
        domain = self.supervisor.state_domain if self.supervisor is not None else None
        if name in UPDATE_METHODS and domain is not None and domain.updates_done is not None:
            return CountingUpdate(bound, domain)
        return bound

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this object lacks: the group's bound methods and verl's API on it.
        if name.startswith("__") or name == "_group" or "_group" not in self.__dict__:
            raise AttributeError(name)
        try:
            return self.counting(name, getattr(self._group, name))
        except AttributeError:
            cls = self._group.cls_with_init
            owner = cls.original_cls.__name__ if isinstance(cls, _SupervisedClassWithInitArgs) else "the worker class"
            raise UnknownMethodError(
                f"{owner} has no registered method {name!r} (group {self.name_prefix}); registered: "
                f"{', '.join(m for m in sorted(self._group.method_names) if not m.startswith('_'))}"
            ) from None

    def teardown(self) -> None:
        """Stop supervising, kill the actors, leave the host's record. Idempotent. The pool stays
        (other groups may share it): its owner removes it (``SupervisedRayResourcePool.teardown``)."""
        supervisor, self.supervisor = self.supervisor, None
        if supervisor is not None:
            supervisor.stop()
        self._group.kill()
        if supervisor is not None:
            supervisor.hooks.on_group_removed(self._group.name)
        if self._hosted and self._host is not None:
            self._hosted = False
            self._host.unregister(self.name_prefix)

    @classmethod
    def from_detached(
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_cls_with_init: Any = None,
        **kwargs: Any,
    ) -> SupervisedRayWorkerGroup:
        """verl's: attach to existing actors (not supervised: they were created elsewhere)."""
        return cls(
            resource_pool=None,
            ray_cls_with_init=ray_cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            **kwargs,
        )

    def __repr__(self) -> str:
        return f"<SupervisedRayWorkerGroup {self.name_prefix} world_size={self._group.world_size} strategy={self.restart_strategy}>"


def verl_lost_hint(roles: list[str]) -> str:
    """What would have saved the state of verl's trained ``roles`` (FSDP or Megatron shards that no
    snapshot of the supervisor keeps: verl's workers have no state_dict/load_state_dict)."""
    return (
        f"verl's {', '.join(roles)} ranks hold sharded weights and optimizer state the supervisor cannot restore: "
        "resume from verl's checkpoint (trainer.save_freq=N, trainer.resume_mode=auto), or give the worker class "
        "state_dict()/load_state_dict() and run it under `supervisor start` with state = \"sharded\" and snapshot_every"
    )


def _namespace(host: Any) -> str:
    if host is None:
        return DEFAULT_NAMESPACE
    from ...daemon.ownership import namespace_of

    return namespace_of(host.name)


def _collective(group: WorkerGroup, timeout_s: float = 60.0) -> bool:
    """Whether any started rank has joined a torch.distributed process group.

    Only the ranks that answer count: a rank that died right after its constructor or the program's
    init (an OOM kill at the end of a model load) is the supervisor's to replace, and must not turn
    the program's successful call into an error here."""
    import ray

    refs = [w._supervisor_collective.remote() for w in group.workers]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    answers = []
    for ref in ready:
        try:
            answers.append(bool(ray.get(ref)))
        except Exception as exc:  # that rank is dead or broken: the supervisor sees it too
            log.warning("verl_strategy_probe_unanswered", group=group.name, error=first_line(exc))
    if len(ready) < len(refs):
        log.warning("verl_strategy_probe_unanswered", group=group.name, missing=len(refs) - len(ready), waited_s=timeout_s)
    return any(answers)


def _same_call(recorded: Any, entry: Any) -> bool:
    try:
        return bool(recorded == entry)
    except Exception:  # arguments without a plain equality (tensors, arrays): take it as new
        return False


def _worker_class_label(cls: type) -> str:
    """``module:Qualname`` of the worker class; for a colocated class, its roles' classes too."""
    label = f"{cls.__module__}:{cls.__qualname__}"
    kind = class_kind(cls)
    roles = role_classes(kind, cls) if kind is not None else None
    if roles:
        label = f"{cls.__module__}:{kind}[" + ", ".join(f"{r}={c.__module__}:{c.__qualname__}" for r, c in roles.items()) + "]"
    return label


def _parse_strategy(value: RestartStrategy | str | None) -> RestartStrategy | None:
    if value is None or isinstance(value, RestartStrategy):
        return value
    try:
        return RestartStrategy(str(value))
    except ValueError:
        raise ConfigError(f"restart_strategy {value!r} is not one of {[s.value for s in RestartStrategy]}") from None
