"""The exit status of ``supervisor run`` (pure): the command's, like a shell's, or the run's own."""

from __future__ import annotations

import enum
import os
import shutil

__all__ = ["RunExit", "shell_status", "command_problem"]


class RunExit(enum.IntEnum):
    """The codes ``supervisor run`` uses for itself (the command's own pass through unchanged).

    The conventions of ``env``, ``timeout`` and shells: 125 for a failure of the wrapper itself, so a
    command that exits 1 is never taken for a cluster that could not be reached.
    """

    USAGE = 2  # no command, a malformed spec, bad options (as every `supervisor` command)
    RUN_FAILED = 125  # the run could not start: the cluster is unreachable, the name is taken
    NOT_EXECUTABLE = 126
    NOT_FOUND = 127


def shell_status(returncode: int) -> int:
    """A child's status as a shell reports it: its exit code, or 128+N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def command_problem(command: list[str], environ_path: str | None = None) -> tuple[RunExit, str] | None:
    """Why ``command`` cannot be executed (checked before anything is started), or None."""
    program = command[0]
    if os.sep in program:
        if not os.path.exists(program):
            return RunExit.NOT_FOUND, f"{program}: no such file"
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return RunExit.NOT_EXECUTABLE, f"{program}: not executable"
        return None
    if shutil.which(program, path=environ_path) is None:
        return RunExit.NOT_FOUND, f"{program}: command not found"
    return None
