"""The Grafana dashboards: generated JSON matches the code, and every dashboard follows the conventions.

The conventions are the main rules of Grafana's dashboard linter plus two of this project's: no query
filters series by value (so every panel shows data once a supervisor served traffic), and every metric
a query uses is one that supervisor.observability.metrics defines (and not one that nothing produces yet).

Each check is a small function over the dashboard JSON that returns a list of problems; the negative
tests break a copy of a dashboard and expect the check to report it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dashboards import generate

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "dashboards"

DATASOURCE_UID = "${datasource}"
JOB_QUERY = "label_values(supervisor_build_info, job)"
INSTANCE_QUERY = 'label_values(supervisor_build_info{job=~"$job"}, instance)'
GROUP_QUERY = 'label_values(supervisor_workers{job=~"$job", instance=~"$instance"}, group)'
RATE_FUNCTIONS = {"rate", "irate", "increase"}
COUNTER_FUNCTIONS = RATE_FUNCTIONS
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")

BUILT = generate.build_all()
UIDS = sorted(BUILT)


# --- a small PromQL reader ----------------------------------------------------------------------------


class PromQLError(ValueError):
    pass


@dataclass
class Selector:
    metric: str
    matchers: list[tuple[str, str, str]]
    range: str | None = None
    functions: list[str] = field(default_factory=list)  # enclosing calls, innermost last

    @property
    def innermost(self) -> str | None:
        return self.functions[-1] if self.functions else None


@dataclass
class Query:
    selectors: list[Selector]
    comparisons: list[str]


_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_BINARY_KEYWORDS = {"and", "or", "unless", "bool", "atan2"}
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_ARITHMETIC = "+-*/%^"


def _closing(text: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket closing the one at ``start``, skipping quoted strings."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch in "\"'`":
            i = _string_end(text, i)
            continue
        if ch == open_char:
            depth += 1
        elif ch == close_char:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise PromQLError(f"unclosed {open_char!r} at {start}")


def _matchers(body: str) -> list[tuple[str, str, str]]:
    found, pos = [], 0
    body = body.strip()
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            raise PromQLError(f"bad label matcher in {{{body}}}")
        found.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
    return found


def parse_promql(expr: str) -> Query:
    """The vector selectors of ``expr`` with their matchers, ranges and enclosing function calls.

    Not a full parser: enough to check how metrics are used. Raises PromQLError on unbalanced
    brackets, unterminated strings and characters PromQL does not have.
    """
    selectors: list[Selector] = []
    comparisons: list[str] = []
    stack: list[str] = []  # per open paren: a function name, "" for grouping, "()" for a label list
    pending_call: str | None = None  # an aggregation waiting for its "(" after a by/without clause
    label_list_next = False
    last: Selector | None = None
    i = 0
    while i < len(expr):
        ch = expr[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "(":
            if label_list_next:
                stack.append("()")
                label_list_next = False
            else:
                stack.append(pending_call or "")
                pending_call = None
            last = None
            i += 1
        elif ch == ")":
            if not stack:
                raise PromQLError(f"unbalanced ')' at {i}")
            stack.pop()
            last = None
            i += 1
        elif ch == "{":
            end = _closing(expr, i, "{", "}")
            last = Selector("", _matchers(expr[i + 1 : end]), functions=[f for f in stack if f not in ("", "()")])
            selectors.append(last)
            i = end + 1
        elif ch == "[":
            end = _closing(expr, i, "[", "]")
            if last is None:
                raise PromQLError(f"range at {i} follows no selector")
            last.range = expr[i + 1 : end].strip()
            i = end + 1
        elif ch == "}" or ch == "]":
            raise PromQLError(f"unbalanced {ch!r} at {i}")
        elif ch in "\"'`":
            i = _string_end(expr, i)
            last = None
        elif ch == ",":
            last = None
            i += 1
        elif expr.startswith(_COMPARISONS, i):
            op = next(op for op in _COMPARISONS if expr.startswith(op, i))
            comparisons.append(op)
            last = None
            i += len(op)
        elif ch in _ARITHMETIC:
            last = None
            i += 1
        elif (m := _NUMBER.match(expr, i)) and not _IDENT.match(expr, i):
            last = None
            i = m.end()
        elif m := _IDENT.match(expr, i):
            word = m.group(0)
            i = m.end()
            rest = expr[i:].lstrip()
            if stack and stack[-1] == "()":
                continue  # a label name in by (...) and the like
            if word in _LABEL_LIST_KEYWORDS:
                label_list_next = rest.startswith("(")
                last = None
            elif word == "offset":
                duration = re.match(r"\s*-?(?:\d+[smhdwy]|\d+ms)+", expr[i:])
                if not duration:
                    raise PromQLError(f"offset without a duration at {i}")
                i += duration.end()
            elif word in _BINARY_KEYWORDS:
                last = None
            elif rest.startswith("("):
                pending_call = word
                last = None
            elif word in _AGGREGATIONS and re.match(r"(by|without)\b", rest):
                pending_call = word
                last = None
            else:
                last = Selector(word, [], functions=[f for f in stack if f not in ("", "()")])
                selectors.append(last)
                if rest.startswith("{"):
                    i = len(expr) - len(rest)
                    end = _closing(expr, i, "{", "}")
                    last.matchers = _matchers(expr[i + 1 : end])
                    i = end + 1
        else:
            raise PromQLError(f"unexpected {ch!r} at {i}")
    if stack:
        raise PromQLError("unclosed '('")
    return Query(selectors, comparisons)


def _string_end(text: str, start: int) -> int:
    quote = text[start]
    i = start + 1
    while i < len(text):
        if text[i] == "\\" and quote != "`":
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        i += 1
    raise PromQLError(f"unterminated string at {start}")


# --- walking a dashboard ----------------------------------------------------------------------------


def panels(dash: dict) -> Iterator[dict]:
    """Every panel, rows' collapsed panels included; rows themselves are not panels with queries."""
    for panel in dash.get("panels") or []:
        if panel.get("type") == "row":
            yield from panel.get("panels") or []
        else:
            yield panel


