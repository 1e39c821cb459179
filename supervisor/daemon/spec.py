"""The supervisor spec: one TOML (or YAML) file describing one supervisor, loaded once into typed objects.

``load_spec(path)`` parses and validates the whole file and raises :class:`SpecError` listing *every*
problem, one line each, naming the field (``groups.rollout.pool: pool 'refs' is not defined (pools:
rollout)``). Nothing here touches Ray, so a bad spec never creates anything in a cluster.

Layout (every field, its default and its description: docs/reference/spec.md, generated from this module)::

    [supervisor]            name, heartbeat_interval_s, orphan_grace_s, detached_grace_s, on_sigterm
    [ray]                   address, auth_token_path | local_nodes, num_cpus, num_gpus, resources; python_path
    [pools.NAME]            process_on_nodes, use_gpu, max_colocate_count, strategy, resource_timeout_s, ...
    [groups.NAME]           pool, class, args, kwargs, env, init_*, restart_*, probe_*, in_flight, shutdown_*
    [metrics]               host, port, linger_s, tls_cert, tls_key
    [driver]                function, args
    [run.groups.NAME]       (``supervisor run`` only) init_*, restart_*, probe_*, call_timeout_s, in_flight

A spec for ``supervisor run`` (``load_spec(path, run=True)``) has no pools, groups, driver or metrics: the
program places and builds its own groups. Its ``[run.groups.NAME]`` tables hold the supervision
settings of the group verl calls NAME (its ``name_prefix``), or of the groups made in the resource pool
verl calls NAME (verl's trainer names its groups at random, its pools not: ``global_pool``); a group's
own table wins over its pool's. ``supervisor.name`` is optional there.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..core.worker.actor_heartbeat import HEARTBEAT_PERIOD_S
from ..core.worker.cpu_priority import NICE_MAX
from ..core.worker.zygote import check_preload_names
from ..errors import ConfigError, first_line
from ..placement.budget import WorkerBudget, bundle_misfits
from ..placement.layout import (
    actor_name,
    bundle_resources,
    check_capacity_factor,
    check_process_on_nodes,
    spare_bundle_count,
    validate_name_prefix,
)
from ..placement.pool import PlacementStrategy, ResourcePool
from ..placement.resource_wait import RESOURCE_TIMEOUT_S
from ..placement.standby import StandbyReach
from ..state.kinds import StateConfig, StateKind, StateRecovery
from ..supervision import InFlightPolicy, SupervisionConfig
from ..supervision.drain import DrainPolicy
from ..supervision.init_policy import InitPolicy
from ..supervision.lifecycle import ACTOR_START_TIMEOUT_S
from ..supervision.restart_policy import RestartPolicy, RestartStrategy
from .auth import token_file_problem
from .ownership import namespace_of, pool_prefix_of
from .record import DEFAULT_DETACHED_GRACE_S
from .spec_format import SpecFormat, format_of, parse_document

__all__ = [
    "SpecError",
    "SigtermAction",
    "SupervisorSpec",
    "SupervisorSection",
    "RaySpec",
    "PoolSpec",
    "GroupSpec",
    "MetricsSpec",
    "DriverSpec",
    "RunSection",
    "RUN_GROUP_KEYS",
    "supervisor_name_problem",
    "load_spec",
    "parse_spec",
    "import_object",
]


class SpecError(ConfigError):
    """The spec is invalid. ``problems`` holds one line per problem, each naming its field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__("\n".join(f"{source}: {p}" for p in problems))
        self.source = source
        self.problems = list(problems)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.problems))


# -- the typed spec ----------------------------------------------------------------------------
# Each table is a pydantic dataclass: its fields' types, defaults and descriptions (the docstring below
# each field) are what the loader checks and what the JSON Schema (spec_schema.py) and the docs show.
# A value must have its field's type as written: TOML and YAML say what they mean, so "1" is not 1 and
# 1.0 is not 1. ``None`` for a float means "no limit" (``inf`` in TOML, ``.inf`` or null in YAML).


def _caseless(kind: type[enum.Enum]) -> BeforeValidator:
    """An enum field given by its value or its name, in any case (``spread``, ``SPREAD``)."""

    def member(value: Any) -> Any:
        if isinstance(value, str):
            return next((m for m in kind if value.lower() in (m.value.lower(), m.name.lower())), value)
        return value

    return BeforeValidator(member)


def _not_nan(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("nan is not a number of anything")
    return value


Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
_NOT_NAN = BeforeValidator(_not_nan)  # after the bounds in the list, but run before them: nan is no number
Number = Annotated[float, Strict(), _NOT_NAN]  # an integer is a number too (made a float)
Positive = Annotated[float, Strict(), Field(gt=0), _NOT_NAN]
NonNegative = Annotated[float, Strict(), Field(ge=0), _NOT_NAN]
Count = Annotated[Int, Field(ge=0)]
_UNLIMITED = BeforeValidator(lambda v: None if v == math.inf else v)  # inf: no limit (None)
Limit = Annotated[Positive | None, _UNLIMITED]
_TABLE = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_by_name=True, validate_by_alias=True)


def _config(*required: str) -> ConfigDict:
    """A table's model settings; ``required``: the keys the schema marks required (the loader says why each is)."""
    return ConfigDict(**_TABLE, json_schema_extra={"required": list(required)} if required else None)


