"""Fails when installing ray-supervisor disturbed a verl environment.

Usage: check_beside_verl.py BEFORE.txt, where BEFORE.txt is ``pip freeze --exclude-editable`` taken
just before ``pip install ray-supervisor``. Two checks, each printing what is wrong:

* every package of BEFORE.txt is still installed at the same version (pip upgraded or downgraded
  nothing the environment had: none of verl's pins moved);
* ``pip check`` reports no version conflict. verl is installed without its heavy dependencies
  (datasets, peft, wandb...), so "verl ... requires X, which is not installed" lines are expected and
  ignored; any other line is a failure.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

_MISSING = re.compile(r"^verl \S+ requires .*, which is not installed\.$")


def _frozen(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, sep, version = line.partition("==")
        if sep:
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def main(before_path: str) -> int:
    before = _frozen(Path(before_path).read_text())
    now = _frozen(subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True).stdout)
    problems = [f"{name}: {version} before, {now.get(name, 'not installed')} after installing ray-supervisor" for name, version in sorted(before.items()) if now.get(name) != version]
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    reported = [line.strip() for line in check.stdout.splitlines() if line.strip()]
    problems += [f"pip check: {line}" for line in reported if not _MISSING.match(line) and line != "No broken requirements found."]
    # pip check exits 1 for the expected missing packages too, so its status alone says nothing; but
    # a status without a report (pip itself broke) must not pass.
    if check.returncode != 0 and not reported:
        problems.append(f"pip check exited {check.returncode} without a report: {check.stderr.strip()[:300]}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"ray-supervisor installed beside verl: {len(before)} packages unchanged, pip check finds no conflict")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