def targets(dash: dict) -> Iterator[tuple[dict, dict]]:
    for panel in panels(dash):
        for target in panel.get("targets") or []:
            yield panel, target


def variables(dash: dict) -> list[dict]:
    return (dash.get("templating") or {}).get("list") or []


def variable(dash: dict, name: str) -> dict | None:
    found = [v for v in variables(dash) if v.get("name") == name]
    return found[0] if len(found) == 1 else None


def where(panel: dict, target: dict | None = None) -> str:
    text = f"panel {panel.get('id')} {panel.get('title')!r}"
    return text if target is None else f"{text} target {target.get('refId')!r}"


def parsed(dash: dict) -> Iterator[tuple[dict, dict, Query]]:
    """Each target with its parsed query; targets that do not parse are check_promql_parses' problem."""
    for panel, target in targets(dash):
        try:
            yield panel, target, parse_promql(target.get("expr") or "")
        except PromQLError:
            continue


def _variable_query(var: dict) -> str | None:
    query = var.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    return query


# --- the checks -------------------------------------------------------------------------------------


def check_datasource_variable(dash: dict) -> list[str]:
    found = [v for v in variables(dash) if v.get("type") == "datasource"]
    if len(found) != 1:
        return [f"want exactly one datasource variable, found {len(found)}"]
    var = found[0]
    problems = []
    if var.get("name") != "datasource":
        problems.append(f"datasource variable is named {var.get('name')!r}, want 'datasource'")
    if var.get("query") != "prometheus":
        problems.append(f"datasource variable queries {var.get('query')!r}, want 'prometheus'")
    if len([v for v in variables(dash) if v.get("name") == "datasource"]) != 1:
        problems.append("more than one variable named 'datasource'")
    return problems


def check_panel_datasources(dash: dict) -> list[str]:
    problems = []
    for panel in panels(dash):
        uid = (panel.get("datasource") or {}).get("uid")
        if uid != DATASOURCE_UID:
            problems.append(f"{where(panel)}: datasource uid {uid!r}, want {DATASOURCE_UID!r}")
        for target in panel.get("targets") or []:
            uid = (target.get("datasource") or {}).get("uid")
            if uid != DATASOURCE_UID:
                problems.append(f"{where(panel, target)}: datasource uid {uid!r}, want {DATASOURCE_UID!r}")
    return problems


