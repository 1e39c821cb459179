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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    if capture_stdlib:
        _capture_stdlib(renderer, level)
    _configured = True


def _capture_stdlib(renderer: Any, level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
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