class SigtermAction(enum.Enum):
    """What SIGTERM means to the daemon: tear the job down, or exit and leave it to the next start
    (for platforms that restart the daemon on their own schedule: Kubernetes rollouts, node drains)."""

    TEARDOWN = "teardown"
    DETACH = "detach"


@pydantic_dataclass(frozen=True, config=_config())
class SupervisorSection:
    """``[supervisor]``: identity and liveness of the daemon."""

    name: Str = ""
    """1-64 letters, digits, `_`, `-` (required); names the pools (`name.pool`), the actor namespace (`supervisor.name`) and the record"""
    heartbeat_interval_s: Positive = 1.0
    """How often the daemon refreshes its state record"""
    orphan_grace_s: Positive = 30.0
    """Silent for longer than this (on the owner fence's clock; more than 2 heartbeats): the daemon is gone,
    a new start takes the job over and `gc` may collect it"""
    detached_grace_s: Positive = DEFAULT_DETACHED_GRACE_S
    """A detached job waits this long for the next start before `gc` may collect it."""
    on_sigterm: Annotated[SigtermAction, _caseless(SigtermAction)] = SigtermAction.TEARDOWN
    """`detach`: SIGTERM makes the daemon exit 0 and leave the job to the next start (Kubernetes rollouts, node drains);
    `supervisor stop` still tears down"""
    gcs_outage_grace_s: Positive = 45.0
    """The cluster's GCS unreachable (restarting under GCS fault tolerance) for longer than this: the daemon exits,
    leaving the job in place. Below Ray's own RAY_gcs_rpc_server_reconnect_timeout_s (60 s by default), after which
    Ray ends every process that cannot reach the GCS, this one too."""


@pydantic_dataclass(frozen=True, config=_config())
class RaySpec:
    """``[ray]``: the cluster, or the embedded local Ray started when ``address`` is absent."""

    address: Str | None = None
    """The cluster's address; unset: an embedded local Ray on 127.0.0.1 with token authentication
    (`--address` and `$RAY_ADDRESS` override)"""
    local_nodes: Annotated[Int, Field(ge=1)] = 1
    """Embedded Ray: raylets on this machine (multi-node placement, node loss and drift without a cluster)"""
    num_cpus: Annotated[Int, Field(gt=0)] = 4
    """Per local node"""
    num_gpus: Count = 0
    """Per local node (declared; scheduled like real ones)"""
    resources: dict[str, Number] = field(default_factory=dict)
    """Extra custom resources per local node"""
    python_path: list[Str] = field(default_factory=list)
    """Dirs (relative to the spec) workers import from"""
    auth_token_path: Str | None = None
    """The token of an existing cluster with token authentication (relative to the spec). Ray's own
    RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH win when set; an embedded Ray always makes its own token."""


@pydantic_dataclass(frozen=True, config=_config("process_on_nodes"))
class PoolSpec:
    """``[pools.NAME]``: one detached resource pool."""

    process_on_nodes: list[Int] = field(default_factory=list)
    """Ranks per placement group (node), e.g. `[4, 4]` (required)"""
    use_gpu: Bool = True
    """One GPU per bundle"""
    max_colocate_count: Int = 1
    """Groups that may share a bundle (each worker asks 1/max_colocate_count GPU)"""
    strategy: Annotated[PlacementStrategy, _caseless(PlacementStrategy)] = PlacementStrategy.STRICT_PACK
    """The placement groups' strategy"""
    resource_timeout_s: Limit = RESOURCE_TIMEOUT_S
    """Create_group's lenient wait for the placement groups (`inf`: no limit)"""
    progress_interval_s: Positive = 10.0
    """Cadence of the "waiting for resources" diagnosis"""
    autoscaling: Bool = False
    """The cluster may grow: never judge a demand infeasible"""
    capacity_factor: Number = 1.0
    """>1: spare bundles beyond the ranks' (reserved, idle until a failure)"""

    @property
    def spare_bundles(self) -> int:
        return max(0, spare_bundle_count(sum(self.process_on_nodes), self.capacity_factor))


