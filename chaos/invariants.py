"""The invariants a chaos run checks, over what the daemon logged and recorded (pure: no Ray here).

Each check returns the violations it found, one line each (empty: the invariant holds).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StepAccount", "account_steps", "check_steps", "check_restarts", "check_drift", "check_nothing_left"]


@dataclass(frozen=True)
class StepAccount:
    """What the driver's log says about the steps: the ones completed (a step re-run after a daemon
    restart appears twice), items checked, and items lost or duplicated by a group call."""

    steps: list[int]
    items: int
    lost: int
    duplicated: int
    mismatches: list[str]


def account_steps(events: Iterable[Mapping[str, Any]]) -> StepAccount:
    """Read ``rlhf_step`` and ``rlhf_items_mismatch`` events (the example driver's) in log order."""
    steps: list[int] = []
    items = lost = duplicated = 0
    mismatches: list[str] = []
    for event in events:
        if event.get("event") == "rlhf_step":
            steps.append(int(event["step"]))
            items += int(event.get("items", 0))
        elif event.get("event") == "rlhf_items_mismatch":
            lost += int(event.get("lost", 0))
            duplicated += int(event.get("duplicated", 0))
            mismatches.append(f"step {event.get('step')} {event.get('method')}: {event.get('lost')} lost, {event.get('duplicated')} duplicated")
    return StepAccount(steps, items, lost, duplicated, mismatches)


def check_steps(account: StepAccount, min_steps: int, allow_reruns: bool = False) -> list[str]:
    """Every step from 0 to the last one completed, none skipped; each once (a step the daemon was
    killed in may be re-run by the next daemon, when ``allow_reruns``); nothing lost or duplicated."""
    problems = [f"items: {m}" for m in account.mismatches]
    if len(set(account.steps)) < min_steps:
        problems.append(f"only {len(set(account.steps))} step(s) completed, expected at least {min_steps}")
    if account.steps:
        missing = sorted(set(range(max(account.steps) + 1)) - set(account.steps))
        if missing:
            problems.append(f"steps skipped: {missing[:20]}")
    repeated = sorted(step for step, n in Counter(account.steps).items() if n > 1)
    if repeated and not allow_reruns:
        problems.append(f"steps run more than once: {repeated[:20]}")
    if allow_reruns:
        # After a restart the driver resumes from its saved step: it may repeat the step in flight, never go back further.
        for before, after in zip(account.steps, account.steps[1:], strict=False):
            if after < before:
                problems.append(f"the driver went back from step {before} to {after}")
                break
    return problems


def check_restarts(kills: Mapping[tuple[str, int], int], restarts: Mapping[tuple[str, int], int]) -> list[str]:
    """Each rank restarted exactly as often as its actor was killed (``{(group, rank): count}``)."""
    problems = []
    for key in sorted(set(kills) | set(restarts)):
        if kills.get(key, 0) != restarts.get(key, 0):
            group, rank = key
            problems.append(f"{group} rank {rank}: {kills.get(key, 0)} kill(s) but {restarts.get(key, 0)} restart(s)")
    return problems


def check_drift(moved: set[tuple[str, int]], drifted: set[tuple[str, int]]) -> list[str]:
    """Drift is reported for exactly the ranks that moved off their original node."""
    problems = []
    if moved - drifted:
        problems.append(f"moved but not reported drifted: {sorted(moved - drifted)}")
    if drifted - moved:
        problems.append(f"reported drifted but did not move: {sorted(drifted - moved)}")
    return problems


def check_nothing_left(placement_groups: Iterable[str], actors: Iterable[str], record_left: bool) -> list[str]:
    """After teardown: no placement group, no actor, no state record of the supervisor."""
    leaked = [f"placement group {name}" for name in sorted(placement_groups)]
    leaked += [f"actor {name}" for name in sorted(actors)]
    if record_left:
        leaked.append("state record")
    return leaked
