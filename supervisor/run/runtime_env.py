"""Ray's ``RAY_RUNTIME_ENV_HOOK`` for a run's command: the program's Ray job carries the run.

A verl trainer builds its worker groups in a ``TaskRunner`` actor, a Ray worker process that does not
inherit the command's environment. ``ray.init`` in the command calls this hook (Ray's own mechanism,
:func:`ray._private.worker._maybe_modify_runtime_env`) on the job's runtime_env; the job's env_vars
reach every worker process of the job, so the import hook and the run descriptor do too.
"""

from __future__ import annotations

import os
from typing import Any

from .descriptor import HOOK_DIR, NEXT_RUNTIME_ENV_HOOK_ENV, RUN_ENV, prepend_path

__all__ = ["propagate"]


def propagate(runtime_env: dict[str, Any] | None) -> dict[str, Any] | None:
    """``runtime_env`` with the run's variables added to its env_vars (the program's own win, except
    that the hook directory is put first on a PYTHONPATH the program sets)."""
    following = os.environ.get(NEXT_RUNTIME_ENV_HOOK_ENV)
    if following:
        from ray._common.utils import load_class  # what Ray loads RAY_RUNTIME_ENV_HOOK with

        runtime_env = load_class(following)(runtime_env)
    descriptor = os.environ.get(RUN_ENV)
    if not descriptor:
        return runtime_env
    runtime_env = dict(runtime_env or {})
    env_vars = dict(runtime_env.get("env_vars") or {})
    env_vars.setdefault(RUN_ENV, descriptor)
    # The job's PYTHONPATH replaces the raylet's in its workers: give them this process's (as the
    # daemon does for its actors), with the hook first.
    env_vars["PYTHONPATH"] = prepend_path(HOOK_DIR, env_vars.get("PYTHONPATH", os.environ.get("PYTHONPATH")))
    runtime_env["env_vars"] = env_vars
    return runtime_env