@pydantic_dataclass(frozen=True, config=_config("pool", "class"))
class GroupSpec:
    """``[groups.NAME]``: one detached worker group in a pool, and how it is supervised.

    The supervision defaults are the library's own (one place each: InitPolicy, RestartPolicy,
    SupervisionConfig).
    """

    pool: Str = ""
    """The pool the group's ranks go to (required)"""
    worker_class: Str = Field("", alias="class")  # `class` is a Python keyword
    '''"module:Class"'''
    args: list[Any] = field(default_factory=list)
    """Positional arguments of the worker class's constructor"""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the worker class's constructor"""
    env: dict[str, Str] = field(default_factory=dict)
    """Extra environment variables of the workers (the contract variables cannot be overridden)"""
    preload: list[Str] = field(default_factory=list)
    """Modules a zygote per node imports once, shared by the job's groups of the same preload; every fresh rank is forked from it"""
    cpus_per_worker: NonNegative = 1.0
    """Reserved in the bundle (Ray's num_cpus)"""
    gpus_per_worker: Annotated[NonNegative | None, _UNLIMITED] = None
    """Reserved in the bundle; None: 1/max_colocate_count of the pool"""
    data_processes_per_worker: Count = 0
    """Processes each worker starts itself (data loaders), ~1 CPU each"""
    actor_start_timeout_s: Positive = ACTOR_START_TIMEOUT_S
    """How long an actor may take to start once its bundle is ready"""
    init_method: Str | None = None
    """Run on every rank after start, and on every replacement"""
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the init method"""
    init_timeout_s: Positive = InitPolicy.timeout_s
    """Init_group's per-worker timeout"""
    init_attempts: Annotated[Int, Field(ge=1)] = InitPolicy.attempts
    """Init_group's attempts per worker"""
    restart_strategy: Annotated[RestartStrategy, _caseless(RestartStrategy)] = RestartPolicy.strategy
    """`one_for_one`: replace the failed rank; `one_for_all`: replace every rank"""
    max_restarts: Count = RestartPolicy.max_restarts
    """Restart budget: past this many restarts within restart_window_s the group is FAILED and the daemon exits 1"""
    restart_window_s: Positive = RestartPolicy.restart_window_s
    """The sliding window of the restart budget"""
    backoff_initial_s: NonNegative = RestartPolicy.backoff_initial_s
    """Backoff before the second consecutive restart of one rank (doubling)"""
    backoff_max_s: NonNegative = RestartPolicy.backoff_max_s
    """Bound on the backoff between consecutive restarts of one rank"""
    probe_period_s: Positive = SupervisionConfig.probe_period_s
    """How often the ranks' heartbeats are read"""
    probe_timeout_s: Positive = SupervisionConfig.probe_timeout_s
    """No new beat for this long (at least 2 s) is a hang"""
    call_timeout_s: Limit = SupervisionConfig.call_timeout_s
    """A rank silent this long inside a blocking call is hung (`inf`: no limit)"""
    in_flight: Annotated[InFlightPolicy | None, _caseless(InFlightPolicy)] = None
    """None: retry idempotent methods, raise otherwise"""
    shutdown_method: Str | None = None
    """Called on every rank at teardown, bounded by shutdown_timeout_s"""
    shutdown_timeout_s: Positive = 10.0
    """Bound on the shutdown method"""
    standbys: Count = SupervisionConfig.standbys
    """Pre-started actors in the pool's spare bundles, taking over failed ranks"""
    standby_warmup_method: Str | None = None
    """Run by each standby before it is ready: the rank-independent part of the init"""
    standby_reach: Annotated[StandbyReach, _caseless(StandbyReach)] = SupervisionConfig.standby_reach
    """Which standbys may take over a rank whose bundle is placed: on its node only, or on any node (the rank may move)"""
    standby_nice: Int = SupervisionConfig.standby_nice
    """CPU priority lowered by this (nice) while a standby starts and warms up; 0: not lowered"""
    standby_sched_idle: Bool = SupervisionConfig.standby_sched_idle
    """A standby also runs under SCHED_IDLE while it starts and warms up: only on CPU time no rank wants"""
    standby_preload: list[Str] = field(default_factory=list)
    """Modules a zygote per node imports once; standbys are forked from it"""
    state: Annotated[StateKind, _caseless(StateKind)] = StateConfig.kind
    """What the ranks hold that training changed: none, replicated (every rank the same: DDP), sharded (each rank its part: FSDP, ZeRO)"""
    snapshot_every: Count = StateConfig.snapshot_every
    """In-memory snapshot at every this many step boundaries of the driver (ctx.step_boundary); 0: none"""
    snapshot_memory_mb: Positive = StateConfig.snapshot_memory_mb
    """Bound on what the group's kept snapshots take in the keepers (both copies, all kept steps)"""
    disk_dir: Str | None = StateConfig.disk_dir
    """Directory of the disk fallback (torch.distributed.checkpoint; relative to the spec; shared storage on a real cluster)"""
    disk_snapshot_every: Count = StateConfig.disk_snapshot_every
    """Disk snapshot at every this many step boundaries; 0: none"""
    recovery: Annotated[StateRecovery, _caseless(StateRecovery)] = StateConfig.recovery
    """A state lost at an unknown step: rollback (every stateful group back to a common snapshot, the driver told) or replay (this group alone: its own snapshot, its logged calls run again, the call retried; the driver sees nothing)"""
    mutating_methods: list[Str] = field(default_factory=list)
    """Methods that change the state (besides those registered with mutates_state=True): what a replay runs again"""
    replay_log_mb: Positive = StateConfig.replay_log_mb
    """Bound on the arguments a replaying group's log holds; past it the next step boundary takes a snapshot"""
    drain_hand_over: Bool = DrainPolicy.hand_over
    """A rank on a node being drained (a preemption notice) is handed over to a successor elsewhere at the next call boundary"""
    drain_min_notice_s: NonNegative = DrainPolicy.min_notice_s
    """Less time than this before a drain's deadline: no hand-over (said so; recovered when the node goes)"""

    def state_config(self, base_dir: Path) -> StateConfig:
        disk = str((base_dir / self.disk_dir).resolve()) if self.disk_dir else None
        return StateConfig(
            self.state, self.snapshot_every, self.snapshot_memory_mb, disk, self.disk_snapshot_every,
            recovery=self.recovery, mutating_methods=tuple(self.mutating_methods), replay_log_mb=self.replay_log_mb,
        )  # fmt: skip

    def worker_budget(self, name: str, pool: PoolSpec) -> WorkerBudget:
        """What one worker of this group takes from its bundle (GPUs: an even share by default)."""
        gpus = self.gpus_per_worker if self.gpus_per_worker is not None else (1 / pool.max_colocate_count if pool.use_gpu else 0.0)
        return WorkerBudget(name, self.pool, self.cpus_per_worker, gpus, self.data_processes_per_worker)

    def init_policy(self) -> InitPolicy:
        return InitPolicy(timeout_s=self.init_timeout_s, attempts=self.init_attempts)

    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(
            strategy=self.restart_strategy,
            max_restarts=self.max_restarts,
            restart_window_s=self.restart_window_s,
            backoff_initial_s=self.backoff_initial_s,
            backoff_max_s=self.backoff_max_s,
        )

    def supervision_config(self, base_dir: Path = Path(".")) -> SupervisionConfig:
        return SupervisionConfig(
            state=self.state_config(base_dir),
            restart=self.restart_policy(),
            init_method=self.init_method,
            init_kwargs=dict(self.init_kwargs),
            init_policy=self.init_policy(),
            probe_period_s=self.probe_period_s,
            probe_timeout_s=self.probe_timeout_s,
            call_timeout_s=self.call_timeout_s,
            in_flight=self.in_flight,
            standbys=self.standbys,
            standby_warmup_method=self.standby_warmup_method,
            standby_reach=self.standby_reach,
            standby_nice=self.standby_nice,
            standby_sched_idle=self.standby_sched_idle,
            standby_preload=tuple(self.standby_preload),
            actor_start_timeout_s=self.actor_start_timeout_s,
            drain=DrainPolicy(self.drain_hand_over, self.drain_min_notice_s),
        )


