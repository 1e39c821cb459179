"""The environment contract between a group and its worker processes.

A worker learns who it is from environment variables set when its actor is created, exactly as under
torchrun, so model code that reads RANK/WORLD_SIZE/MASTER_ADDR works unchanged:

==================== ==========================================================================
WORLD_SIZE           number of ranks in the group
RANK                 this worker's rank, 0..WORLD_SIZE-1, stable across replacements
LOCAL_RANK           index among the ranks that share this worker's placement group (node)
LOCAL_WORLD_SIZE     number of ranks in this worker's placement group
RAY_LOCAL_WORLD_SIZE the same, under verl's name
MASTER_ADDR          address of rank 0's node, for torch.distributed rendezvous
MASTER_PORT          a port that was free on rank 0's node when the group was created
WG_PREFIX            the group's name prefix
WG_BACKEND           always ``ray``
SUPERVISOR_STANDBY   ``1`` in a pre-started standby, which has no RANK/LOCAL_RANK/LOCAL_WORLD_SIZE
                     until it takes over a failed rank's environment
SUPERVISOR_STANDBY_NICE in a standby, how much it lowers its CPU priority until then (its
                     group's ``standby_nice``; absent when 0)
SUPERVISOR_STANDBY_SCHED_IDLE ``1`` in a standby that runs under ``SCHED_IDLE`` until then (its
                     group's ``standby_sched_idle``; absent when false)
==================== ==========================================================================

The user's ``worker_env`` may add variables but never override these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import WorkerEnvError

__all__ = ["STANDBY_ENV_KEY", "STANDBY_NICE_ENV_KEY", "STANDBY_SCHED_IDLE_ENV_KEY", "standby_env_vars", "VERL_ENV_KEYS", "verl_worker_env_vars", "RESERVED_ENV_KEYS", "Rendezvous", "WorkerIdentity", "worker_env_vars", "check_user_env"]

# Set (to "1") in a standby's environment instead of RANK/LOCAL_RANK/LOCAL_WORLD_SIZE.
STANDBY_ENV_KEY = "SUPERVISOR_STANDBY"
# How much a standby lowers its CPU priority (nice increment) until it takes over a rank; 0: not at all.
STANDBY_NICE_ENV_KEY = "SUPERVISOR_STANDBY_NICE"
# "1": a standby runs under SCHED_IDLE until it takes over a rank.
STANDBY_SCHED_IDLE_ENV_KEY = "SUPERVISOR_STANDBY_SCHED_IDLE"

RESERVED_ENV_KEYS: frozenset[str] = frozenset(
    {
        STANDBY_ENV_KEY,
        STANDBY_NICE_ENV_KEY,
        STANDBY_SCHED_IDLE_ENV_KEY,
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "RAY_LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WG_PREFIX",
        "WG_BACKEND",
    }
)


@dataclass(frozen=True)
class Rendezvous:
    """Where the group's collective rendezvous happens (rank 0's node and a free port on it)."""

    master_addr: str
    master_port: int


@dataclass(frozen=True)
class WorkerIdentity:
    """Who a rank is: everything its environment is derived from."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    prefix: str


def check_user_env(worker_env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate user-supplied worker variables and return them as a str→str dict.

    Raises:
        WorkerEnvError: a key is reserved by the contract, or a key/value is not a string.
    """
    if not worker_env:
        return {}
    clash = sorted(set(worker_env) & RESERVED_ENV_KEYS)
    if clash:
        raise WorkerEnvError(
            f"worker_env may not override {', '.join(clash)}: the group sets them for every rank "
            f"(reserved: {', '.join(sorted(RESERVED_ENV_KEYS))})"
        )
    out: dict[str, str] = {}
    for key, value in worker_env.items():
        if not isinstance(key, str) or not key:
            raise WorkerEnvError(f"worker_env keys must be non-empty strings, got {key!r}")
        if not isinstance(value, str | int | float | bool):
            raise WorkerEnvError(f"worker_env[{key!r}] must be a string, got {type(value).__name__}")
        out[key] = str(value)
    return out


def worker_env_vars(
    identity: WorkerIdentity, rendezvous: Rendezvous, user_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The full environment of one rank: the contract variables plus the (validated) user variables."""
    env = check_user_env(user_env)
    env.update(
        {
            "WORLD_SIZE": str(identity.world_size),
            "RANK": str(identity.rank),
            "LOCAL_RANK": str(identity.local_rank),
            "LOCAL_WORLD_SIZE": str(identity.local_world_size),
            "RAY_LOCAL_WORLD_SIZE": str(identity.local_world_size),
            "MASTER_ADDR": rendezvous.master_addr,
            "MASTER_PORT": str(rendezvous.master_port),
            "WG_PREFIX": identity.prefix,
            "WG_BACKEND": "ray",
        }
    )
    return env


# What verl's own RayWorkerGroup gives every rank (verl 0.9.1): no LOCAL_RANK or LOCAL_WORLD_SIZE.
VERL_ENV_KEYS: tuple[str, ...] = ("WORLD_SIZE", "RANK", "WG_PREFIX", "WG_BACKEND", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def verl_worker_env_vars(
    identity: WorkerIdentity, rendezvous: Rendezvous, user_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of one rank of a group of verl's own Worker classes: exactly verl's variables.

    verl's Worker reads LOCAL_RANK with a default of 0 and its FSDP workers select
    ``cuda:LOCAL_RANK`` inside the one device Ray made visible to the actor, so a LOCAL_RANK of 1
    (our layout's second bundle on a node) would name a device the process cannot see.
    """
    env = worker_env_vars(identity, rendezvous, user_env)
    for key in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        if user_env is None or key not in user_env:
            del env[key]
    return env


def standby_env_vars(
    world_size: int, prefix: str, rendezvous: Rendezvous, user_env: Mapping[str, str] | None = None, nice: int = 0,
    sched_idle: bool = False,
) -> dict[str, str]:  # fmt: skip
    """The environment of a standby: the group's variables, but no rank until it takes one over, and
    how it lowers its CPU priority until then (``nice``, ``sched_idle``)."""
    identity = WorkerIdentity(rank=0, world_size=world_size, local_rank=0, local_world_size=1, prefix=prefix)
    env = worker_env_vars(identity, rendezvous, user_env)
    for key in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE"):
        del env[key]
    env[STANDBY_ENV_KEY] = "1"
    if nice:
        env[STANDBY_NICE_ENV_KEY] = str(nice)
    if sched_idle:
        env[STANDBY_SCHED_IDLE_ENV_KEY] = "1"
    return env
