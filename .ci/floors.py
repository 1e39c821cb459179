"""Print the floor of every runtime dependency in pyproject.toml as a pip requirement, ``name==floor``
(extras kept), one per line, for the second environment of the Makefile (``make verl-env``).

Two are left out, each tested otherwise: tensordict (``make test-tensordict-range`` runs its floor;
the second environment has the newest verl 0.9 allows) and torch (this machine installs no torch but
the CPU wheel of 2.13.0). The floors are read from pyproject.toml so that lowering one there is what
gets tested: there is no second list to forget.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

TESTED_ELSEWHERE = {"torch", "tensordict"}
_FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)")


def floors(pyproject: Path) -> list[str]:
    """``name[extras]==floor`` for each dependency with a ``>=`` floor; raises ValueError for one without."""
    out = []
    for requirement in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        match = _FLOOR.match(requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: dependency {requirement!r} has no >= floor to test")
        name, extras, floor = match.groups()
        if name.lower() not in TESTED_ELSEWHERE:
            out.append(f"{name}{extras or ''}=={floor}")
    return out


if __name__ == "__main__":
    print("\n".join(floors(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
