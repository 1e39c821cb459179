"""Structured logging: one configuration, used by every module.

On a terminal the output is human-readable key=value lines; anywhere else (CI, a daemon under
systemd, a file) it is one JSON object per line, so the records can be shipped and queried. A process
that owns its stderr (the daemon, ``supervisor run``) also sends the standard library's records there
through the same renderer: Ray's, the user's and our own ``logging`` loggers, so journald and
``kubectl logs`` get one JSON stream.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]

_configured = False


def configure_logging(level: int | str = logging.INFO, json: bool | None = None, capture_stdlib: bool = False) -> None:
    """Configure structlog once for this process.

    Args:
        level: minimum level that is emitted.
        json: force JSON (True) or console (False) rendering; None picks console on a TTY.
        capture_stdlib: also render every standard-library ``logging`` record (Ray's included) the
            same way, on stderr, from ``level`` up. For processes that own their output, never for a
            library call: it replaces the root logger's handlers.
    """
    global _configured
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    if json is None:
        json = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    handler = _stdlib_handler(renderer, level) if capture_stdlib else None
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # With the standard library's records on the same stream, both write under the handler's lock:
        # a line of one never lands inside a line of the other.
        logger_factory=(lambda *_: _LockedLine(handler)) if handler is not None else structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    if handler is not None:
        _capture_stdlib(handler, level)
    _configured = True


class _LockedLine:
    """A structlog logger writing each rendered line to the handler's stream under the handler's lock."""

    def __init__(self, handler: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        self._handler = handler

    def msg(self, message: str) -> None:
        self._handler.acquire()
        try:
            self._handler.stream.write(message + "\n")
            self._handler.stream.flush()
        finally:
            self._handler.release()

    log = debug = info = warn = warning = error = err = critical = fatal = exception = failure = msg


def _stdlib_handler(renderer: Any, level: int) -> logging.StreamHandler:  # type: ignore[type-arg]
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)  # Ray sets its own loggers' levels; the stream's is this one
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    return handler


def _capture_stdlib(handler: logging.Handler, level: int) -> None:
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)  # warnings.warn (torch's, Ray's) as records of "py.warnings"
    # Ray gives its "ray" logger a handler of its own (at import) and stops it propagating; ray.init
    # only re-formats the handlers it finds. Without one it propagates here.
    import ray  # noqa: F401 - so that its logging set-up has run before it is undone

    ray_logger = logging.getLogger("ray")
    ray_logger.handlers.clear()
    ray_logger.propagate = True


def get_logger(name: str) -> Any:
    """Return a structlog logger bound to ``component=name``, configuring defaults on first use."""
    if not _configured:
        configure_logging()
    # A lazy proxy: it follows a later configure_logging() (e.g. the CLI's --log-json), unlike a
    # logger bound at import time.
    return structlog.get_logger(component=name)
