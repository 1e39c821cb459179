"""The invariants a chaos run checks, over what the daemon logged and recorded (pure: no Ray here).

Each check returns the violations it found, one line each (empty: the invariant holds).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Mark", "StepMark", "StepAccount", "account_steps", "check_steps", "check_restarts", "check_drift", "check_nothing_left",
    "RankState", "FinalState", "final_state", "check_state_intact",
]  # fmt: skip


class Mark(enum.Enum):
    """What the driver's log says happened to its step counter."""

    START = "start"  # a driver (re)started at ``step`` (rlhf_start's start_step)
    ROLLBACK = "rollback"  # the trained state went back to ``step`` and the driver replays from it
    STEP = "step"  # ``step`` completed


@dataclass(frozen=True)
class StepMark:
    kind: Mark
    step: int


@dataclass(frozen=True)
class StepAccount:
    """What the driver's log says about the steps: the ones completed (a step replayed after a
    rollback, or re-run after a daemon restart, appears twice), items checked, items lost or
    duplicated by a group call, and the starts, rollbacks and steps in log order (``marks``; empty:
    read ``steps`` alone)."""

    steps: list[int]
    items: int
    lost: int
    duplicated: int
    mismatches: list[str]
    marks: list[StepMark] = field(default_factory=list)

    @property
    def rollbacks(self) -> int:
        return sum(1 for m in self.marks if m.kind is Mark.ROLLBACK)


def account_steps(events: Iterable[Mapping[str, Any]]) -> StepAccount:
    """Read ``rlhf_start``, ``rlhf_step``, ``rlhf_rolled_back`` and ``rlhf_items_mismatch`` events
    (the example driver's) in log order."""
    steps: list[int] = []
    marks: list[StepMark] = []
    items = lost = duplicated = 0
    mismatches: list[str] = []
    for event in events:
        if event.get("event") == "rlhf_start":
            marks.append(StepMark(Mark.START, int(event.get("start_step", 0))))
        elif event.get("event") == "rlhf_rolled_back":
            marks.append(StepMark(Mark.ROLLBACK, int(event["to_step"])))
        elif event.get("event") == "rlhf_step":
            steps.append(int(event["step"]))
            marks.append(StepMark(Mark.STEP, int(event["step"])))
            items += int(event.get("items", 0))
        elif event.get("event") == "rlhf_items_mismatch":
            lost += int(event.get("lost", 0))
            duplicated += int(event.get("duplicated", 0))
            mismatches.append(
                f"step {event.get('step')} {event.get('method')}: {event.get('lost')} lost, {event.get('duplicated')} duplicated"
            )
    return StepAccount(steps, items, lost, duplicated, mismatches, marks)


def check_steps(account: StepAccount, min_steps: int, allow_reruns: bool = False) -> list[str]:
    """Every step from 0 to the last one completed, none skipped; each once, except the steps a
    rollback announced it would replay (and, when ``allow_reruns``, those a restarted daemon's driver
    re-ran: the step in flight, or back to the trained state's step its start announced); nothing lost
    or duplicated."""
    problems = [f"items: {m}" for m in account.mismatches]
    if len(set(account.steps)) < min_steps:
        problems.append(f"only {len(set(account.steps))} step(s) completed, expected at least {min_steps}")
    if account.steps:
        missing = sorted(set(range(max(account.steps) + 1)) - set(account.steps))
        if missing:
            problems.append(f"steps skipped: {missing[:20]}")
    marks = account.marks or [StepMark(Mark.STEP, s) for s in account.steps]
    repeated: list[int] = []
    skipped: list[int] = []
    went_back: list[str] = []
    expected: int | None = None  # the next step the driver should complete
    for mark in marks:
        if mark.kind is Mark.START:
            if expected is not None and mark.step < expected and not allow_reruns:
                went_back.append(f"the driver restarted at step {mark.step} after step {expected - 1}")
            if expected is not None and mark.step > expected:
                skipped += range(expected, mark.step)
            expected = mark.step
        elif mark.kind is Mark.ROLLBACK:
            if expected is not None and mark.step > expected:
                problems.append(f"a rollback to step {mark.step} is past the driver's next step {expected}")
            expected = mark.step
        else:
            if expected is not None and mark.step > expected:
                skipped += range(
                    expected, mark.step
                )  # completed before, not replayed (else `missing` has them)
            elif expected is not None and mark.step < expected:
                if not allow_reruns:
                    repeated.append(mark.step)
                elif (
                    mark.step < expected - 1
                ):  # a restarted daemon re-runs at most the step in flight, unannounced
                    went_back.append(f"the driver went back from step {expected - 1} to {mark.step}")
            expected = mark.step + 1
    skipped = sorted(set(skipped) - set(missing if account.steps else []))
    if skipped:
        problems.append(f"steps skipped on a replay: {skipped[:20]}")
    if repeated:
        problems.append(f"steps run more than once: {sorted(set(repeated))[:20]}")
    problems += went_back[:1]
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


