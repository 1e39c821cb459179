"""Loopback pinning, token files and the runtime directory, the token a command presents, and the
spec fields of both (no cluster needed: test_security runs them against real Ray)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.daemon.auth import (
    AUTH_ENV_VARS,
    RUNTIME_DIR_ENV,
    RuntimeDir,
    TokenChoice,
    TokenSource,
    choose_token,
    find_local_token,
    present,
    restore_env,
    runtime_root,
    saved_env,
    token_file_problem,
    use_token,
    withdraw,
)
from supervisor.daemon.loopback import LOOPBACK_ENV, exposure_warning, is_loopback_host
from supervisor.daemon.spec import SpecError, parse_spec
from supervisor.errors import ConfigError


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A private runtime root of this test's own, and none of Ray's auth variables set. Afterwards
    the variables are put back and a Ray imported by other tests reads them again."""
    root = tmp_path / "run"
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(root))
    saved = saved_env()
    for name in saved:
        os.environ.pop(name, None)
    yield root
    restore_env(saved)


@pytest.mark.parametrize(
    "host, loopback",
    [("127.0.0.1", True), ("127.5.0.9", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("0.0.0.0", False), ("10.99.0.1", False), ("::", False), ("example.org", False), ("", False)],
)  # fmt: skip
def test_is_loopback_host(host, loopback):
    assert is_loopback_host(host) is loopback


def test_pin_to_loopback_holds_after_ray_was_imported():
    # A fresh interpreter that imports Ray first, without the variable, as a spec module would.
    code = (
        "import os, ray; from ray._private import services, ray_constants\n"
        "before = ray_constants.ENABLE_RAY_CLUSTER\n"
        "from supervisor.daemon.loopback import pin_to_loopback; pin_to_loopback()\n"
        "print(before, ray_constants.ENABLE_RAY_CLUSTER, services.get_node_ip_address(), os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'])"
    )
    env = {k: v for k, v in os.environ.items() if k != LOOPBACK_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["True", "False", "127.0.0.1", "0"]


def test_runtime_dir_holds_a_private_random_token(runtime):
    a, b = RuntimeDir.create("sv"), RuntimeDir.create("sv")
    assert a.path.parent == runtime and a.path.name.startswith("sv-") and a.path != b.path
    assert stat.S_IMODE(os.stat(runtime).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(a.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(a.token_path).st_mode) == 0o600
    token = a.token_path.read_text()
    assert len(token) == 64 and int(token, 16) and token != b.token_path.read_text()
    a.remove()
    assert not a.path.exists() and b.path.exists()


def test_runtime_root_refuses_a_directory_others_can_read(runtime):
    runtime.mkdir(mode=0o755)
    os.chmod(runtime, 0o755)
    with pytest.raises(ConfigError, match=r"is not private to this user .*mode 755"):
        runtime_root()


def test_a_published_token_is_found_by_address_while_its_daemon_lives(runtime):
    rd = RuntimeDir.create("sv")
    assert find_local_token("127.0.0.1:6379") is None  # not published yet
    rd.publish("127.0.0.1:6379")
    assert find_local_token("127.0.0.1:6379") == rd.token_path
    assert find_local_token("localhost:6379") == rd.token_path  # loopback spellings are one host
    assert find_local_token("127.0.0.1:6380") is None
    assert find_local_token("10.0.0.5:6379") is None
    # A daemon that was SIGKILLed left its directory: its cluster died with it.
    (rd.path / "cluster.json").write_text(json.dumps({"address": "127.0.0.1:6379", "pid": _dead_pid()}))
    assert find_local_token("127.0.0.1:6379") is None
    # ...and the next daemon to start removes it.
    fresh = RuntimeDir.create("sv")
    assert not rd.path.exists() and fresh.path.exists()


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_choose_token_order(runtime, monkeypatch, tmp_path):
    rd = RuntimeDir.create("sv")
    rd.publish("127.0.0.1:7000")
    spec_token = tmp_path / "token"
    assert choose_token("127.0.0.1:7000") == TokenChoice(TokenSource.EMBEDDED, rd.token_path)
    assert choose_token("127.0.0.1:7000", spec_token) == TokenChoice(TokenSource.SPEC, spec_token)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    none = choose_token("127.0.0.1:7001")
    assert none == TokenChoice(TokenSource.NONE) and not none.sends
    default = tmp_path / "home" / ".ray" / "auth_token"  # `ray get-auth-token --generate` writes it
    default.parent.mkdir(parents=True)
    default.write_text("y" * 64)
    assert choose_token("127.0.0.1:7001") == TokenChoice(TokenSource.RAY_DEFAULT, default)
    assert choose_token("127.0.0.1:7000").source is TokenSource.EMBEDDED
    # RAY_AUTH_MODE=token alone (what Ray's docs export on every node) names no token: the order goes on.
    os.environ["RAY_AUTH_MODE"] = "token"
    assert choose_token("127.0.0.1:7000", spec_token).source is TokenSource.SPEC
    os.environ["RAY_AUTH_TOKEN"] = "x" * 64
    assert choose_token("127.0.0.1:7000", spec_token) == TokenChoice(TokenSource.RAY_ENV)  # Ray's own token wins
    os.environ["RAY_AUTH_MODE"] = "disabled"  # Ray then sends nothing, whatever else is there
    disabled = choose_token("127.0.0.1:7000", spec_token)
    assert disabled.source is TokenSource.DISABLED and not disabled.sends and disabled.describe() == "RAY_AUTH_MODE=disabled"


def test_present_switches_token_mode_on_for_rays_own_token_variable_and_withdraw_undoes_it(runtime, tmp_path):
    token = tmp_path / "token"
    token.write_text("0" * 64)  # readable: a Ray imported by an earlier test may load it
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    choice = choose_token("127.0.0.1:7000")
    assert choice == TokenChoice(TokenSource.RAY_ENV, token)
    present(choice)
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
    withdraw()
    assert "RAY_AUTH_MODE" not in os.environ and os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
    # A token chosen from the spec is presented, and withdrawn before the next connection chooses.
    del os.environ["RAY_AUTH_TOKEN_PATH"]
    present(choose_token("127.0.0.1:7000", token))
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
    withdraw()
    assert not any(os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"))


def test_use_token_and_restore(runtime, tmp_path):
    os.environ["RAY_AUTH_TOKEN"] = "from-the-user"
    saved = saved_env()
    (tmp_path / "t").write_text("0" * 64)  # readable: a Ray imported by an earlier test may load it
    use_token(tmp_path / "t")
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "t")
    assert "RAY_AUTH_TOKEN" not in os.environ  # it would win over the file
    restore_env(saved)
    assert os.environ["RAY_AUTH_TOKEN"] == "from-the-user"
    assert "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ


def test_token_file_problem(tmp_path):
    good, empty = tmp_path / "good", tmp_path / "empty"
    good.write_text("abc\n")
    empty.write_text("\n")
    assert token_file_problem(good) is None
    assert token_file_problem(empty) == f"the token file {empty} is empty"
    assert token_file_problem(tmp_path / "nope") == f"no such file: {tmp_path / 'nope'}"
    assert token_file_problem(tmp_path) == f"no such file: {tmp_path}"


SPEC = '[supervisor]\nname = "sv"\n[pools.p]\nprocess_on_nodes = [1]\nuse_gpu = false\n[groups.g]\npool = "p"\nclass = "m:C"\n'


def _problems(text: str, base: Path) -> list[str]:
    try:
        parse_spec(SPEC + text, base_dir=base, check_imports=False)
    except SpecError as exc:
        return exc.problems
    return []


def test_spec_auth_token_path_is_relative_to_the_spec_and_must_be_readable(tmp_path):
    (tmp_path / "token").write_text("secret")
    spec = parse_spec(SPEC + '[ray]\naddress = "10.0.0.1:6379"\nauth_token_path = "token"\n', base_dir=tmp_path, check_imports=False)
    assert spec.path(spec.ray.auth_token_path) == tmp_path / "token"
    assert _problems('[ray]\nauth_token_path = "missing"\n', tmp_path) == [f"ray.auth_token_path: no such file: {tmp_path / 'missing'}"]
    assert _problems("[ray]\nauth_token_path = 3\n", tmp_path) == ["ray.auth_token_path: expected a string, got integer 3"]


def test_spec_metrics_tls_needs_both_files(tmp_path):
    (tmp_path / "cert.pem").write_text("x")
    (tmp_path / "key.pem").write_text("x")
    assert _problems('[metrics]\ntls_cert = "cert.pem"\ntls_key = "key.pem"\n', tmp_path) == []
    assert _problems('[metrics]\ntls_cert = "cert.pem"\n', tmp_path) == ["metrics.tls_key: required with metrics.tls_cert (HTTPS needs both)"]
    assert _problems('[metrics]\ntls_key = "key.pem"\ntls_cert = "nope.pem"\n', tmp_path) == [
        f"metrics.tls_cert: no such file: {tmp_path / 'nope.pem'}"
    ]


@pytest.mark.parametrize(
    "host, tls, warned",
    [("127.0.0.1", False, False), ("::1", False, False), ("0.0.0.0", False, True), ("10.1.2.3", False, True), ("0.0.0.0", True, False)],
)
def test_metrics_exposure_warning(host, tls, warned):
    warning = exposure_warning(host, tls)
    assert (warning is not None) is warned
    if warned:
        assert host in warning and "tls_cert" in warning


def test_a_cluster_without_authentication_gets_no_token_and_the_drivers_own_actors_live(tmp_path):
    """Ray's default token file lies around (a local ``ray.init`` wrote it), the cluster runs without
    authentication: presenting the token would make the GCS end every actor the driver owns."""
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("a" * 32 + "\n")
    code = (
        "import os, ray\n"
        "from supervisor.daemon.local_cluster import LocalCluster\n"
        "from supervisor.daemon.cluster import connect\n"
        "cluster = LocalCluster(initialize_head=True, head_node_args={'num_cpus': 1, 'include_dashboard': False})\n"
        "try:\n"
        "    connect(cluster.address)\n"
        "    owned = ray.remote(num_cpus=0)(type('Owned', (), {'pid': lambda self: os.getpid()})).remote()\n"
        "    print(ray.get(owned.pid.remote(), timeout=30) > 0, os.environ.get('RAY_AUTH_MODE'))\n"
        "finally:\n"
        "    ray.shutdown()\n"
        "    cluster.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV_VARS}
    env["HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["True", "None"], out.stdout
