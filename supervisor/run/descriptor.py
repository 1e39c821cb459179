"""What the ``supervisor run`` parent tells the processes of its command, through their environment (pure).

The command is an unmodified program: the run reaches it only through environment variables, which
its own processes inherit and which :mod:`.runtime_env` copies into the program's Ray job (so that a
verl ``TaskRunner`` actor, where verl builds its worker groups, gets them too):

* ``SUPERVISOR_RUN``: the :class:`RunDescriptor` as JSON (the supervisor's name, the owner id the
  parent claimed it with, the run spec's text);
* ``PYTHONPATH``: the import hook's directory first (:data:`HOOK_DIR`, its ``sitecustomize``);
* ``RAY_ADDRESS``: the cluster the parent connected to or started;
* ``RAY_RUNTIME_ENV_HOOK``: :func:`supervisor.run.runtime_env.propagate` (a hook of the user's own is
  kept in ``SUPERVISOR_RUN_NEXT_RUNTIME_ENV_HOOK`` and called first).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ..daemon.spec import SupervisorSpec, parse_spec

__all__ = ["RUN_ENV", "NEXT_RUNTIME_ENV_HOOK_ENV", "RUNTIME_ENV_HOOK", "HOOK_DIR", "RunDescriptor", "child_environment", "prepend_path", "run_spec", "named"]

RUN_ENV = "SUPERVISOR_RUN"
NEXT_RUNTIME_ENV_HOOK_ENV = "SUPERVISOR_RUN_NEXT_RUNTIME_ENV_HOOK"
RUNTIME_ENV_HOOK = "supervisor.run.runtime_env.propagate"  # Ray's RAY_RUNTIME_ENV_HOOK takes "module.function"
_RAY_HOOK_ENV = "RAY_RUNTIME_ENV_HOOK"

HOOK_DIR = str(Path(__file__).resolve().parent.parent / "integrations" / "verl" / "_child")
"""The directory whose ``sitecustomize.py`` arms the import hook in every process of a run."""


@dataclass(frozen=True)
class RunDescriptor:
    """A run as its command's processes see it.

    Attributes:
        name: the supervisor's name (its pools are ``<name>.<pool>``, its actors in ``supervisor.<name>``).
        owner: the owner id the parent claimed the supervisor with; the process that makes the groups
            claims again with it, which fences off the parent's heartbeat (see :mod:`supervisor.run`).
        spec_text: the run spec's TOML (None: no spec), parsed again where the groups are made: the
            spec file may not exist on that node.
        spec_source: where the text came from (named in its errors).
    """

    name: str
    owner: str
    spec_text: str | None = None
    spec_source: str = "<run spec>"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RunDescriptor | None:
        """The descriptor of the run this process belongs to (None: not under ``supervisor run``)."""
        raw = (os.environ if environ is None else environ).get(RUN_ENV)
        if not raw:
            return None
        data = json.loads(raw)
        return cls(**{k: data[k] for k in ("name", "owner", "spec_text", "spec_source") if k in data})


def prepend_path(entry: str, path: str | None) -> str:
    """``entry`` first in an os.pathsep-separated ``path`` (moved there if present, once)."""
    rest = [p for p in (path or "").split(os.pathsep) if p and p != entry]
    return os.pathsep.join([entry, *rest])


def child_environment(base: Mapping[str, str], descriptor: RunDescriptor, ray_address: str, hook_dir: str = HOOK_DIR) -> dict[str, str]:
    """The command's environment: ``base`` plus what the run adds (see the module docstring)."""
    env = dict(base)
    env[RUN_ENV] = descriptor.to_json()
    env["PYTHONPATH"] = prepend_path(hook_dir, base.get("PYTHONPATH"))
    env["RAY_ADDRESS"] = ray_address
    previous = base.get(_RAY_HOOK_ENV)
    if previous and previous != RUNTIME_ENV_HOOK:
        env[NEXT_RUNTIME_ENV_HOOK_ENV] = previous
    env[_RAY_HOOK_ENV] = RUNTIME_ENV_HOOK
    return env


def run_spec(descriptor: RunDescriptor) -> SupervisorSpec:
    """The run spec the descriptor carries (defaults when none), named as the descriptor says.

    Raises:
        SpecError: the text does not parse (the parent validated it: only a changed file can do that).
    """
    spec = parse_spec(descriptor.spec_text or "", source=descriptor.spec_source, check_imports=False, run=True)
    return named(spec, descriptor.name)


def named(spec: SupervisorSpec, name: str) -> SupervisorSpec:
    """``spec`` with the supervisor's name replaced (``--name``, or one made up for a spec without)."""
    return dataclasses.replace(spec, supervisor=dataclasses.replace(spec.supervisor, name=name))
