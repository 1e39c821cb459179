"""The import hook of ``supervisor run`` (this directory is first on the PYTHONPATH of a run's processes).

Python imports ``sitecustomize`` at start-up from the first directory on ``sys.path`` that has one:
this one. It does two things, and nothing else, so that a process that never imports verl pays
only for this file:

1. outside a run (no ``SUPERVISOR_RUN`` in the environment) nothing; inside one, it puts a finder on
   ``sys.meta_path`` that waits for ``verl.single_controller.ray``. Right after that module has run,
   and before its importer sees it, the finder calls :func:`supervisor.run.child.arm_verl`, which
   replaces verl's ``RayWorkerGroup`` and ``RayResourcePool`` by the supervised ones
   (``supervisor.integrations.verl.patch.install``) and installs the run's group host. So
   ``from verl.single_controller.ray import RayWorkerGroup`` anywhere in the program gets the
   supervised class;
2. it runs the ``sitecustomize`` this one shadows (the next one on ``sys.path``: a distribution's or
   the user's), so the environment behaves as it did without the run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TARGET = "verl.single_controller.ray"


class _ArmAfter(importlib.abc.Loader):
    """Runs the real loader, then arms the run: the module is complete, its importer not yet back."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._loader.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        self._loader.exec_module(module)
        from supervisor.run.child import arm_verl

        arm_verl()


class _VerlFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # once; and the other finders below must not find this one
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ArmAfter(spec.loader)
        return spec


def _run_next_sitecustomize() -> None:
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # what `import sitecustomize` finds from now on
    spec.loader.exec_module(module)


if os.environ.get("SUPERVISOR_RUN"):
    sys.meta_path.insert(0, _VerlFinder())
_run_next_sitecustomize()