@pydantic_dataclass(frozen=True, config=_config())
class MetricsSpec:
    """``[metrics]``: where the Prometheus exporter listens (port 0: any free port; see the log)."""

    enabled: Bool = True
    """Serve the Prometheus exporter"""
    host: Str = "127.0.0.1"
    """Where it listens; off loopback without TLS logs `metrics_exposed_without_tls` at start"""
    port: Annotated[Int, Field(ge=0, le=65535)] = 9400
    """0: a free port, logged as `metrics_serving` and shown by `status`; two daemons on one host need different ports"""
    linger_s: NonNegative = 30.0
    """After a failed exit, keep /metrics up this long so the failure is scraped (a second signal cuts it short)"""
    tls_cert: Str | None = None
    """PEM certificate (relative to the spec): serve HTTPS, for scrapers on other hosts"""
    tls_key: Str | None = None
    """Its PEM private key (tls_cert and tls_key: both or neither)"""


@pydantic_dataclass(frozen=True, config=_config("function"))
class DriverSpec:
    """``[driver]``: a ``module:function`` the daemon runs once the groups are ready."""

    function: Str = ""
    """`module:function` run once the groups are ready (required)"""
    args: dict[str, Any] = field(default_factory=dict)
    """Passed to the driver as `ctx.args`"""


@dataclass(frozen=True)
class RunSection:
    """``[run]``: what ``supervisor run`` applies to the groups the program creates.

    Attributes:
        groups: each ``[run.groups.NAME]`` table as a :class:`GroupSpec` (only its supervision
            settings are set; pool and class are the program's).
        strategy_set: the groups whose table sets ``restart_strategy`` (the others let the group
            choose: one_for_all for ranks that form a torch.distributed group).
    """

    groups: dict[str, GroupSpec] = field(default_factory=dict)
    strategy_set: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SupervisorSpec:
    supervisor: SupervisorSection
    ray: RaySpec
    pools: dict[str, PoolSpec]
    groups: dict[str, GroupSpec]
    metrics: MetricsSpec
    driver: DriverSpec | None
    base_dir: Path = Path(".")  # the spec file's directory (python_path is relative to it)
    run: RunSection | None = None  # a spec for `supervisor run` (then pools, groups and driver are empty)

    @property
    def name(self) -> str:
        return self.supervisor.name

    @property
    def namespace(self) -> str:
        """The Ray namespace of this supervisor's actors (its own, so two supervisors never collide)."""
        return namespace_of(self.name)

    def pool_prefix(self, pool: str) -> str:
        """Name prefix of a pool's placement groups (deterministic, so a restarted daemon finds them)."""
        return pool_prefix_of(self.name, pool)

    def group_prefix(self, group: str) -> str:
        """Name prefix of a group's actors."""
        return f"{group}_"

    def python_path(self) -> list[str]:
        """Absolute directories workers and the driver import user code from (cwd first, as ``python -m``)."""
        dirs = [os.getcwd(), *(str((self.base_dir / p).resolve()) for p in self.ray.python_path)]
        return list(dict.fromkeys(dirs))

    def path(self, relative: str | None) -> Path | None:
        """A path the spec gives, relative to the spec file's directory."""
        return (self.base_dir / relative).resolve() if relative is not None else None

    def worker_budgets(self) -> list[WorkerBudget]:
        return [g.worker_budget(name, self.pools[g.pool]) for name, g in self.groups.items() if g.pool in self.pools]

    def resource_pool(self, pool: str) -> ResourcePool:
        """The (not yet created) detached :class:`ResourcePool` of spec pool ``pool``, named so that a
        restarted daemon finds its placement groups."""
        p = self.pools[pool]
        return ResourcePool(
            p.process_on_nodes,
            use_gpu=p.use_gpu,
            max_colocate_count=p.max_colocate_count,
            name_prefix=self.pool_prefix(pool),
            detached=True,
            strategy=p.strategy,
            capacity_factor=p.capacity_factor,
        )

    def actor_names(self, group: str, class_name: str) -> list[str]:
        """The actor names of a group's ranks, in rank order (what a restarted daemon adopts)."""
        return [actor_name(self.group_prefix(group), class_name, slot) for slot in self.resource_pool(self.groups[group].pool).rank_slots()]

    def bundles(self) -> dict[str, dict[str, float]]:
        """Resources of one bundle of each pool."""
        return {name: bundle_resources(p.max_colocate_count, p.use_gpu) for name, p in self.pools.items()}

    def groups_in_start_order(self) -> list[str]:
        """Groups in the order they are declared (started in this order, stopped in reverse)."""
        return list(self.groups)


