"""Retry and poll loops: exponential backoff, a deadline, an owner that can stop them, and a log line
for a long wait, on tenacity (one place for how the package waits for something to happen).

* :func:`retry` calls a function until it returns without an exception its predicate retries; on
  giving up (deadline, attempts, or the owner stopping) it re-raises the last exception.
* :func:`poll` calls a function until it returns something truthy; on giving up it returns the last
  (falsy) result, so the caller raises its own error with its own message.
* :class:`Backoff` is the delay between attempts (``initial_s``, doubling, at most ``max_s``, plus up
  to ``jitter_s`` at random); its :meth:`Backoff.delay_s` is also what the init policy plans with.
* :class:`WaitReport` is the line a wait longer than a few seconds logs: what it waits for and for how
  long (project rule: every long wait says both).

Time is injectable (``clock``, ``sleep``) so tests run on a fake clock.

Owns: the retry and poll loops' backoff, deadline and stop conditions, and their long-wait report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

__all__ = ["Backoff", "WaitReport", "Stopping", "retry", "poll"]

T = TypeVar("T")

# The owner's stop signal: an event that is set, or a callable that says so. Waiting on an event ends
# the moment it is set; a callable is asked between attempts.
Stopping = threading.Event | Callable[[], bool]


@dataclass(frozen=True)
class Backoff:
    """The delay before attempt ``n + 1``: ``initial_s * 2 ** (n - 1)``, at most ``max_s``, plus a
    uniform random ``[0, jitter_s]`` (tenacity's ``wait_exponential_jitter``)."""

    initial_s: float
    max_s: float
    jitter_s: float = 0.0

    @classmethod
    def fixed(cls, period_s: float) -> Backoff:
        """The same delay between every two attempts (a poll of something that changes on its own)."""
        return cls(period_s, period_s)

    def delay_s(self, attempt: int) -> float:
        """Delay after attempt ``attempt`` (1-based) failed."""
        wait = tenacity.wait_exponential_jitter(initial=self.initial_s, max=self.max_s, jitter=self.jitter_s)
        state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = attempt
        return float(wait(state))


@dataclass(frozen=True)
class WaitReport:
    """What a long wait logs: ``log.info(event, **fields, waited_s=...)`` once it has waited
    ``after_s``, then every ``every_s``.

    Attributes:
        log: the structlog logger of the module that waits (its lines keep their logger name).
        event: the log event, saying what is waited for.
        fields: what identifies the wait (group, rank, ...).
    """

    log: Any
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    after_s: float = 5.0
    every_s: float = 5.0


def retry(
    call: Callable[[], T],
    backoff: Backoff,
    retry_if: Callable[[BaseException], bool] | tuple[type[BaseException], ...],
    *,
    timeout_s: float | None = None,
    attempts: int | None = None,
    stopping: Stopping | None = None,
    report: WaitReport | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, again after each exception ``retry_if`` accepts (a predicate, or exception types).

    Raises:
        The last exception, when ``timeout_s`` has passed since the first call, ``attempts`` calls
        failed, or ``stopping`` says the owner stops; at once, any exception ``retry_if`` rejects.
    """
    accepts = retry_if if not isinstance(retry_if, tuple) else (lambda exc: isinstance(exc, retry_if))
    retrying = _retrying(backoff, timeout_s, attempts, stopping, report, clock, sleep, retry=tenacity.retry_if_exception(accepts), reraise=True)
    return retrying(call)


def poll(
    check: Callable[[], T],
    backoff: Backoff,
    *,
    timeout_s: float | None = None,
    attempts: int | None = None,
    stopping: Stopping | None = None,
    report: WaitReport | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``check()`` until it returns something truthy; that result, or the last falsy one when
    ``timeout_s`` has passed, ``attempts`` checks were made or ``stopping`` says the owner stops.
    An exception ``check`` raises ends the poll."""
    retrying = _retrying(
        backoff, timeout_s, attempts, stopping, report, clock, sleep,
        retry=tenacity.retry_if_result(lambda result: not result), retry_error_callback=_last_result,
    )  # fmt: skip
    return retrying(check)


def _last_result(state: tenacity.RetryCallState) -> Any:
    assert state.outcome is not None
    return state.outcome.result()


def _stopped(stopping: Stopping | None) -> bool:
    if stopping is None:
        return False
    return stopping.is_set() if isinstance(stopping, threading.Event) else bool(stopping())


def _retrying(
    backoff: Backoff,
    timeout_s: float | None,
    attempts: int | None,
    stopping: Stopping | None,
    report: WaitReport | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    **how: Any,
) -> tenacity.Retrying:
    # tenacity's own stop_after_delay reads time.monotonic: the deadline is kept here, on ``clock``.
    started = clock()
    next_report = report.after_s if report is not None else None

    # tenacity 8.1 (our floor) calls stop and wait with the keyword ``retry_state``.
    def stop(retry_state: tenacity.RetryCallState) -> bool:
        out_of_attempts = attempts is not None and retry_state.attempt_number >= attempts
        past_deadline = timeout_s is not None and clock() - started >= timeout_s
        return out_of_attempts or past_deadline or _stopped(stopping)

    def wait(retry_state: tenacity.RetryCallState) -> float:
        delay = backoff.delay_s(retry_state.attempt_number)
        return delay if timeout_s is None else min(delay, max(0.0, started + timeout_s - clock()))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        nonlocal next_report
        waited = clock() - started
        if report is not None and next_report is not None and waited >= next_report:
            next_report = waited + report.every_s
            report.log.info(report.event, **report.fields, waited_s=round(waited, 1))

    def pause(seconds: float) -> None:
        if isinstance(stopping, threading.Event):
            stopping.wait(seconds)  # ends the moment the owner stops
        else:
            sleep(seconds)

    return tenacity.Retrying(stop=stop, wait=wait, sleep=pause, before_sleep=before_sleep, **how)