@dataclass(frozen=True)
class RankState:
    """One trained rank's state at the end: its step counter and the digest of its whole state_dict."""

    rank: int
    step: int
    digest: str | None


@dataclass(frozen=True)
class FinalState:
    """What a job ended with: how many steps it ran (the step its driver would go on from) and every
    trained rank's state, by group."""

    steps: int
    groups: dict[str, list[RankState]]


def final_state(events: Iterable[Mapping[str, Any]]) -> FinalState | None:
    """The trained state the driver logged last: at its end (``rlhf_done``: it ran ``steps``), or
    after a stop (``chaos_trained_state`` after ``rlhf_stopped``: it ran ``next_step``, or the step of a
    rollback announced after it). None when neither was logged."""
    final: FinalState | None = None
    next_step: int | None = None
    for event in events:
        kind = event.get("event")
        if kind == "rlhf_stopped":
            next_step = int(event["next_step"])
        elif kind == "rlhf_done" and "state" in event:
            final = FinalState(int(event["steps"]), _rank_states(event["state"]))
        elif kind == "chaos_trained_state" and next_step is not None:
            steps = int(event["rolled_back_to"]) if event.get("rolled_back_to") is not None else next_step
            final = FinalState(steps, _rank_states(event["state"]))
    return final


def _rank_states(state: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, list[RankState]]:
    return {
        group: [RankState(int(r["rank"]), int(r["step"]), r.get("digest")) for r in ranks]
        for group, ranks in state.items()
    }


def check_state_intact(final: FinalState, reference: Mapping[str, list[str]]) -> list[str]:
    """Every trained rank holds, bit for bit, the state of a fault-free run at the same step
    (``reference``: the digest of each rank of each group after ``final.steps`` steps), and its step
    counter is the number of steps the job ran: no step skipped or applied twice, nothing lost."""
    problems = []
    for group, digests in sorted(reference.items()):
        ranks = {r.rank: r for r in final.groups.get(group, [])}
        if sorted(ranks) != list(range(len(digests))) or len(final.groups.get(group, [])) != len(digests):
            problems.append(
                f"{group}: state of ranks {sorted(r.rank for r in final.groups.get(group, []))}, expected ranks 0..{len(digests) - 1}"
            )
            continue
        for rank, expected in enumerate(digests):
            got = ranks[rank]
            if got.step != final.steps:
                problems.append(
                    f"{group} rank {rank}: state at step {got.step}, but the job ran {final.steps} step(s)"
                )
            elif got.digest != expected:
                problems.append(
                    f"{group} rank {rank}: state digest {got.digest} at step {got.step}, a fault-free run has {expected}"
                )
    for group in sorted(set(final.groups) - set(reference)):
        problems.append(f"{group}: trained state of a group without a reference")
    return problems
