"""Started by every Python process that has this directory on ``PYTHONPATH``: the conformance run's
driver and the Ray processes it starts (which inherit the environment), before any user code runs.

Installs the verl alias, then runs the ``sitecustomize`` this one shadows, if the environment has one."""

import importlib.machinery
import importlib.util
import os
import sys

import verl_alias

verl_alias.install()

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
)
if _spec is not None and _spec.loader is not None:
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
