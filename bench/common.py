"""What the benchmarks share: statistics, local clusters on 127.0.0.1, verl for the comparisons, result rows."""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on loopback

__all__ = ["Stat", "Row", "measure", "interleave", "reps_for", "local_cluster", "ensure_verl", "print_rows", "VERL_DIR"]

BENCH_DIR = Path(__file__).resolve().parent
# verl is installed with --no-deps (plus the few modules its import needs) into this directory, for the
# benchmarks only: it is not a dependency of the project. Appended to the path, so the project's own
# versions of shared packages win.
VERL_DIR = BENCH_DIR / ".verl"
VERL_VERSION = "0.9.1"
# What `import verl.single_controller.ray` and `verl.DataProto` need beyond this project's dependencies.
VERL_IMPORT_DEPS = [
    "omegaconf", "transformers", "huggingface_hub", "tokenizers", "safetensors", "regex", "tqdm", "httpx2",
    "httpcore2", "h11", "truststore",
]  # fmt: skip


@dataclass(frozen=True)
class Stat:
    """Median and p95 of repeated timings (seconds)."""

    median: float
    p95: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        ordered = sorted(values)
        return cls(statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], len(ordered))

    def show(self, unit: str = "ms") -> str:
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "%": 100.0, "steps/min": 1.0, "KiB": 1 / 1024, "of fault-free": 1.0}[unit]
        return f"{_num(self.median * scale)} {unit} (p95 {_num(self.p95 * scale)})"


def _num(x: float) -> str:
    """Three significant digits, never in exponent notation."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


@dataclass(frozen=True)
class Row:
    """One line of RESULTS.md: ours against a reference, measured in the same run."""

    benchmark: str
    case: str
    ours: Stat
    reference: str
    ref: Stat | None
    goal: str = ""  # e.g. "<= 1.10x" (ours / reference at most), ">= 0.95x" (at least)
    unit: str = "ms"

    @property
    def ratio(self) -> float | None:
        if not self.ref:
            return None
        if self.ref.median == 0:  # a reference that did nothing (e.g. a goodput of 0): any progress is infinitely more
            return math.inf if self.ours.median > 0 else None
        return self.ours.median / self.ref.median

    @property
    def met(self) -> bool | None:
        if self.ratio is None or not self.goal:
            return None
        op, value = self.goal.split()
        bound = float(value.rstrip("x"))
        return {"<=": self.ratio <= bound, "<": self.ratio < bound, ">=": self.ratio >= bound}[op]


def measure(fn: Callable[[], Any], reps: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def interleave(fns: dict[str, Callable[[], Any]], reps: int, warmup: int = 3, block: int = 10) -> dict[str, Stat]:
    """Time each function ``reps`` times, in alternating blocks, so drift of the machine hits all alike.

    The order within a block rotates from block to block: the function timed right after another one
    can pay for it (a cache it evicted, a reply still being sent), and no function should always sit in
    the same place.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    order = list(fns)
    done = 0
    while done < reps:
        n = min(block, reps - done)
        for name in order:
            times[name] += measure(fns[name], n, warmup=0)
        order = order[1:] + order[:1]
        done += n
    return {name: Stat.of(values) for name, values in times.items()}


def reps_for(fn: Callable[[], Any], budget_s: float, least: int) -> int:
    """How many repetitions of ``fn`` fit in ``budget_s`` (at least ``least``), from a few timed calls:
    a fast call gets more, so its median is as steady as a slow one's."""
    probe = measure(fn, 5, warmup=2)
    return max(least, int(budget_s / max(statistics.median(probe), 1e-6)))


def local_cluster(nodes: list[dict[str, Any]]) -> Any:
    """A ``ray.cluster_utils.Cluster`` with these nodes (the first is the head), this process connected."""
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    cluster = LocalCluster(initialize_head=True, head_node_args={**nodes[0], "include_dashboard": False})
    for node in nodes[1:]:
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    return cluster


def ensure_verl() -> None:
    """Make ``import verl`` work here and in the worker processes of clusters started afterwards
    (they inherit ``PYTHONPATH``); install it if needed."""
    if str(VERL_DIR) not in sys.path:
        sys.path.append(str(VERL_DIR))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), str(VERL_DIR)] if p)
    if importlib.util.find_spec("verl") is not None:
        return
    missing = [p for p in VERL_IMPORT_DEPS if importlib.util.find_spec(p) is None]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(VERL_DIR)]
    subprocess.run([*pip, f"verl=={VERL_VERSION}", *missing], check=True)
    importlib.invalidate_caches()


def print_rows(rows: list[Row]) -> None:
    """A benchmark module's own output when run alone (``python -m bench.NAME``)."""
    for row in rows:
        ref = f" | {row.reference}" + (f": {row.ref.show(row.unit)}" if row.ref else "")
        ratio = f" | {row.ratio:.2f}x" if row.ratio is not None else ""
        print(f"{row.benchmark} | {row.case} | {row.ours.show(row.unit)}{ref}{ratio}")