# -- loading and validation --------------------------------------------------------------------

_SUPERVISOR_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SECTIONS = {"supervisor", "ray", "pools", "groups", "metrics", "driver"}
_RUN_SECTIONS = {"supervisor", "ray", "run"}
RUN_GROUP_KEYS = frozenset(
    {
        # No init_kwargs: a replacement's init is re-run with the arguments the program called it with.
        "actor_start_timeout_s", "init_method", "init_timeout_s", "init_attempts", "restart_strategy", "max_restarts",
        "restart_window_s", "backoff_initial_s", "backoff_max_s", "probe_period_s", "probe_timeout_s", "call_timeout_s", "in_flight",
    }
)  # fmt: skip
"""The keys of a ``[run.groups.NAME]`` table: how a group is supervised, not what it is or where it runs."""


def load_spec(path: str | os.PathLike[str], check_imports: bool = True, check_budget: bool = True, run: bool = False) -> SupervisorSpec:
    """Read and validate a spec file.

    Args:
        path: the TOML file, or a YAML one (``.yaml``, ``.yml``) with the same tables as mappings.
        check_imports: also import every worker class and the driver function (with the spec's
            python_path on ``sys.path``), so a typo fails here rather than in the cluster.
        check_budget: also require the groups colocated in a pool to fit one bundle (``supervisor
            doctor`` turns that off to report misfits as findings).
        run: a spec for ``supervisor run`` (see the module docstring).

    Raises:
        SpecError: one line per problem; nothing has been created anywhere.
    """
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError(source, [f"cannot read the spec: {exc.strerror or exc}"]) from None
    return parse_spec(
        text, source=source, base_dir=Path(path).resolve().parent, check_imports=check_imports, check_budget=check_budget, run=run,
        fmt=format_of(path),
    )  # fmt: skip


def parse_spec(
    text: str, source: str = "<spec>", base_dir: Path | None = None, check_imports: bool = True, check_budget: bool = True, run: bool = False,
    fmt: SpecFormat = SpecFormat.TOML,
) -> SupervisorSpec:  # fmt: skip
    """Parse and validate spec text, TOML or YAML (see :func:`load_spec`)."""
    raw, unreadable = parse_document(text, fmt)
    if raw is None:
        raise SpecError(source, unreadable)
    problems: list[str] = []
    if run:
        for key in sorted(_SECTIONS - _RUN_SECTIONS):
            if key == "metrics" and key in raw:
                problems.append("metrics: not served by `supervisor run` yet (the groups' metrics live in the program's process)")
            elif key in raw:
                problems.append(f"{key}: only for `supervisor start`; a run's program makes its own pools and groups (settings: [run.groups.NAME])")
        _unknown_keys({k: v for k, v in raw.items() if k not in _SECTIONS}, _RUN_SECTIONS, "", problems)
        raw = {k: v for k, v in raw.items() if k in _RUN_SECTIONS}
    else:
        _unknown_keys(raw, _SECTIONS, "", problems)
    # From here on only tables are looked into: a section of the wrong type was reported above.
    tables = {key: _table(raw, key, problems) for key in ("supervisor", "ray", "metrics")}
    named = {key: _named_tables(raw, key, problems) for key in ("pools", "groups")}
    bounds: list[str] = []  # values out of their field's bounds: reported with the rules below, in document order
    supervisor = _build(SupervisorSection, tables["supervisor"], "supervisor", problems, bounds)
    ray = _build(RaySpec, tables["ray"], "ray", problems, bounds)
    pools = {n: _build(PoolSpec, t, f"pools.{_key(n)}", problems, bounds) for n, t in named["pools"].items()}
    groups = {n: _build(GroupSpec, t, f"groups.{_key(n)}", problems, bounds) for n, t in named["groups"].items()}
    metrics = _build(MetricsSpec, tables["metrics"], "metrics", problems, bounds)
    driver_raw = _table(raw, "driver", problems) if "driver" in raw else None
    driver = _build(DriverSpec, driver_raw, "driver", problems, bounds) if driver_raw is not None else None
    run_section = _run_section(raw, problems, bounds) if run else None
    spec = SupervisorSpec(supervisor, ray, pools, groups, metrics, driver, base_dir or Path("."), run_section)
    # A field whose type is wrong kept its default; rules about its value would only add noise.
    mistyped = {p.partition(": ")[0] for p in problems}
    raw_tables = {**tables, **named, "driver": driver_raw}
    rules = _check_semantics(spec, raw_tables, bool(named["pools"]) or "pools" not in raw, run)
    problems += sorted((p for p in bounds + rules if not _under(p.partition(": ")[0], mistyped)), key=_document_order(spec))
    if check_budget and not problems:  # the budget is only meaningful over valid numbers
        problems += [f"pools.{pool}: {arithmetic}" for pool, arithmetic in bundle_misfits(spec.bundles(), spec.worker_budgets())]
    if check_imports and not problems:
        problems += _check_imports(spec)
    if problems:
        raise SpecError(source, problems)
    return spec


