"""Make an unmodified verl program build supervised groups and pools: ``install()``.

Once ``verl.single_controller.ray.base`` is imported (at once if it is already), its
``RayWorkerGroup`` and ``RayResourcePool`` become :class:`SupervisedRayWorkerGroup` and
:class:`SupervisedRayResourcePool`, and so does every re-export of verl's originals in an already
imported verl module (``verl.single_controller.ray`` and any ``from ... import RayWorkerGroup`` made
earlier). Modules imported later copy the patched names. verl's ``ResourcePoolManager`` looks
``RayResourcePool`` up in its module's globals, so it builds supervised pools too.

``supervisor run`` calls :func:`install` from a sitecustomize in the program's process, before the
program imports anything: this module imports nothing of verl (nor torch) until verl is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any

from .originals import ORIGINAL_PREFIX, VERL_RAY_BASE

__all__ = ["install", "installed", "PATCHED_NAMES"]

_TRIGGERS = frozenset({VERL_RAY_BASE, "verl.single_controller.ray"})
PATCHED_NAMES = ("RayWorkerGroup", "RayResourcePool")

_lock = threading.RLock()
_finder: _PostImportFinder | None = None


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _patch_loaded()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... for tracebacks and tools
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders give verl's two modules."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _TRIGGERS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _PatchingLoader):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


def installed() -> bool:
    """Whether :func:`install` ran in this process."""
    return _finder is not None


def install() -> None:
    """Replace verl's RayWorkerGroup and RayResourcePool with the supervised ones, now if verl's
    module is imported, else as soon as it is. Idempotent."""
    global _finder
    with _lock:
        if _finder is None:
            _finder = _PostImportFinder()
            sys.meta_path.insert(0, _finder)
    if VERL_RAY_BASE in sys.modules:
        _patch_loaded()


def _patch_loaded() -> None:
    with _lock:
        base = sys.modules.get(VERL_RAY_BASE)
        if base is None:
            return
        originals = {}
        for name in PATCHED_NAMES:
            if not hasattr(base, ORIGINAL_PREFIX + name):  # first time: remember verl's own class
                setattr(base, ORIGINAL_PREFIX + name, getattr(base, name))
            originals[name] = getattr(base, ORIGINAL_PREFIX + name)
        # Imported only now (verl is loaded): they subclass and read verl's originals.
        from .supervised_group import SupervisedRayWorkerGroup
        from .supervised_pool import SupervisedRayResourcePool

        ours = {"RayWorkerGroup": SupervisedRayWorkerGroup, "RayResourcePool": SupervisedRayResourcePool}
        for module_name, module in list(sys.modules.items()):
            if module is None or not (module_name == "verl" or module_name.startswith("verl.")):
                continue
            for name, original in originals.items():
                if module.__dict__.get(name) is original:
                    setattr(module, name, ours[name])