def _check_query_variable(dash: dict, name: str, query: str) -> list[str]:
    var = variable(dash, name)
    if var is None:
        return [f"want exactly one variable {name!r}"]
    problems = []
    if var.get("type") != "query":
        problems.append(f"variable {name!r} has type {var.get('type')!r}, want 'query'")
    if (var.get("datasource") or {}).get("uid") != DATASOURCE_UID:
        problems.append(f"variable {name!r} does not query the {DATASOURCE_UID} datasource")
    if _variable_query(var) != query:
        problems.append(f"variable {name!r} queries {_variable_query(var)!r}, want {query!r}")
    return problems


def check_job_instance_variables(dash: dict) -> list[str]:
    return _check_query_variable(dash, "job", JOB_QUERY) + _check_query_variable(dash, "instance", INSTANCE_QUERY)


def check_group_variable(dash: dict) -> list[str]:
    """A ``group`` variable, where there is one, lists the groups of the chosen supervisors."""
    if not any(v.get("name") == "group" for v in variables(dash)):
        return []
    return _check_query_variable(dash, "group", GROUP_QUERY)


def check_promql_parses(dash: dict) -> list[str]:
    problems = []
    for panel, target in targets(dash):
        expr = target.get("expr")
        if not expr:
            problems.append(f"{where(panel, target)}: no expr")
            continue
        try:
            query = parse_promql(expr)
        except PromQLError as exc:
            problems.append(f"{where(panel, target)}: {exc}: {expr}")
            continue
        if not query.selectors:
            problems.append(f"{where(panel, target)}: selects no metric: {expr}")
    return problems


def _is_bars(panel: dict) -> bool:
    return panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("drawStyle") == "bars"


def check_rate_interval(dash: dict) -> list[str]:
    """Rates over ``$__rate_interval``; bars (a count per bar) ``increase`` over their own ``$__interval``,
    with a minimum interval, so neighbouring bars do not count the same events twice."""
    problems = []
    for panel, target, query in parsed(dash):
        for sel in query.selectors:
            if _is_bars(panel) and sel.innermost in RATE_FUNCTIONS:
                if (sel.innermost, sel.range) != ("increase", "$__interval") or not panel.get("interval"):
                    problems.append(
                        f"{where(panel, target)}: a bar counts its own interval: increase({sel.metric}[$__interval]) "
                        f"with a minimum interval, not {sel.innermost}([{sel.range}])"
                    )
            elif sel.innermost in RATE_FUNCTIONS and sel.range != "$__rate_interval":
                problems.append(
                    f"{where(panel, target)}: {sel.innermost}({sel.metric}[{sel.range}]) "
                    "must use [$__rate_interval]"
                )
            elif sel.range is not None and sel.innermost not in RATE_FUNCTIONS:
                problems.append(f"{where(panel, target)}: range [{sel.range}] outside rate/irate/increase")
    return problems


def check_counters_in_rate(dash: dict) -> list[str]:
    problems = []
    for panel, target, query in parsed(dash):
        for sel in query.selectors:
            if sel.metric.endswith(COUNTER_SUFFIXES) and sel.innermost not in COUNTER_FUNCTIONS:
                problems.append(f"{where(panel, target)}: counter {sel.metric} used outside rate()/increase()")
    return problems


def check_panel_metadata(dash: dict) -> list[str]:
    problems = []
    for panel in panels(dash):
        if not (panel.get("title") or "").strip():
            problems.append(f"{where(panel)}: no title")
        if not (panel.get("description") or "").strip():
            problems.append(f"{where(panel)}: no description")
        if not ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit"):
            problems.append(f"{where(panel)}: no unit in fieldConfig.defaults")
    return problems