def _run_section(raw: dict[str, Any], problems: list[str], bounds: list[str]) -> RunSection:
    table = _table(raw, "run", problems)
    _unknown_keys(table, {"groups"}, "run.", problems)
    group_keys = set(_toml_hints(GroupSpec))
    groups, strategy_set = {}, set()
    for name, group in _named_tables(table, "groups", problems).items():
        path = f"run.groups.{_key(name)}"
        for key in group:
            if key in group_keys - RUN_GROUP_KEYS:
                problems.append(f"{path}.{key}: only for `supervisor start`'s [groups.NAME] (a run's program places and builds its groups)")
        groups[name] = _build(GroupSpec, {k: v for k, v in group.items() if k not in group_keys - RUN_GROUP_KEYS}, path, problems, bounds)
        if "restart_strategy" in group:
            strategy_set.add(name)
    return RunSection(groups, frozenset(strategy_set))


def _document_order(spec: SupervisorSpec) -> Callable[[str], tuple[int, int]]:
    """Sort key of a problem line: its table's place in the document, then its field's in the table."""
    tables: dict[str, Any] = {"supervisor": SupervisorSection, "ray": RaySpec, "pools": None}
    tables.update({f"pools.{name}": PoolSpec for name in spec.pools} | {"groups": None})
    tables.update({f"groups.{name}": GroupSpec for name in spec.groups} | {"metrics": MetricsSpec, "driver": DriverSpec})
    tables.update({f"run.groups.{name}": GroupSpec for name in (spec.run.groups if spec.run else {})})
    places = {path: i for i, path in enumerate(tables)}

    def key(problem: str) -> tuple[int, int]:
        path = problem.partition(": ")[0]
        table, _, key = path.rpartition(".")
        if path in places or table not in places:
            return places.get(path, len(places)), -1
        keys = list(_toml_hints(tables[table]))
        return places[table], keys.index(key) if key in keys else len(keys)

    return key


def _under(path: str, roots: set[str]) -> bool:
    return any(path == root or path.startswith(root + ".") for root in roots)


def _key(key: str) -> str:
    """A TOML key as it appears in a problem line (quoted when it is not a plain name, so it stays one line)."""
    return key if re.fullmatch(r"[A-Za-z0-9_.-]+", key) else repr(key)


def _table(raw: dict[str, Any], key: str, problems: list[str]) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        problems.append(f"{key}: expected a table, got {_describe(value)}")
        return {}
    return value


