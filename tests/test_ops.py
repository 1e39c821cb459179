"""Checks of the operations material in ops/: Prometheus config and alert rules (with promtool),
alert unit-test coverage, metric names, and every YAML manifest.

promtool comes with Debian's ``prometheus`` package (``apt-get install prometheus``); these tests
fail without it rather than skip, so a CI machine lacking it cannot pass silently.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "ops"
ALERTS = OPS / "alerts.yml"
ALERTS_TEST = OPS / "alerts_test.yml"
PROMETHEUS_RULE = OPS / "kuberay/prometheusrule.yaml"
DOCS_URL = OPS / "docs_url"
SET_RUNBOOK_URLS = OPS / "set_runbook_urls.py"
RUNBOOKS = ROOT / "docs/operations/runbooks"

# The exported metrics (the design table): name -> (type, labels with their enumerated values, or
# None where any value is allowed).
EXPORTED: dict[str, tuple[str, dict[str, tuple[str, ...] | None]]] = {
    "supervisor_dispatch_duration_seconds": ("histogram", {"group": None, "method": None}),
    "supervisor_dispatch_failures_total": (
        "counter", {"group": None, "method": None, "reason": ("raised", "worker_failed", "group_failed")},
    ),
    "supervisor_resource_wait_seconds": ("histogram", {"pool": None}),
    "supervisor_pool_bundles": ("gauge", {"pool": None, "state": ("placed", "pending")}),
    "supervisor_init_attempts_total": ("counter", {"group": None, "outcome": ("ok", "raised", "timed_out", "died")}),
    "supervisor_workers": ("gauge", {"group": None, "state": ("running", "restarting", "failed")}),
    "supervisor_group_state": ("gauge", {"group": None, "state": ("running", "recovering", "failed", "stopped")}),
    "supervisor_worker_restarts_total": ("counter", {"group": None, "reason": ("died", "hung", "node_lost", "init_failed")}),
    "supervisor_failure_detection_seconds": ("histogram", {"group": None}),
    "supervisor_recovery_seconds": ("histogram", {"group": None}),
    "supervisor_placement_drift_workers": ("gauge", {"group": None}),
    "supervisor_placement_drift_events_total": ("counter", {"group": None}),
    "supervisor_restarts_in_window": ("gauge", {"group": None}),
    "supervisor_max_restarts": ("gauge", {"group": None}),
    "supervisor_build_info": ("gauge", {"version": None, "ray_version": None}),
    "supervisor_state_steps_since_snapshot": ("gauge", {"group": None}),
    "supervisor_state_diverged_replicas": ("gauge", {"group": None}),
    "supervisor_drains_total": ("counter", {"group": None, "outcome": ("handed_over", "no_capacity", "deadline_too_short", "ignored", "aborted")}),
}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job": None, "instance": None}
JOB = "ray-supervisor"

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"}


def series_names() -> dict[str, str]:
    """Every series name a query may use -> its metric family (histograms: _bucket, _sum, _count)."""
    names = {"up": "up"}
    for name, (kind, _labels) in EXPORTED.items():
        names[name] = name
        if kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[name + suffix] = name
    return names


def metric_names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and durations removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # grouping labels
    text = re.sub(r"\boffset\s+\w+", "", text)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_KEYWORDS or word in ("inf", "nan", "Inf", "NaN"):
            continue
        names.add(word)
    return names


def matchers_in(expr: str) -> list[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of every label matcher that follows a metric name."""
    found = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        for lm in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2)):
            found.append((m.group(1), lm.group(1), lm.group(2), lm.group(3)))
    return found


def load_yaml(path: Path) -> list:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def alert_rules() -> list[dict]:
    (doc,) = load_yaml(ALERTS)
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def find_promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH: install Debian's prometheus package (`apt-get install prometheus`; it "
            "provides /usr/bin/promtool, and these tests never start its service). CI's set-up must install it too.",
            pytrace=False,
        )
    return path


def run_promtool(*args: str) -> str:
    # From ops/, where the relative paths of the commands and of the files' rule_files resolve.
    proc = subprocess.run([find_promtool(), *args], cwd=OPS, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} exited {proc.returncode}:\n{output}"
    assert "SUCCESS" in output, output
    return output