def check_panel_ids(dash: dict) -> list[str]:
    problems, seen = [], set()
    for panel in dash.get("panels") or []:  # rows too: they share the id space
        pid = panel.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            problems.append(f"{where(panel)}: no explicit integer id")
        elif pid in seen:
            problems.append(f"{where(panel)}: duplicate id {pid}")
        seen.add(pid)
        for inner in panel.get("panels") or []:
            if inner.get("id") in seen:
                problems.append(f"{where(inner)}: duplicate id {inner.get('id')}")
            seen.add(inner.get("id"))
    return problems


def check_target_ref_ids(dash: dict) -> list[str]:
    problems = []
    for panel in panels(dash):
        if not panel.get("targets"):
            problems.append(f"{where(panel)}: no targets")
        ref_ids = [t.get("refId") for t in panel.get("targets") or []]
        if not all(ref_ids):
            problems.append(f"{where(panel)}: a target without refId")
        duplicates = sorted({r for r in ref_ids if r and ref_ids.count(r) > 1})
        if duplicates:
            problems.append(f"{where(panel)}: duplicate refId {duplicates}")
    return problems


def _has(sel: Selector, label: str, value: str) -> bool:
    return (label, "=~", value) in sel.matchers


def check_job_instance_selectors(dash: dict) -> list[str]:
    problems = []
    for panel, target, query in parsed(dash):
        for sel in query.selectors:
            for label in ("job", "instance"):
                if not _has(sel, label, f"${label}"):
                    problems.append(f'{where(panel, target)}: {sel.metric} lacks {label}=~"${label}"')
    return problems


def check_group_selectors(dash: dict, group_metrics: set[str]) -> list[str]:
    """With a ``group`` variable, every query on a metric with a group label filters on it."""
    if variable(dash, "group") is None:
        return []
    problems = []
    for panel, target, query in parsed(dash):
        for sel in query.selectors:
            if _base_name(sel.metric) in group_metrics and not _has(sel, "group", "$group"):
                problems.append(f'{where(panel, target)}: {sel.metric} lacks group=~"$group"')
    return problems


def check_no_value_filters(dash: dict) -> list[str]:
    """Comparisons filter series by value: such a panel is empty exactly when nothing is wrong."""
    return [
        f"{where(panel, target)}: filters by value with {op!r}"
        for panel, target, query in parsed(dash)
        for op in query.comparisons
    ]


def check_aggregations_keep_the_supervisor(dash: dict) -> list[str]:
    """Every ``by (...)`` keeps ``supervisor``: two jobs' groups of one name on one Prometheus stay apart."""
    problems = []
    for panel, target in targets(dash):
        for labels in re.findall(r"\bby \(([^)]*)\)", target.get("expr", "")):
            if "supervisor" not in {name.strip() for name in labels.split(",")}:
                problems.append(f"{where(panel, target)}: by ({labels}) sums the groups of every supervisor together")
    return problems


def check_known_metrics(dash: dict, series: set[str]) -> list[str]:
    problems = []
    for panel, target, query in parsed(dash):
        for sel in query.selectors:
            if not sel.metric:
                problems.append(f"{where(panel, target)}: selector without a metric name")
            elif sel.metric not in series:
                problems.append(f"{where(panel, target)}: {sel.metric} is not a produced supervisor series")
    return problems


def check_dashboard_meta(dash: dict) -> list[str]:
    problems = []
    if not (dash.get("uid") or "").startswith("ray-supervisor-"):
        problems.append(f"uid {dash.get('uid')!r} does not start with 'ray-supervisor-'")
    if generate.TAG not in (dash.get("tags") or []):
        problems.append(f"tags {dash.get('tags')!r} lack {generate.TAG!r}")
    if not (dash.get("title") or "").strip():
        problems.append("no title")
    return problems


# --- what supervisor.observability.metrics defines ----------------------------------------------------------------


