"""The options several commands share, each defined once: the cluster address, the JSON switch, the
log options, the spec file, the output format and ``--watch``/``--interval``.

Each is a decorator (or a factory of one, where commands word the help for what they do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

__all__ = [
    "address",
    "address_for_a_run",
    "address_to_check",
    "as_json",
    "log_options",
    "output",
    "spec_file",
    "watch_options",
]

F = TypeVar("F", bound=Callable[..., Any])


def _address(help: str) -> Callable[[F], F]:
    return click.option("--address", default=None, help=help)


# The cluster of the commands that read or act on supervisors already running.
address = _address("Ray cluster (default: $RAY_ADDRESS, else the cluster last started on this machine).")
# `start` and `run`, which start Ray themselves when no cluster is named.
address_for_a_run = _address("Ray cluster (default: $RAY_ADDRESS, then the spec's ray.address, else an embedded local Ray).")
# `info`, whose cluster section is optional.
address_to_check = _address("Ray cluster to check (default: $RAY_ADDRESS; none: skip).")


def as_json(help: str = "Print JSON instead of text.") -> Callable[[F], F]:
    """``--json``, passed as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def log_options(command: F) -> F:
    """``--log-level`` and ``--log-json/--log-console``, for the commands that run a daemon."""
    command = click.option("--log-json/--log-console", default=None, help="Log format (default: JSON unless stderr is a terminal).")(command)
    return click.option("--log-level", default="INFO", show_default=True, help="Minimum level of the structured logs.")(command)


def spec_file(help: str) -> Callable[[F], F]:
    """``--spec``, an optional spec file, passed as ``spec_path``."""
    return click.option("--spec", "spec_path", default=None, type=click.Path(dir_okay=False), help=help)


def output(choices: Sequence[str], help: str | None = None) -> Callable[[F], F]:
    """``-o/--output``, the first of ``choices`` by default."""
    worded = {"help": help} if help is not None else {}  # click 8.0 cannot take help=None
    return click.option("-o", "--output", type=click.Choice(list(choices)), default=choices[0], show_default=True, **worded)


def watch_options(watch_help: str, interval_help: str) -> Callable[[F], F]:
    """``--watch/-w`` and ``--interval`` (seconds, passed as ``interval_s``), for the commands that can
    show their report again until interrupted."""

    def decorate(command: F) -> F:
        command = click.option("--interval", "interval_s", default=2.0, show_default=True, type=click.FloatRange(min=0.1), help=interval_help)(command)
        return click.option("--watch", "-w", is_flag=True, help=watch_help)(command)

    return decorate
