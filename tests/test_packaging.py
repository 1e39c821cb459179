"""What ships: ``supervisor export`` from the checkout, and the built wheel installed into a fresh venv
outside the checkout, where ``--help``, ``validate`` and ``export`` must work from the package alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from supervisor.cli.commands import main
from supervisor.cli.export import AssetBundle, asset_root, planned_files

ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_the_checkouts_assets_are_the_repositorys_directories():
    root = asset_root()
    assert (root / "dashboards").resolve() == ROOT / "dashboards"
    assert (root / "ops").resolve() == ROOT / "ops"


@pytest.mark.parametrize("bundle", list(AssetBundle))
def test_every_bundle_has_its_files(bundle):
    names = {str(p) for p in planned_files(bundle)}
    expected = {
        AssetBundle.DASHBOARDS: {p.name for p in (ROOT / "dashboards").glob("*.json")}
        | {"provisioning/dashboards/ray-supervisor.yml", "provisioning/datasources/prometheus.yml"},
        AssetBundle.ALERTS: {"alerts.yml", "alerts_test.yml", "prometheus.yml"},
        AssetBundle.SYSTEMD: {"ray-supervisor.service"},
        AssetBundle.KUBERAY: {p.name for p in (ROOT / "ops/kuberay").glob("*.yaml")} | {"README.md"},
    }[bundle]
    assert names == expected
    assert {"rayjob.yaml", "prometheusrule.yaml"} <= names or bundle is not AssetBundle.KUBERAY


def test_export_writes_once_refuses_to_clobber_and_overwrites_with_force(tmp_path):
    runner = CliRunner()
    first = runner.invoke(main, ["export", "kuberay", str(tmp_path / "k")])
    assert first.exit_code == 0, first.output
    assert (tmp_path / "k/rayjob.yaml").read_bytes() == (ROOT / "ops/kuberay/rayjob.yaml").read_bytes()
    again = runner.invoke(main, ["export", "kuberay", str(tmp_path / "k")])
    assert again.exit_code == 0 and again.output.strip() == f"6 file(s) in {tmp_path / 'k'} already up to date", again.output
    (tmp_path / "k/raycluster.yaml").write_text("# mine\n")
    (tmp_path / "k/README.md").unlink()
    refused = runner.invoke(main, ["export", "kuberay", str(tmp_path / "k")])
    assert refused.exit_code == 1
    assert refused.output.strip() == f"Error: {tmp_path / 'k/raycluster.yaml'} exists with other contents: give --force to overwrite"
    assert not (tmp_path / "k/README.md").exists(), "a refused export wrote something"
    forced = runner.invoke(main, ["export", "kuberay", str(tmp_path / "k"), "--force"])
    assert forced.exit_code == 0 and sorted(forced.output.splitlines()) == sorted(
        [f"wrote {tmp_path / 'k/raycluster.yaml'}", f"wrote {tmp_path / 'k/README.md'}", f"4 file(s) in {tmp_path / 'k'} already up to date"]
    )
    unknown = runner.invoke(main, ["export", "grafana", str(tmp_path)])
    assert unknown.exit_code == 2 and "'grafana' is not one of 'dashboards', 'alerts', 'systemd', 'kuberay'" in unknown.output


def test_the_exported_alerts_are_a_working_prometheus_config(tmp_path):
    assert CliRunner().invoke(main, ["export", "alerts", str(tmp_path)]).exit_code == 0
    for args in (["check", "config", "prometheus.yml"], ["test", "rules", "alerts_test.yml"]):
        out = subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr


def test_exported_dashboards_load_with_their_provisioning(tmp_path):
    assert CliRunner().invoke(main, ["export", "dashboards", str(tmp_path)]).exit_code == 0
    dashboards = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(dashboards) == 4 and all(d["uid"].startswith("ray-supervisor") and d["panels"] for d in dashboards)
    provider = yaml.safe_load((tmp_path / "provisioning/dashboards/ray-supervisor.yml").read_text())
    assert provider["providers"][0]["type"] == "file"


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout_s: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, f"{args}: {out.stdout[-2000:]}{out.stderr[-2000:]}"
    return out


def test_the_wheel_installed_outside_the_checkout_validates_and_exports(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    # Built from a copy of what the package is made of (setuptools' build/ in the checkout could
    # hold stale files), without build isolation: the test environment's setuptools builds it.
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for name in ("supervisor", "dashboards", "ops"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)], tmp_path, env)
    (wheel,) = wheels.glob("ray_supervisor-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert "supervisor/_assets/ops/kuberay/rayjob.yaml" in names and "supervisor/_assets/dashboards/ray-supervisor-overview.json" in names
    assert not any(n.endswith(".py") and "/_assets/" in n for n in names), "the assets' Python files are not part of the package"

    # A fresh venv that sees the test environment's dependencies (ray, torch, ...) but not its
    # ray-supervisor: the package under test is the wheel alone.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    purelib = Path(subprocess.check_output([venv / "bin/python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True).strip())
    (purelib / "test-env-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([str(venv / "bin/python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], tmp_path, env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(venv / "bin/python"), "-c", "import supervisor, sys; print(supervisor.__file__)"], work, env).stdout.strip()
    assert where.startswith(str(purelib)), f"imported {where}, not the wheel's copy"
    exe = str(venv / "bin/supervisor")
    assert "Fault-tolerant GPU worker groups on Ray." in _run([exe, "--help"], work, env).stdout
    shutil.copy(ROOT / "examples/rlhf/rlhf.toml", work / "job.toml")
    valid = _run([exe, "validate", "--no-imports", "--json", "job.toml"], work, env).stdout
    assert json.loads(valid)["valid"] is True
    _run([exe, "export", "dashboards", "grafana"], work, env)
    exported = sorted(p.name for p in (work / "grafana").glob("*.json"))
    assert exported == sorted(p.name for p in (ROOT / "dashboards").glob("*.json"))
    assert all(json.loads((work / "grafana" / n).read_text())["panels"] for n in exported)
    _run([exe, "export", "kuberay", "k8s"], work, env)
    assert {d["kind"] for d in yaml.safe_load_all((work / "k8s/rayjob.yaml").read_text()) if d} == {"ConfigMap", "RayJob"}
