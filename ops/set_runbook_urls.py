"""Write every alert's ``runbook_url`` from the docs site's base address in ``ops/docs_url``.

Prometheus reads no variables, so the links are literal: in ``alerts.yml``, in the expected
annotations of ``alerts_test.yml`` (promtool compares them exactly) and in ``kuberay/prometheusrule.yaml``.
An alert's link is ``<base>operations/runbooks/<its name in kebab case>/``: SupervisorRestartStorm's
is ``<base>operations/runbooks/supervisor-restart-storm/``, the page
``docs/operations/runbooks/supervisor-restart-storm.md`` of the MkDocs site (directory URLs).

``alerts.yml`` and ``alerts_test.yml`` are edited line by line: only ``runbook_url:`` lines change (one
is added at the end of an ``annotations:``/``exp_annotations:`` block that has none), so comments and
layout stay. ``kuberay/prometheusrule.yaml`` is then regenerated from ``alerts.yml`` (its comment
header kept), as ``ops/README.md`` describes. Running it again changes nothing.

    python ops/set_runbook_urls.py            # after editing ops/docs_url (stdlib and PyYAML)
    python ops/set_runbook_urls.py --check    # exit 1 when a file is not up to date; writes nothing
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

OPS = Path(__file__).resolve().parent
RUNBOOKS_PATH = "operations/runbooks/"  # under the docs site's base address

_NAME = re.compile(r"^\s*(?:-\s+)?(?:alert|alertname):\s*[\"']?(\w+)[\"']?\s*(?:#.*)?$")
_BLOCK = re.compile(r"^(\s*(?:-\s+)?)(?:exp_annotations|annotations):\s*(?:#.*)?$")
_URL = re.compile(r"^(\s*)runbook_url:")
_BASE = re.compile(r"https?://[^\s\"'\\#]+")


class RunbookUrlError(Exception):
    """A file this script edits is not laid out as it expects, or ``docs_url`` is not one address."""


def read_base(path: Path) -> str:
    """The base address in ``path``: its one line that is neither blank nor a comment, ending in ``/``."""
    lines = [
        ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    if len(lines) != 1 or not _BASE.fullmatch(lines[0]):
        raise RunbookUrlError(
            f"{path}: expected one line with the docs site's address (http(s)://...), got {lines}"
        )
    return lines[0] if lines[0].endswith("/") else lines[0] + "/"


def kebab(name: str) -> str:
    """``SupervisorRestartStorm`` -> ``supervisor-restart-storm``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


def runbook_url(base: str, alert: str) -> str:
    return f"{base}{RUNBOOKS_PATH}{kebab(alert)}/"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def set_urls(text: str, base: str) -> str:
    """``text`` (alerts.yml or alerts_test.yml) with the ``runbook_url`` of every annotations block set
    for the alert named above it (``alert:`` or ``alertname:``); nothing else changes."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    alert: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if m := _NAME.match(line):
            alert = m.group(1)
            continue
        m = _BLOCK.match(line)
        if m is None:
            continue
        if alert is None:
            raise RunbookUrlError(f"line {i}: an annotations block before any alert name")
        key_column = len(m.group(1))
        block: list[str] = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > key_column):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():  # blank lines after the block belong to what follows
            i -= 1
            block.pop()
        if not block:
            raise RunbookUrlError(f"line {i}: the annotations of {alert} are empty")
        entry_column = _indent(block[0])
        url_line = f'{" " * entry_column}runbook_url: "{runbook_url(base, alert)}"\n'
        found = [k for k, b in enumerate(block) if (u := _URL.match(b)) and len(u.group(1)) == entry_column]
        if len(found) > 1:
            raise RunbookUrlError(f"the annotations of {alert} have {len(found)} runbook_url lines")
        if found:
            k = found[0]
            rest = block[k + 1 :]
            if rest and rest[0].strip() and _indent(rest[0]) > entry_column:
                raise RunbookUrlError(f"the runbook_url of {alert} spans several lines: make it one")
            block[k] = url_line
        else:
            if not block[-1].endswith("\n"):
                block[-1] += "\n"
            block.append(url_line)
        out.extend(block)
    return "".join(out)


def _check_alerts(text: str, base: str, path: Path) -> None:
    doc = yaml.safe_load(text)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and rule.get("annotations", {}).get("runbook_url") != runbook_url(
                base, rule["alert"]
            ):
                raise RunbookUrlError(
                    f"{path}: {rule['alert']}'s runbook_url was not set: is its annotations block a mapping of one line per key?"
                )


def _check_tests(text: str, base: str, path: Path) -> None:
    doc = yaml.safe_load(text)
    for group in doc.get("tests", []):
        for case in group.get("alert_rule_test") or []:
            for alert in case.get("exp_alerts") or []:
                got = (alert.get("exp_annotations") or {}).get("runbook_url")
                if got != runbook_url(base, case["alertname"]):
                    raise RunbookUrlError(
                        f"{path}: a test case of {case['alertname']} expects runbook_url {got!r}"
                    )


def prometheus_rule(rule_text: str, alerts_text: str) -> str:
    """kuberay/prometheusrule.yaml: its comment header and document, with ``spec`` = alerts.yml."""
    header = "".join(ln for ln in rule_text.splitlines(keepends=True) if ln.startswith("#"))
    doc = next(d for d in yaml.safe_load_all(rule_text) if d)
    doc["spec"] = yaml.safe_load(alerts_text)
    return header + yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True)


def updated_files(ops: Path) -> dict[Path, tuple[str, str]]:
    """{path: (its text now, its text with the links set)} for the three files under ``ops``.

    Raises:
        RunbookUrlError: ``docs_url`` is not one address, or a file is not laid out as expected.
    """
    base = read_base(ops / "docs_url")
    alerts, tests, rule = ops / "alerts.yml", ops / "alerts_test.yml", ops / "kuberay/prometheusrule.yaml"
    now = {path: path.read_text() for path in (alerts, tests, rule)}
    new_alerts, new_tests = set_urls(now[alerts], base), set_urls(now[tests], base)
    _check_alerts(new_alerts, base, alerts)
    _check_tests(new_tests, base, tests)
    new = {alerts: new_alerts, tests: new_tests, rule: prometheus_rule(now[rule], new_alerts)}
    return {path: (now[path], new[path]) for path in now}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=Path, default=OPS, help="the ops directory (default: this script's)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a file is not up to date; write nothing"
    )
    args = parser.parse_args(argv)
    try:
        files = updated_files(args.ops)
    except (RunbookUrlError, OSError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stale = [path for path, (old, new) in files.items() if old != new]
    for path, (_old, new) in files.items():
        if path not in stale:
            print(f"{path}: up to date")
        elif args.check:
            print(f"{path}: out of date: run python {Path(__file__).name}")
        else:
            path.write_text(new)
            print(f"{path}: written")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