# -- promtool ------------------------------------------------------------------------------------
def test_promtool_check_config() -> None:
    output = run_promtool("check", "config", "prometheus.yml")
    assert "SUCCESS: 1 rule files found" in output
    assert "FAILED" not in output


def test_promtool_check_rules() -> None:
    output = run_promtool("check", "rules", "alerts.yml")
    assert f"SUCCESS: {len(alert_rules())} rules found" in output


def test_promtool_test_rules() -> None:
    output = run_promtool("test", "rules", "alerts_test.yml")
    assert "FAILED" not in output


# -- alert rules -----------------------------------------------------------------------------------
def test_every_yaml_file_parses() -> None:
    files = sorted([*OPS.rglob("*.yml"), *OPS.rglob("*.yaml")])
    assert len(files) >= 8, files
    for path in files:
        docs = load_yaml(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), f"{path}: every document must be a mapping"


def test_alerts_are_the_expected_ones_with_for_severity_and_annotations() -> None:
    (doc,) = load_yaml(ALERTS)
    assert [g["name"] for g in doc["groups"]] == [JOB]
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), names
    for expected in (
        "SupervisorRestartStorm", "SupervisorRestartBudgetLow", "SupervisorGroupFailed", "SupervisorPlacementDrift", "SupervisorDispatchStalled",
        "SupervisorResourceWaitTooLong", "SupervisorDown",
    ):
        assert expected in names
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: needs a `for` duration"
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert set(annotations) >= {"summary", "description", "runbook", "runbook_url"}, name
        assert "$labels" in annotations["description"] or "$value" in annotations["description"], name
        assert len(annotations["runbook"]) > 40, f"{name}: the runbook should say what to do"


def test_alerts_use_only_exported_metrics_and_known_label_values() -> None:
    known = series_names()
    for rule in alert_rules():
        expr = rule["expr"]
        used = metric_names_in(expr)
        assert used, f"{rule['alert']}: no metric found in {expr!r}"
        unknown = used - known.keys()
        assert not unknown, f"{rule['alert']} uses metrics that are not exported: {sorted(unknown)}"
        for metric, label, op, value in matchers_in(expr):
            family = known[metric]
            labels = {**TARGET_LABELS, **(EXPORTED[family][1] if family in EXPORTED else {})}
            assert label in labels, f"{rule['alert']}: {metric} has no label {label!r}"
            if label == "job":
                assert value == JOB, f"{rule['alert']}: the scrape job is {JOB!r}"
            allowed = labels[label]
            if op == "=" and allowed is not None:
                assert value in allowed, f"{rule['alert']}: {metric}{{{label}={value!r}}} never exists ({allowed})"


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.99, sum by (le, group) (rate(foo_bucket{state="x y", job=~"a|b"}[5m] offset 1h))) > 30 and on (group) bar'
    assert metric_names_in(expr) == {"foo_bucket", "bar"}
    assert matchers_in(expr) == [("foo_bucket", "state", "=", "x y"), ("foo_bucket", "job", "=~", "a|b")]
    assert metric_names_in('absent(up{job="ray-supervisor"})') == {"up"}


def test_exported_metrics_match_the_registry() -> None:
    from supervisor.observability import metrics

    families = {}
    for family in metrics.REGISTRY.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        families[name] = family.type
    for name, (kind, _labels) in EXPORTED.items():
        assert families.get(name) == kind, f"{name} ({kind}) is not in supervisor.observability.metrics.REGISTRY: {families}"


def test_every_alert_has_a_firing_and_a_silent_test_case() -> None:
    (tests,) = load_yaml(ALERTS_TEST)
    assert tests["rule_files"] == ["alerts.yml"]
    firing: set[str] = set()
    silent: set[str] = set()
    for group in tests["tests"]:
        assert group.get("input_series"), group.get("name")
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
            for alert in case.get("exp_alerts") or []:
                assert alert["exp_labels"].get("severity"), case
                assert set(alert["exp_annotations"]) >= {"summary", "description", "runbook", "runbook_url"}, case
    names = {r["alert"] for r in alert_rules()}
    # promtool accepts a test of an alert that does not exist (it never fires): catch misspellings.
    assert (firing | silent) <= names, f"tests of unknown alerts: {sorted((firing | silent) - names)}"
    assert not names - firing, f"alerts without a firing test case: {sorted(names - firing)}"
    assert not names - silent, f"alerts without a non-firing test case: {sorted(names - silent)}"


