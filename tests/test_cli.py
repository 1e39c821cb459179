"""The ``supervisor`` console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from supervisor import __version__
from supervisor.cli.commands import main


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_info_json_without_cluster():
    result = CliRunner().invoke(main, ["info", "--json"], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ray-supervisor"] == __version__
    assert "cluster_resources" not in data


def test_info_on_dead_address_is_one_clear_line():
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "info", "--address", "127.0.0.1:1"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == ["Error: no Ray cluster at 127.0.0.1:1: [Errno 111] Connection refused"]


def test_console_script_is_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "supervisor")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and __version__ in out.stdout
