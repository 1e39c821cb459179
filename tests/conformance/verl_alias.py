"""An import hook that makes ``verl`` and ``verl.*`` resolve to ``supervisor.compat.verl`` and its modules.

Installed first on ``sys.meta_path``, so it wins over a real verl installed in the environment or found
on ``sys.path`` (verl's source distribution holds the ``verl`` package next to its ``tests``). A verl
module the compat layer does not provide fails to import (``ModuleNotFoundError``) instead of falling
through to the real one. ``import verl.x`` binds the very module object ``supervisor.compat.verl.x``
(its ``__name__`` stays the compat one), so Ray pickles every class and function by its real module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

ALIASED = "verl"
TARGET = "supervisor.compat.verl"


def target_name(fullname: str) -> str | None:
    """The compat module ``fullname`` (``verl`` or ``verl.*``) stands for, or None for other names."""
    if fullname == ALIASED or fullname.startswith(ALIASED + "."):
        return TARGET + fullname[len(ALIASED) :]
    return None


class VerlAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``verl.*``; loading it imports the compat module and puts that in ``sys.modules``."""

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None):
        target_module = target_name(fullname)
        if target_module is None:
            return None
        if importlib.util.find_spec(target_module) is None:
            # Never let the import fall through to another finder (a real verl).
            raise ModuleNotFoundError(f"No module named {fullname!r} ({target_module} does not exist)", name=fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a throwaway module; exec_module replaces it

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns whatever sys.modules holds under the name after exec_module.
        sys.modules[module.__name__] = importlib.import_module(target_name(module.__name__))


_FINDER = VerlAliasFinder()


def install() -> None:
    """Puts the finder first on ``sys.meta_path`` (idempotent) and drops any real verl already imported."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    sys.meta_path.insert(0, _FINDER)
    for name in [n for n in sys.modules if target_name(n) is not None]:
        if getattr(sys.modules[name], "__name__", "") != target_name(name):
            del sys.modules[name]
