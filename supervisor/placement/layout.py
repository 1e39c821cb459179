"""Pure placement arithmetic: which rank sits in which placement group and bundle.

No Ray here, so the rules that decide names and ranks are tested without a cluster and are the same
in the library, the daemon and ``supervisor status``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ConfigError

__all__ = [
    "BundleRef",
    "BundleSlot",
    "bundle_resources",
    "placement_group_name",
    "spare_placement_group_name",
    "spare_bundle_count",
    "check_capacity_factor",
    "rank_layout",
    "check_process_on_nodes",
    "actor_name",
    "validate_name_prefix",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class BundleRef(NamedTuple):
    """The address of one bundle of a pool: the one representation, everywhere (a ``(pg, b)`` tuple
    compares and hashes equal to it; the record stores it as ``[pg, b]``, logs and status as ``"pg:b"``).

    Attributes:
        pg_index: index of the placement group in the pool (one per node; the spare group last).
        bundle_index: index of the bundle inside that placement group.
    """

    pg_index: int
    bundle_index: int

    def __str__(self) -> str:
        return f"{self.pg_index}:{self.bundle_index}"


@dataclass(frozen=True)
class BundleSlot:
    """Where one rank lives.

    Attributes:
        rank: global rank within the group.
        bundle: its bundle.
        local_rank: position of the rank among the ranks of its placement group.
        local_world_size: number of ranks in its placement group.
    """

    rank: int
    bundle: BundleRef
    local_rank: int
    local_world_size: int

    @property
    def pg_index(self) -> int:
        return self.bundle.pg_index

    @property
    def bundle_index(self) -> int:
        return self.bundle.bundle_index


def check_process_on_nodes(process_on_nodes: object) -> list[int]:
    """Validate ``process_on_nodes`` (ranks per node) and return it as a list of ints.

    Raises:
        ConfigError: not a non-empty list of positive integers.
    """
    if not isinstance(process_on_nodes, list | tuple) or not process_on_nodes:
        raise ConfigError(f"process_on_nodes must be a non-empty list of positive ints, got {process_on_nodes!r}")
    for i, n in enumerate(process_on_nodes):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(f"process_on_nodes[{i}] must be a positive int, got {n!r}")
    return [int(n) for n in process_on_nodes]


def validate_name_prefix(prefix: str) -> str:
    """Check that a name prefix is usable in Ray actor and placement-group names.

    Raises:
        ConfigError: empty, or characters outside ``[A-Za-z0-9_.-]``.
    """
    if not isinstance(prefix, str) or not _NAME_RE.match(prefix):
        raise ConfigError(f"name prefix {prefix!r} must be non-empty and use only letters, digits, '_', '.', '-'")
    return prefix


def bundle_resources(max_colocate_count: int, use_gpu: bool, accelerator_type: str | None = None) -> dict[str, float]:
    """The resources of one bundle: ``max_colocate_count`` CPUs, plus one GPU when ``use_gpu``.

    Raises:
        ConfigError: ``max_colocate_count`` is not a positive int.
    """
    if isinstance(max_colocate_count, bool) or not isinstance(max_colocate_count, int) or max_colocate_count <= 0:
        raise ConfigError(f"max_colocate_count must be a positive int, got {max_colocate_count!r}")
    bundle: dict[str, float] = {"CPU": max_colocate_count}
    if use_gpu:
        bundle["GPU"] = 1
        if accelerator_type:
            # Ray's convention: a tiny amount of the accelerator-type resource pins the node type.
            bundle[f"accelerator_type:{accelerator_type}"] = 0.001
    return bundle


def placement_group_name(pool_prefix: str, process_on_nodes: list[int], pg_index: int) -> str:
    """Deterministic name of placement group ``pg_index`` of a pool.

    The shape is part of the name, so two pools with one prefix but different layouts never adopt
    each other's placement groups.
    """
    shape = "_".join(str(n) for n in process_on_nodes)
    return f"{pool_prefix}:pg{shape}:{pg_index}"


def check_capacity_factor(capacity_factor: object) -> float:
    """Validate a pool's ``capacity_factor`` (reserved bundles / the ranks' bundles).

    Raises:
        ConfigError: not a finite number >= 1.
    """
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, int | float) or not math.isfinite(capacity_factor) or capacity_factor < 1:
        raise ConfigError(f"capacity_factor must be a number >= 1.0 (1.0: no spare bundles), got {capacity_factor!r}")
    return float(capacity_factor)


def spare_bundle_count(world_size: int, capacity_factor: float) -> int:
    """Spare bundles a pool of ``world_size`` bundles reserves: the extra capacity, rounded up."""
    return math.ceil(world_size * (capacity_factor - 1) - 1e-9)


def spare_placement_group_name(pool_prefix: str, process_on_nodes: list[int], spares: int) -> str:
    """Name of a pool's spare placement group; a changed number of spares is another group."""
    shape = "_".join(str(n) for n in process_on_nodes)
    return f"{pool_prefix}:pg{shape}:spare{spares}"


def rank_layout(process_on_nodes: list[int], start: int = 0, world_size: int | None = None) -> list[BundleSlot]:
    """Ranks in order over the pool's bundles: placement group 0's bundles first, then 1's, ...

    Args:
        process_on_nodes: ranks per placement group.
        start: first flat bundle index to use (sub-pools take a contiguous range of bundles).
        world_size: number of ranks; defaults to all bundles from ``start``.

    Raises:
        ConfigError: the range does not fit in the pool.
    """
    counts = check_process_on_nodes(process_on_nodes)
    total = sum(counts)
    if world_size is None:
        world_size = total - start
    if start < 0 or world_size <= 0 or start + world_size > total:
        raise ConfigError(f"ranks {start}..{start + world_size - 1} do not fit a pool of {total} bundles")
    flat: list[tuple[int, int, int]] = [(pg, b, n) for pg, n in enumerate(counts) for b in range(n)]
    slots: list[BundleSlot] = []
    for rank, (pg, b, n) in enumerate(flat[start : start + world_size]):
        slots.append(BundleSlot(rank=rank, bundle=BundleRef(pg, b), local_rank=b, local_world_size=n))
    return slots


def actor_name(group_prefix: str, class_name: str, slot: BundleSlot) -> str:
    """Deterministic actor name of a rank: same rank, same name, across replacements and restarts."""
    return f"{group_prefix}{class_name}_{slot.pg_index}:{slot.local_rank}"
