"""A chaos run's report: what was injected, what recovered, what was lost, how long it took (pure)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Stats", "Report"]


@dataclass(frozen=True)
class Stats:
    """Median, p95 and max of a set of durations (seconds); ``n = 0`` when nothing was measured."""

    n: int = 0
    median_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        if not values:
            return cls()
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return cls(len(ordered), round(statistics.median(ordered), 4), round(p95, 4), round(ordered[-1], 4))

    def describe(self) -> str:
        if not self.n:
            return "not measured"
        return f"median {self.median_s * 1e3:.0f} ms, p95 {self.p95_s * 1e3:.0f} ms, max {self.max_s * 1e3:.0f} ms (n={self.n})"  # type: ignore[operator]


@dataclass
class Report:
    """One scenario run. ``violations`` lists every invariant that failed, one line each."""

    scenario: str
    profile: str
    seed: int
    started_at: float
    duration_s: float = 0.0
    faults_injected: dict[str, int] = field(default_factory=dict)
    faults_recovered: int = 0
    steps_run: int = 0
    items_checked: int = 0
    items_lost: int = 0
    items_duplicated: int = 0
    detection: Stats = field(default_factory=Stats)
    recovery: Stats = field(default_factory=Stats)
    leaked: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.leaked and self.items_lost == 0 and self.items_duplicated == 0

    @property
    def total_injected(self) -> int:
        return sum(self.faults_injected.values())

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}

    def summary(self) -> str:
        faults = ", ".join(f"{n} {kind}" for kind, n in sorted(self.faults_injected.items())) or "none"
        lines = [
            f"chaos {self.scenario} ({self.profile}, seed {self.seed}): {'OK' if self.ok else 'FAILED'} in {self.duration_s:.0f}s",
            f"  faults injected: {faults}; recovered: {self.faults_recovered}",
            f"  steps run: {self.steps_run}; items checked: {self.items_checked}; lost: {self.items_lost}; duplicated: {self.items_duplicated}",
            f"  detection: {self.detection.describe()}",
            f"  recovery:  {self.recovery.describe()}",
            f"  leaked resources: {len(self.leaked)}" + (f" ({', '.join(self.leaked)})" if self.leaked else ""),
        ]
        lines += [f"  {key}: {value}" for key, value in sorted(self.notes.items())]
        lines += [f"  VIOLATION: {v}" for v in self.violations]
        return "\n".join(lines)

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Write ``<scenario>-<profile>.json`` and ``.txt`` into ``directory``; returns both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        stem = directory / f"{self.scenario}-{self.profile}"
        json_path, text_path = stem.with_suffix(".json"), stem.with_suffix(".txt")
        json_path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        text_path.write_text(self.summary() + "\n")
        return json_path, text_path