# -- Prometheus, Grafana, systemd, Kubernetes ------------------------------------------------------
def test_prometheus_scrape_config() -> None:
    (config,) = load_yaml(OPS / "prometheus.yml")
    assert config["rule_files"] == ["alerts.yml"]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == JOB]
    assert job["scrape_interval"] == "15s"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert "127.0.0.1:9400" in targets


def test_grafana_provisioning() -> None:
    (ds_doc,) = load_yaml(OPS / "grafana/provisioning/datasources/prometheus.yml")
    (ds,) = ds_doc["datasources"]
    assert (ds["name"], ds["uid"], ds["type"], ds["url"]) == ("Prometheus", "prometheus", "prometheus", "http://127.0.0.1:9090")
    (dash_doc,) = load_yaml(OPS / "grafana/provisioning/dashboards/ray-supervisor.yml")
    (provider,) = dash_doc["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == JOB
    assert provider["options"]["foldersFromFilesStructure"] is False
    assert provider["options"]["path"]


def test_systemd_unit() -> None:
    settings: dict[str, list[str]] = {}
    for line in (OPS / "systemd/ray-supervisor.service").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    (exec_start,) = settings["ExecStart"]
    assert exec_start.startswith("/") and "supervisor start /etc/ray-supervisor/job.toml" in exec_start
    assert settings["KillMode"] == ["mixed"]
    assert settings["KillSignal"] == ["SIGTERM"]
    assert int(settings["TimeoutStopSec"][0]) >= 60
    assert settings["Restart"] == ["on-failure"]
    assert settings["RestartSec"]
    assert settings["RestartPreventExitStatus"] == ["2"]
    assert any(v.startswith("RAY_ADDRESS=") for v in settings["Environment"])
    assert settings["User"] and settings["User"] != ["root"]


def test_kuberay_manifests() -> None:
    from supervisor.daemon.spec import parse_spec

    (cluster,) = load_yaml(OPS / "kuberay/raycluster.yaml")
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    spec = cluster["spec"]
    assert "rayStartParams" in spec["headGroupSpec"]
    gpu_groups = [
        g for g in spec["workerGroupSpecs"]
        if any("nvidia.com/gpu" in c["resources"]["limits"] for c in g["template"]["spec"]["containers"])
    ]
    assert gpu_groups and all("rayStartParams" in g for g in gpu_groups)

    docs = {d["kind"]: d for d in load_yaml(OPS / "kuberay/supervisor-deployment.yaml")}
    deployment, service, config_map = docs["Deployment"], docs["Service"], docs["ConfigMap"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_ADDRESS"].endswith("-head-svc:6379") and env["RAY_ADDRESS"].startswith(cluster["metadata"]["name"])
    assert 9400 in [p["containerPort"] for p in container["ports"]]
    assert "livenessProbe" not in container  # a kubelet restart is a SIGTERM: it would tear the job down
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    mounted = {v["name"]: v for v in pod["spec"]["volumes"]}
    spec_mounts = [m for m in container["volumeMounts"] if mounted[m["name"]].get("configMap", {}).get("name") == config_map["metadata"]["name"]]
    assert [m["mountPath"] for m in spec_mounts] == ["/etc/ray-supervisor"]
    assert "/etc/ray-supervisor/job.toml" in " ".join(container["args"])
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert [p["port"] for p in service["spec"]["ports"]] == [9400]
    assert service["metadata"]["name"] == JOB  # a ServiceMonitor's job label is the Service's name

    # Token authentication on every Ray process: head, workers and the supervisor's pod, one Secret.
    ray_containers = [
        *spec["headGroupSpec"]["template"]["spec"]["containers"],
        *(c for g in spec["workerGroupSpecs"] for c in g["template"]["spec"]["containers"]),
        container,
    ]
    for c in ray_containers:
        auth = {e["name"]: e for e in c.get("env", [])}
        assert auth["RAY_AUTH_MODE"]["value"] == "token", c["name"]
        assert auth["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "rlhf-ray-auth", "key": "auth_token"}, c["name"]

    # The spec in the ConfigMap is valid (classes imported from the repository's examples).
    job = parse_spec(config_map["data"]["job.toml"], source="ConfigMap job.toml", base_dir=ROOT, check_imports=True)
    assert (job.metrics.host, job.metrics.port) == ("0.0.0.0", 9400)
    assert job.ray.address is None  # RAY_ADDRESS from the Deployment


def test_importing_the_package_leaves_other_metrics_their_created_series() -> None:
    """prometheus-client's disable_created_metrics() is process-wide; our exposition drops our own
    `_created` series instead, so another library's default registry keeps them."""
    import subprocess
    import sys

    program = (
        "import prometheus_client as pc\n"
        "import supervisor.observability.metrics as m\n"
        "c = pc.Counter('other_library_calls', 'a metric of another library')\n"
        "c.inc()\n"
        "m.DISPATCH_FAILURES.labels(group='g', method='f', reason='raised').inc()\n"
        "ours = pc.generate_latest(m.EXPOSED).decode()\n"
        "theirs = pc.generate_latest(pc.REGISTRY).decode()\n"
        "assert 'supervisor_dispatch_failures_total{' in ours and '_created' not in ours, ours\n"
        "assert 'other_library_calls_created' in theirs, theirs\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_ops_readme_gives_every_alert_with_its_for_duration() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \| (?:critical|warning) \|$", (OPS / "README.md").read_text(), re.M))
    rules = {r["alert"]: r for r in alert_rules()}
    assert set(rows) == set(rules)
    for name, condition in rows.items():
        said = re.findall(r"for (\d+) (min|s)\b", condition)
        assert said, f"{name}: the README does not say for how long"
        amount, unit = said[-1]
        assert f"{amount}{'m' if unit == 'min' else 's'}" == str(rules[name]["for"]), f"{name}: README says {condition!r}, the rule for: {rules[name]['for']}"


def test_aggregating_alerts_keep_the_supervisor_apart() -> None:
    """Two jobs with a group of the same name on one Prometheus must not be summed together."""
    for rule in alert_rules():
        for labels in re.findall(r"by \(([^)]*)\)", rule["expr"]):
            names = {n.strip() for n in labels.split(",")}
            assert "supervisor" in names or "le" in names and len(names) == 1, f"{rule['alert']}: by ({labels}) merges supervisors"


def test_the_prometheus_rule_carries_exactly_the_alert_rules() -> None:
    (rule,) = load_yaml(OPS / "kuberay/prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    (alerts,) = load_yaml(OPS / "alerts.yml")
    assert rule["spec"] == alerts, "regenerate kuberay/prometheusrule.yaml from alerts.yml (spec: alerts.yml as it is)"


def test_the_ray_job_runs_the_daemon_once_on_its_head_with_a_valid_spec() -> None:
    from supervisor.daemon.spec import parse_spec

    docs = {d["kind"]: d for d in load_yaml(OPS / "kuberay/rayjob.yaml")}
    job, config_map = docs["RayJob"], docs["ConfigMap"]
    assert (job["apiVersion"], job["spec"]["backoffLimit"], job["spec"]["shutdownAfterJobFinishes"]) == ("ray.io/v1", 0, True)
    assert job["spec"]["entrypoint"].split()[:3] == ["supervisor", "start", "/etc/ray-supervisor/job.toml"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (container,) = head["containers"]
    volumes = {v["name"]: v for v in head["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if volumes[m["name"]].get("configMap", {}).get("name") == config_map["metadata"]["name"]]
    assert mount["mountPath"] == "/etc/ray-supervisor"
    workers = [c for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] for c in g["template"]["spec"]["containers"]]
    for c in [container, *workers, *job["spec"]["submitterPodTemplate"]["spec"]["containers"]]:
        auth = {e["name"]: e for e in c["env"]}
        assert auth["RAY_AUTH_MODE"]["value"] == "token", c["name"]
        assert auth["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "rlhf-ray-auth", "key": "auth_token"}, c["name"]
    spec = parse_spec(config_map["data"]["job.toml"], source="ConfigMap job.toml", base_dir=ROOT, check_imports=True)
    assert spec.ray.address is None and spec.driver is not None  # a finite job: its driver returns


# -- runbook pages and their links -----------------------------------------------------------------
def kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def docs_base(path: Path = DOCS_URL) -> str:
    """The one line of ``docs_url`` that is not a comment."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1, f"{path}: expected one address, got {lines}"
    return lines[0]


def runbook_problems(rules: list[dict], base: str, runbooks: Path) -> list[str]:
    """What is wrong with the alerts' runbook links and pages: each alert's ``runbook_url`` is
    ``<base>operations/runbooks/<kebab name>/``, its page exists and is titled with its name, every
    page but index.md belongs to an alert, and the index lists every alert with its severity."""
    problems = []
    for rule in rules:
        name, slug = rule["alert"], kebab(rule["alert"])
        want = f"{base}operations/runbooks/{slug}/"
        if rule["annotations"].get("runbook_url") != want:
            problems.append(
                f"{name}: runbook_url {rule['annotations'].get('runbook_url')!r}, expected {want!r}"
            )
        page = runbooks / f"{slug}.md"
        if not page.is_file():
            problems.append(f"{name}: no page {page}")
        elif page.read_text().splitlines()[:1] != [f"# {name}"]:
            problems.append(f"{name}: {page.name} does not start with '# {name}'")
    slugs = {kebab(r["alert"]) for r in rules}
    problems += [
        f"{p.name} belongs to no alert"
        for p in sorted(runbooks.glob("*.md"))
        if p.stem not in slugs | {"index"}
    ]
    index = runbooks / "index.md"
    rows = re.findall(
        r"^\| \[(\w+)\]\(([\w-]+)\.md\) \| (critical|warning) \| \S.* \|$",
        index.read_text() if index.is_file() else "",
        re.M,
    )
    listed = {name: (link, severity) for name, link, severity in rows}
    for rule in rules:
        want = (kebab(rule["alert"]), rule["labels"]["severity"])
        if listed.get(rule["alert"]) != want:
            problems.append(
                f"index.md: {rule['alert']} listed as {listed.get(rule['alert'])}, expected a row [{rule['alert']}]({want[0]}.md) | {want[1]}"
            )
    return problems


def test_kebab_case() -> None:
    assert kebab("SupervisorRestartStorm") == "supervisor-restart-storm"
    assert kebab("SupervisorResourceWaitTooLong") == "supervisor-resource-wait-too-long"


def test_every_alert_links_its_runbook_page_and_every_page_belongs_to_an_alert() -> None:
    base = docs_base()
    assert re.fullmatch(r"https?://[^\s\"'#]+/", base), (
        f"{DOCS_URL}: the base must be an http(s) address ending in /: {base!r}"
    )
    assert RUNBOOKS.is_dir(), RUNBOOKS
    assert runbook_problems(alert_rules(), base, RUNBOOKS) == []


def test_the_runbook_check_catches_broken_copies(tmp_path: Path) -> None:
    rules, base = alert_rules(), docs_base()
    first, last = kebab(rules[0]["alert"]), kebab(rules[-1]["alert"])

    def broken(change) -> list[str]:
        copy = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        shutil.copytree(RUNBOOKS, copy)
        copied = yaml.safe_load(yaml.safe_dump(rules))
        change(copy, copied)
        return runbook_problems(copied, base, copy)

    def index_without_last(d: Path, r: list[dict]) -> None:
        lines = (d / "index.md").read_text().splitlines(keepends=True)
        (d / "index.md").write_text("".join(ln for ln in lines if f"({last}.md)" not in ln))

    def other_severity(d: Path, r: list[dict]) -> None:
        r[0]["labels"]["severity"] = "critical" if r[0]["labels"]["severity"] == "warning" else "warning"

    assert broken(lambda d, r: None) == []
    assert any(
        "runbook_url" in p
        for p in broken(
            lambda d, r: r[0]["annotations"].update(runbook_url=f"{base}operations/runbooks/{first}")
        )
    )
    assert any("runbook_url" in p for p in broken(lambda d, r: r[1]["annotations"].pop("runbook_url")))
    assert any("no page" in p for p in broken(lambda d, r: (d / f"{last}.md").unlink()))
    assert any(
        "does not start" in p for p in broken(lambda d, r: (d / f"{first}.md").write_text("# Another\n"))
    )
    assert any(
        "belongs to no alert" in p
        for p in broken(lambda d, r: (d / "supervisor-gone.md").write_text("# SupervisorGone\n"))
    )
    assert any("index.md" in p for p in broken(index_without_last))
    assert any("index.md" in p for p in broken(other_severity))


def test_the_prometheus_rule_carries_the_runbook_urls() -> None:
    (rule,) = load_yaml(PROMETHEUS_RULE)
    in_rule = {
        r["alert"]: r["annotations"].get("runbook_url")
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert in_rule == {r["alert"]: r["annotations"]["runbook_url"] for r in alert_rules()}


def test_the_alert_tests_expect_the_runbook_urls() -> None:
    urls = {r["alert"]: r["annotations"]["runbook_url"] for r in alert_rules()}
    (tests,) = load_yaml(ALERTS_TEST)
    expected = [
        (case["alertname"], alert["exp_annotations"].get("runbook_url"))
        for group in tests["tests"]
        for case in group.get("alert_rule_test", [])
        for alert in case.get("exp_alerts") or []
    ]
    assert expected and all(url == urls[name] for name, url in expected), expected


def copy_ops(tmp_path: Path) -> Path:
    """The files set_runbook_urls.py reads and writes, copied under ``tmp_path``."""
    ops = tmp_path / "ops"
    (ops / "kuberay").mkdir(parents=True)
    for name in ("docs_url", "alerts.yml", "alerts_test.yml", "kuberay/prometheusrule.yaml"):
        shutil.copy(OPS / name, ops / name)
    return ops


def set_runbook_urls(ops: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SET_RUNBOOK_URLS), "--ops", str(ops), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_setting_the_runbook_urls_again_changes_nothing(tmp_path: Path) -> None:
    ops = copy_ops(tmp_path)
    before = {p: p.read_bytes() for p in ops.rglob("*") if p.is_file()}
    check = set_runbook_urls(ops, "--check")
    assert check.returncode == 0, (
        f"the committed files are out of date: run python ops/set_runbook_urls.py\n{check.stdout}{check.stderr}"
    )
    run = set_runbook_urls(ops)
    assert run.returncode == 0, run.stdout + run.stderr
    assert {p: p.read_bytes() for p in ops.rglob("*") if p.is_file()} == before


def test_setting_the_runbook_urls_follows_a_new_base_and_touches_nothing_else(tmp_path: Path) -> None:
    ops = copy_ops(tmp_path)
    old_base, new_base = docs_base(), "https://docs.example.org/ray-supervisor/v2/"
    (ops / "docs_url").write_text("# moved\n" + new_base.rstrip("/") + "\n")  # the trailing / is added
    # An alert and a test case without a link get one.
    for name in ("alerts.yml", "alerts_test.yml"):
        lines = (ops / name).read_text().splitlines(keepends=True)
        first = next(i for i, ln in enumerate(lines) if "runbook_url:" in ln)
        (ops / name).write_text("".join(lines[:first] + lines[first + 1 :]))
    before = {name: (ops / name).read_text() for name in ("alerts.yml", "alerts_test.yml")}

    check = set_runbook_urls(ops, "--check")
    assert check.returncode == 1 and "out of date" in check.stdout, check.stdout + check.stderr
    assert {name: (ops / name).read_text() for name in before} == before, "--check wrote"
    run = set_runbook_urls(ops)
    assert run.returncode == 0, run.stdout + run.stderr

    new_rules = [r for g in yaml.safe_load((ops / "alerts.yml").read_text())["groups"] for r in g["rules"]]
    assert [r["annotations"]["runbook_url"] for r in new_rules] == [
        f"{new_base}operations/runbooks/{kebab(r['alert'])}/" for r in new_rules
    ]
    for name, text in before.items():
        after = (ops / name).read_text()
        assert old_base not in after, name
        assert [ln for ln in after.splitlines() if "runbook_url:" not in ln] == [
            ln for ln in text.splitlines() if "runbook_url:" not in ln
        ], name
        assert after.count("runbook_url:") == text.count("runbook_url:") + 1, name  # the removed one is back
    (rule,) = load_yaml(ops / "kuberay/prometheusrule.yaml")
    assert rule["spec"] == yaml.safe_load((ops / "alerts.yml").read_text())
    proc = subprocess.run(
        [find_promtool(), "test", "rules", "alerts_test.yml"],
        cwd=ops,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set_runbook_urls(ops, "--check").returncode == 0


def test_setting_the_runbook_urls_refuses_a_bad_base(tmp_path: Path) -> None:
    ops = copy_ops(tmp_path)
    (ops / "docs_url").write_text("https://a.example/\nhttps://b.example/\n")
    run = set_runbook_urls(ops)
    assert run.returncode == 2 and "one line" in run.stderr, run.stdout + run.stderr
    assert (ops / "alerts.yml").read_bytes() == ALERTS.read_bytes()