def _named_tables(raw: dict[str, Any], key: str, problems: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, value in _table(raw, key, problems).items():
        if not isinstance(value, dict):
            problems.append(f"{key}.{_key(name)}: expected a table, got {_describe(value)}")
            continue
        try:
            validate_name_prefix(name)
        except ConfigError:
            problems.append(f"{key}.{_key(name)}: names may use only letters, digits, '_', '.', '-'")
            continue
        out[name] = value
    return out


def _unknown_keys(table: dict[str, Any], known: set[str], path: str, problems: list[str]) -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
            problems.append(f"{path}{_key(key)}: unknown key{hint}")


def _build(cls: Any, table: dict[str, Any], path: str, problems: list[str], bounds: list[str]) -> Any:
    """Model ``cls`` from a table: an unknown key or a value of the wrong type is one problem each (a
    value out of its field's bounds one in ``bounds``), and the field keeps its default (so the rules
    about the other fields still run)."""
    try:
        return TypeAdapter(cls).validate_python(table, by_name=False)  # the TOML key, `class` not `worker_class`
    except ValidationError as exc:
        rejected = {error["loc"][0]: error["type"] for error in exc.errors()}  # a list or table is one value
    hints = _toml_hints(cls)
    for key, kind in sorted(rejected.items(), key=lambda item: item[1] != "unexpected_keyword_argument"):
        if kind == "unexpected_keyword_argument":
            _unknown_keys({key: None}, set(hints), f"{path}.", problems)
        elif kind in ("greater_than", "greater_than_equal", "less_than_equal"):
            bounds.append(f"{path}.{key}: must be {_bounds(cls, str(key))}, got {_number(table[key])}")
        else:
            problems.append(f"{path}.{key}: expected {_type_name(hints[str(key)])}, got {_describe(table[key])}")
    return TypeAdapter(cls).validate_python({k: v for k, v in table.items() if k not in rejected}, by_name=False)


def _bounds(cls: Any, key: str) -> str:
    """A field's bounds as its schema states them, and a problem line says them: ``> 0``, ``>= 1``, ``0..65535``."""
    prop = TypeAdapter(cls).json_schema(by_alias=True)["properties"][key]
    prop = next(p for p in prop.get("anyOf", [prop]) if p.get("type") != "null")  # an optional number's number
    if "maximum" in prop:
        return f"{prop['minimum']}..{prop['maximum']}"
    return f"> {prop['exclusiveMinimum']}" if "exclusiveMinimum" in prop else f">= {prop['minimum']}"


def _number(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _toml_hints(cls: Any) -> dict[str, Any]:
    """A table's keys (a field's alias where Python reserves its name) and their types."""
    hints = typing.get_type_hints(cls)
    return {info.alias or name: hints[name] for name, info in cls.__pydantic_fields__.items()}


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)][0]
        return f"{_type_name(inner)} (or inf)" if inner is float else _type_name(inner)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if origin is list:
        return "a list" if args[0] is Any else f"a list of {_type_name(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a table" if args[1] is Any else f"a table of {_type_name(args[1]).removeprefix('a ').removeprefix('an ')}s"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _describe(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if value is None:
        return "null"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "table"}.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _check_semantics(spec: SupervisorSpec, raw: dict[str, Any], pools_ok: bool, run: bool = False) -> list[str]:
    """Cross-field rules, each delegated to the library's own validator where one exists."""
    problems: list[str] = []

    def check(path: str, rule: Callable[[], Any]) -> None:
        try:
            rule()
        except (ConfigError, ValueError) as exc:
            problems.append(f"{path}: {exc}")

    sup = spec.supervisor
    if "name" not in raw["supervisor"]:
        if not run:  # a run without a name gets one made up
            problems.append("supervisor.name: required (it names the pools, actors and state record)")
    elif supervisor_name_problem(sup.name):
        problems.append(f"supervisor.name: {supervisor_name_problem(sup.name)}")
    if sup.orphan_grace_s <= sup.heartbeat_interval_s * 2:
        problems.append(
            f"supervisor.orphan_grace_s: must exceed twice heartbeat_interval_s ({sup.heartbeat_interval_s:g}s), got {sup.orphan_grace_s:g}"
        )
    ray_raw = raw["ray"]
    if spec.ray.address is not None:
        local_keys = sorted(k for k in ("local_nodes", "num_cpus", "num_gpus", "resources") if k in ray_raw)
        if local_keys:
            problems.append(f"ray.{local_keys[0]}: only for an embedded local Ray; remove it or remove ray.address")
    if not spec.pools and pools_ok and not run:
        problems.append("pools: at least one pool is required ([pools.NAME])")
    for name, pool in spec.pools.items():
        path = f"pools.{name}"
        if "process_on_nodes" not in raw["pools"][name]:
            problems.append(f"{path}.process_on_nodes: required (ranks per node, e.g. [4, 4])")
        else:
            check(f"{path}.process_on_nodes", lambda p=pool: check_process_on_nodes(p.process_on_nodes))
        check(f"{path}.max_colocate_count", lambda p=pool: bundle_resources(p.max_colocate_count, p.use_gpu))
        check(f"{path}.capacity_factor", lambda p=pool: check_capacity_factor(p.capacity_factor))
    if not spec.groups and not run:
        problems.append("groups: at least one group is required ([groups.NAME])")
    described = {f"groups.{n}": (g, raw["groups"][n]) for n, g in spec.groups.items()}
    if spec.run is not None:  # a run's group has neither pool nor class: only its settings are checked
        described.update({f"run.groups.{n}": (g, {"pool": "", "class": ""}) for n, g in spec.run.groups.items()})
    for path, (group, group_raw) in described.items():
        if path.startswith("run."):
            pass
        elif "pool" not in group_raw:
            problems.append(f"{path}.pool: required (one of: {', '.join(spec.pools) or 'no pools defined'})")
        elif isinstance(group.pool, str) and group.pool not in spec.pools:
            problems.append(f"{path}.pool: pool {group.pool!r} is not defined (pools: {', '.join(spec.pools) or 'none'})")
        if path.startswith("run."):
            pass
        elif "class" not in group_raw:
            problems.append(f"{path}.class: required ('module:Class' of the worker)")
        elif isinstance(group.worker_class, str) and not _is_import_path(group.worker_class):
            problems.append(f"{path}.class: expected 'module:Class', got {group.worker_class!r}")
        if group.probe_timeout_s < 2 * HEARTBEAT_PERIOD_S:
            problems.append(
                f"{path}.probe_timeout_s: must be at least two heartbeat periods ({2 * HEARTBEAT_PERIOD_S:g}s), "
                f"got {group.probe_timeout_s:g}"
            )
        if group.gpus_per_worker and group.pool in spec.pools and not spec.pools[group.pool].use_gpu:
            problems.append(f"{path}.gpus_per_worker: pool {group.pool!r} has use_gpu = false")
        if group.standbys and group.pool in spec.pools and group.standbys > spec.pools[group.pool].spare_bundles:
            pool = spec.pools[group.pool]
            problems.append(
                f"{path}.standbys: {group.standbys} standby(s) need as many spare bundles, pool {group.pool!r} reserves "
                f"{pool.spare_bundles} (capacity_factor {pool.capacity_factor:g}); raise pools.{group.pool}.capacity_factor"
            )
        if group.init_kwargs and not group.init_method:
            problems.append(f"{path}.init_kwargs: given without init_method")
        if group.standby_warmup_method and not group.standbys:
            problems.append(f"{path}.standby_warmup_method: given without standbys")
        if group.standby_reach is not StandbyReach.SAME_NODE and not group.standbys:
            problems.append(f"{path}.standby_reach: given without standbys")
        if not 0 <= group.standby_nice <= NICE_MAX:
            problems.append(f"{path}.standby_nice: must be 0..{NICE_MAX} (a nice increment), got {group.standby_nice}")
        elif group.standby_nice != SupervisionConfig.standby_nice and not group.standbys:
            problems.append(f"{path}.standby_nice: given without standbys")
        if group.standby_sched_idle != SupervisionConfig.standby_sched_idle and not group.standbys:
            problems.append(f"{path}.standby_sched_idle: given without standbys")
        if group.standby_preload and not group.standbys:
            problems.append(f"{path}.standby_preload: given without standbys")
        problems += [f"{path}.standby_preload: {p}" for p in check_preload_names(group.standby_preload)]
        problems += [f"{path}.preload: {p}" for p in check_preload_names(group.preload)]
        problems += _state_problems(path, group)
        check(f"{path}.env", lambda g=group: _check_env(g.env))
    if spec.ray.auth_token_path is not None:
        problem = token_file_problem(spec.path(spec.ray.auth_token_path))  # type: ignore[arg-type]
        if problem:
            problems.append(f"ray.auth_token_path: {problem}")
    tls = {key: getattr(spec.metrics, key) for key in ("tls_cert", "tls_key")}
    if (tls["tls_cert"] is None) != (tls["tls_key"] is None):
        given, missing = ("tls_cert", "tls_key") if tls["tls_key"] is None else ("tls_key", "tls_cert")
        problems.append(f"metrics.{missing}: required with metrics.{given} (HTTPS needs both)")
    for key, value in tls.items():
        if value is not None and not spec.path(value).is_file():  # type: ignore[union-attr]
            problems.append(f"metrics.{key}: no such file: {spec.path(value)}")
    if spec.driver is not None and raw["driver"]:
        if "function" not in raw["driver"]:
            problems.append("driver.function: required ('module:function' run once the groups are ready)")
        elif not _is_import_path(spec.driver.function):
            problems.append(f"driver.function: expected 'module:function', got {spec.driver.function!r}")
    return problems


