"""Structured logging: one configuration, used by every module.

On a terminal the output is human-readable key=value lines; anywhere else (CI, a daemon under
systemd, a file) it is one JSON object per line, so the records can be shipped and queried.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]

_configured = False


def configure_logging(level: int | str = logging.INFO, json: bool | None = None) -> None:
    """Configure structlog once for this process.

    Args:
        level: minimum level that is emitted.
        json: force JSON (True) or console (False) rendering; None picks console on a TTY.
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
    _configured = True


def get_logger(name: str) -> Any:
    """Return a structlog logger bound to ``component=name``, configuring defaults on first use."""
    if not _configured:
        configure_logging()
    # A lazy proxy: it follows a later configure_logging() (e.g. the CLI's --log-json), unlike a
    # logger bound at import time.
    return structlog.get_logger(component=name)