def _base_name(series: str) -> str:
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def _metric_definitions() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Name (without _total) -> (type, label names) of every metric in supervisor.observability.metrics."""
    from supervisor.observability import metrics

    found = {}
    for name in metrics.__all__:
        collector = getattr(metrics, name)
        kind = getattr(collector, "_type", None)
        if kind in ("counter", "gauge", "histogram"):
            found[collector._name] = (kind, tuple(collector._labelnames))
    return found


DEFINITIONS = _metric_definitions()


def _produced_series() -> set[str]:
    series = {"up"}
    for name, (kind, _labels) in DEFINITIONS.items():
        if kind == "counter":
            series.add(f"{name}_total")
        elif kind == "histogram":
            series.update(f"{name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        else:
            series.add(name)
    return series


PRODUCED_SERIES = _produced_series()
GROUP_METRICS = {name for name, (_kind, labels) in DEFINITIONS.items() if "group" in labels}


CHECKS: dict[str, Callable[[dict], list[str]]] = {
    "datasource_variable": check_datasource_variable,
    "panel_datasources": check_panel_datasources,
    "job_instance_variables": check_job_instance_variables,
    "group_variable": check_group_variable,
    "promql_parses": check_promql_parses,
    "rate_interval": check_rate_interval,
    "counters_in_rate": check_counters_in_rate,
    "panel_metadata": check_panel_metadata,
    "panel_ids": check_panel_ids,
    "target_ref_ids": check_target_ref_ids,
    "job_instance_selectors": check_job_instance_selectors,
    "group_selectors": lambda dash: check_group_selectors(dash, GROUP_METRICS),
    "no_value_filters": check_no_value_filters,
    "aggregations_keep_the_supervisor": check_aggregations_keep_the_supervisor,
    "known_metrics": lambda dash: check_known_metrics(dash, PRODUCED_SERIES),
    "dashboard_meta": check_dashboard_meta,
}


# --- tests: generated files -------------------------------------------------------------------------


def test_at_least_the_four_dashboards():
    assert {
        "ray-supervisor-overview",
        "ray-supervisor-dispatch",
        "ray-supervisor-placement",
        "ray-supervisor-recovery",
    } <= set(BUILT)


def test_committed_json_is_what_the_code_generates():
    committed = {p.stem: p for p in DASHBOARD_DIR.glob("ray-supervisor-*.json")}
    assert set(committed) == set(BUILT), "run: python -m dashboards.generate"
    for uid, data in BUILT.items():
        text = committed[uid].read_text(encoding="utf-8")
        assert json.loads(text) == data, f"{committed[uid].name} is stale: run python -m dashboards.generate"
        assert text == generate.render(data), f"{committed[uid].name} is not in the generated layout"


def test_generation_is_deterministic():
    assert generate.build_all() == BUILT


def test_check_mode_passes_on_the_committed_files(capsys):
    assert generate.main(["--check"]) == 0


def test_check_mode_catches_an_edited_file(tmp_path, capsys):
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "ray-supervisor-overview.json"
    path.write_text(path.read_text(encoding="utf-8").replace("Supervisor up", "Supervisor alive"), encoding="utf-8")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1
    assert "ray-supervisor-overview.json" in capsys.readouterr().err
    path.unlink()
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_check_mode_catches_a_stale_file(tmp_path, capsys):
    assert generate.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "ray-supervisor-gone.json").write_text("{}\n", encoding="utf-8")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1
    assert "no longer generated" in capsys.readouterr().err


# --- tests: conventions -----------------------------------------------------------------------------


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("uid", UIDS)
def test_convention(uid, check):
    problems = CHECKS[check](BUILT[uid])
    assert problems == [], "\n".join(problems)


def test_the_metric_table_is_read():
    """The cross-checks against supervisor.observability.metrics only mean something if they found its metrics."""
    assert DEFINITIONS["supervisor_workers"] == ("gauge", ("group", "state"))
    assert DEFINITIONS["supervisor_dispatch_duration_seconds"][0] == "histogram"
    assert "supervisor_worker_restarts_total" in PRODUCED_SERIES
    assert "supervisor_pool_bundles_count" not in PRODUCED_SERIES  # a gauge has no _count series
    assert {"supervisor_workers", "supervisor_recovery_seconds"} <= GROUP_METRICS
    assert "supervisor_pool_bundles" not in GROUP_METRICS


def test_every_panel_is_reachable_from_the_grid():
    for uid, dash in BUILT.items():
        for panel in panels(dash):
            pos = panel.get("gridPos") or {}
            assert pos.get("w", 0) > 0 and pos.get("h", 0) > 0, f"{uid} {where(panel)}"
            assert pos.get("x", 0) + pos["w"] <= 24, f"{uid} {where(panel)}"


def test_parser_reads_selectors_functions_and_ranges():
    query = parse_promql(
        'histogram_quantile(0.95, sum by (le, group) (rate(x_bucket{job=~"$job", a="b,c"}[$__rate_interval])))'
        ' / on (group) group_left sum(y) > 0'
    )
    assert [(s.metric, s.innermost, s.range) for s in query.selectors] == [
        ("x_bucket", "rate", "$__rate_interval"),
        ("y", "sum", None),
    ]
    assert query.selectors[0].matchers == [("job", "=~", "$job"), ("a", "=", "b,c")]
    assert query.selectors[0].functions == ["histogram_quantile", "sum", "rate"]
    assert query.comparisons == [">"]
    shifted = parse_promql('rate(x_total{a="b"}[$__rate_interval] offset 1h30m) * 2')
    assert [(s.metric, s.innermost, s.range) for s in shifted.selectors] == [
        ("x_total", "rate", "$__rate_interval")
    ]
    for broken in ("rate(x[5m]", "x{a=b}", 'x{a="b}', "sum(x))", "x[5m"):
        with pytest.raises(PromQLError):
            parse_promql(broken)


# --- tests: each check catches a broken dashboard ---------------------------------------------------


def _first_target(dash: dict, needle: str) -> dict:
    for _panel, target in targets(dash):
        if needle in target.get("expr", ""):
            return target
    raise AssertionError(f"no target contains {needle!r}")


def _break_datasource_variable(dash):
    dash["templating"]["list"].append({"name": "datasource2", "type": "datasource", "query": "prometheus"})


def _break_datasource_variable_query(dash):
    variable(dash, "datasource")["query"] = "loki"


def _break_panel_datasource(dash):
    dash["panels"][-1]["datasource"] = {"type": "prometheus", "uid": "prometheus-main"}


def _break_target_datasource(dash):
    _first_target(dash, "")["datasource"] = {"type": "prometheus", "uid": "$other"}


def _break_job_variable(dash):
    variable(dash, "job")["query"] = "label_values(up, job)"


def _break_instance_variable(dash):
    variable(dash, "instance")["type"] = "custom"


def _break_group_variable(dash):
    variable(dash, "group")["datasource"] = {"type": "prometheus", "uid": "prometheus-main"}


def _break_promql(dash):
    target = _first_target(dash, "sum by")
    target["expr"] = target["expr"] + ")"


def _break_rate_interval(dash):
    target = _first_target(dash, "[$__rate_interval]")
    target["expr"] = target["expr"].replace("[$__rate_interval]", "[5m]")


def _break_bar_interval(dash):
    target = _first_target(dash, "[$__interval]")
    target["expr"] = target["expr"].replace("[$__interval]", "[$__rate_interval]")


def _break_counter(dash):
    target = _first_target(dash, "_total")
    target["expr"] = 'sum by (supervisor, group) (supervisor_worker_restarts_total{job=~"$job", instance=~"$instance", group=~"$group"})'


def _break_histogram_count(dash):
    target = _first_target(dash, "_bucket")
    target["expr"] = 'sum(supervisor_recovery_seconds_count{job=~"$job", instance=~"$instance", group=~"$group"})'


def _break_description(dash):
    dash["panels"][0]["description"] = ""


def _break_unit(dash):
    del dash["panels"][-1]["fieldConfig"]["defaults"]["unit"]


def _break_title(dash):
    dash["panels"][0]["title"] = " "


def _break_panel_id(dash):
    dash["panels"][-1]["id"] = dash["panels"][0]["id"]


def _break_missing_panel_id(dash):
    del dash["panels"][0]["id"]


def _break_ref_id(dash):
    panel = dash["panels"][0]
    panel["targets"].append(dict(panel["targets"][0]))


def _break_supervisor_aggregation(dash):
    target = _first_target(dash, "by (supervisor, ")
    target["expr"] = target["expr"].replace("by (supervisor, ", "by (", 1)


def _break_instance_selector(dash):
    target = _first_target(dash, 'instance=~"$instance"')
    target["expr"] = target["expr"].replace(', instance=~"$instance"', "")


def _break_job_selector(dash):
    target = _first_target(dash, 'job=~"$job"')
    target["expr"] = target["expr"].replace('job=~"$job"', 'job="supervisor"')


def _break_group_selector(dash):
    target = _first_target(dash, 'group=~"$group"')
    target["expr"] = target["expr"].replace(', group=~"$group"', "")


def _break_value_filter(dash):
    target = _first_target(dash, "supervisor_workers")
    target["expr"] = target["expr"] + " > 0"


def _break_unproduced_metric(dash):
    target = _first_target(dash, "rate(")
    target["expr"] = 'sum(rate(supervisor_pool_bundles_count{job=~"$job", instance=~"$instance"}[$__rate_interval]))'


def _break_misspelled_metric(dash):
    target = _first_target(dash, "supervisor_workers")
    target["expr"] = target["expr"].replace("supervisor_workers", "supervisor_worker")


def _break_tags(dash):
    dash["tags"] = []


BREAKAGES = [
    ("datasource_variable", "ray-supervisor-overview", _break_datasource_variable),
    ("datasource_variable", "ray-supervisor-dispatch", _break_datasource_variable_query),
    ("panel_datasources", "ray-supervisor-placement", _break_panel_datasource),
    ("panel_datasources", "ray-supervisor-recovery", _break_target_datasource),
    ("job_instance_variables", "ray-supervisor-overview", _break_job_variable),
    ("job_instance_variables", "ray-supervisor-dispatch", _break_instance_variable),
    ("group_variable", "ray-supervisor-recovery", _break_group_variable),
    ("promql_parses", "ray-supervisor-overview", _break_promql),
    ("rate_interval", "ray-supervisor-dispatch", _break_rate_interval),
    ("rate_interval", "ray-supervisor-recovery", _break_bar_interval),
    ("counters_in_rate", "ray-supervisor-overview", _break_counter),
    ("counters_in_rate", "ray-supervisor-recovery", _break_histogram_count),
    ("panel_metadata", "ray-supervisor-overview", _break_description),
    ("panel_metadata", "ray-supervisor-placement", _break_unit),
    ("panel_metadata", "ray-supervisor-dispatch", _break_title),
    ("panel_ids", "ray-supervisor-recovery", _break_panel_id),
    ("panel_ids", "ray-supervisor-overview", _break_missing_panel_id),
    ("target_ref_ids", "ray-supervisor-dispatch", _break_ref_id),
    ("job_instance_selectors", "ray-supervisor-placement", _break_instance_selector),
    ("job_instance_selectors", "ray-supervisor-overview", _break_job_selector),
    ("group_selectors", "ray-supervisor-dispatch", _break_group_selector),
    ("no_value_filters", "ray-supervisor-overview", _break_value_filter),
    ("aggregations_keep_the_supervisor", "ray-supervisor-recovery", _break_supervisor_aggregation),
    ("known_metrics", "ray-supervisor-placement", _break_unproduced_metric),
    ("known_metrics", "ray-supervisor-recovery", _break_misspelled_metric),
    ("dashboard_meta", "ray-supervisor-dispatch", _break_tags),
]


def test_every_check_has_a_breakage():
    assert {check for check, _uid, _break in BREAKAGES} == set(CHECKS)


@pytest.mark.parametrize(
    "check, uid, breakage", BREAKAGES, ids=[f"{c}-{b.__name__.removeprefix('_break_')}" for c, _u, b in BREAKAGES]
)
def test_check_catches_a_broken_copy(check, uid, breakage):
    dash = copy.deepcopy(BUILT[uid])
    breakage(dash)
    assert dash != BUILT[uid]
    assert CHECKS[check](dash), f"{check} missed {breakage.__name__} on {uid}"
    fired = [name for name, other in CHECKS.items() if other(dash)]
    assert fired == [check], f"{breakage.__name__} should break only {check}, broke {fired}"
    assert CHECKS[check](BUILT[uid]) == [], "the original must stay clean (the copy was deep)"