def _state_problems(path: str, group: GroupSpec) -> list[str]:
    problems = []
    if not group.state.stateful:
        for key in ("snapshot_every", "disk_snapshot_every", "disk_dir"):
            if getattr(group, key):
                problems.append(f"{path}.{key}: given without state (state = 'replicated' or 'sharded')")
    if group.disk_snapshot_every and not group.disk_dir:
        problems.append(f"{path}.disk_snapshot_every: given without disk_dir")
    if group.disk_dir and not group.disk_snapshot_every:
        problems.append(f"{path}.disk_dir: given without disk_snapshot_every")
    return problems


def supervisor_name_problem(name: str) -> str | None:
    """What is wrong with a supervisor name (None: nothing)."""
    if _SUPERVISOR_NAME.fullmatch(name):
        return None
    # No dot: "<name>." prefixes the supervisor's placement groups, and must not match another's.
    return f"{name!r} must be 1 to 64 letters, digits, '_' or '-'"


def _check_env(env: dict[str, str]) -> None:
    from ..core.worker.env import check_user_env

    check_user_env(env)


def _is_import_path(text: str) -> bool:
    module, sep, attr = text.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in attr.split("."))


def import_object(path: str, extra_sys_path: list[str] | None = None) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted), with ``extra_sys_path`` searched first.

    Raises:
        ImportError: with a one-line reason.
    """
    for directory in reversed(extra_sys_path or []):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # a module that raises on import is as unusable as a missing one
        raise ImportError(f"cannot import module {module_name!r}: {first_line(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _check_imports(spec: SupervisorSpec) -> list[str]:
    from ..core.group.actor_class import unwrap_actor_class
    from ..core.worker.worker_base import Worker

    problems: list[str] = []
    try:
        paths = spec.python_path()
    except (OSError, ValueError) as exc:
        return [f"ray.python_path: {first_line(exc)}"]
    for name, group in spec.groups.items():
        try:
            cls = unwrap_actor_class(import_object(group.worker_class, paths))
        except ImportError as exc:
            problems.append(f"groups.{name}.class: {exc}")
            continue
        if not isinstance(cls, type):
            problems.append(f"groups.{name}.class: {group.worker_class!r} is not a class")
            continue
        if group.standbys and not issubclass(cls, Worker):
            problems.append(f"groups.{name}.standbys: {cls.__name__} is not a supervisor.Worker subclass, so it cannot take over a rank")
        for key in ("init_method", "shutdown_method", "standby_warmup_method"):
            method = getattr(group, key)
            if method and not callable(getattr(cls, method, None)):
                problems.append(f"groups.{name}.{key}: {cls.__name__} has no method {method!r}")
    if spec.driver is not None:
        try:
            fn = import_object(spec.driver.function, paths)
        except ImportError as exc:
            problems.append(f"driver.function: {exc}")
        else:
            if not callable(fn):
                problems.append(f"driver.function: {spec.driver.function!r} is not callable")
    return problems
