"""What the embedded Ray and the exporter expose, against real processes: every listener of the
README's main job on loopback inside a network namespace that has an address of its own, token
authentication of the embedded Ray (and the commands on this machine that find its token), joining a
token cluster with ``[ray] auth_token_path``, and the metrics exporter over TLS.

No test here relies on ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``: each subprocess runs without it, as a
user's shell would.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from daemon_harness import BIN, TESTS_DIR, log_events
from example_run import TEST_HOST_IP, USER_ENV
from example_run import on_loopback as _on_loopback
from example_run import stop as _stop

from supervisor.daemon.auth import RUNTIME_DIR_ENV
from supervisor.daemon.loopback import LOOPBACK_ENV

REPO = TESTS_DIR.parent


def test_listener_addresses_are_judged_right():
    assert _on_loopback("127.0.0.1:80") and _on_loopback("[::1]:80") and _on_loopback("[::ffff:127.0.0.1]:80")
    assert not any(_on_loopback(a) for a in ("0.0.0.0:80", "*:80", "[::]:80", f"{TEST_HOST_IP}:80", "[::ffff:10.99.0.1]:80"))


def test_the_example_job_listens_on_loopback_only(example_run):
    """`supervisor start examples/rlhf/rlhf.toml` from a user's shell, in a namespace with an address
    of its own (the session's run of the example job, tests/example_run.py)."""
    if example_run.listeners is None:
        pytest.skip(example_run.netns_unavailable)
    # Ray, left to itself, would pick the test-host address there: the check below is not passed for
    # want of any other address.
    assert example_run.discovered_ip == TEST_HOST_IP
    assert example_run.returncode == 0, example_run.log_tail
    events = example_run.events
    assert [e["run_steps"] for e in events if e["event"] == "rlhf_done"] == [20]
    # GCS, 2 raylets with their object managers and agents, 6 workers, the KV actor, the daemon and
    # its exporter: far more than this many, on a run that really used the cluster.
    assert len(example_run.listeners) >= 15, example_run.listeners
    assert sorted(a for a in example_run.listeners if not _on_loopback(a)) == []
    (started,) = [e for e in events if e["event"] == "embedded_ray_started"]
    assert started["address"].startswith("127.0.0.1:")
    assert not Path(started["auth_token_path"]).exists(), "the token file outlived the embedded Ray"


# -- token authentication ----------------------------------------------------------------------

TOKEN_SPEC = """
[supervisor]
name = "{name}"
heartbeat_interval_s = 0.5
[ray]
{ray}
python_path = ["{tests}"]
[pools.p]
process_on_nodes = [1]
use_gpu = false
[groups.counters]
pool = "p"
class = "workers:CounterWorker"
probe_period_s = 1.0
[metrics]
port = 0
linger_s = 0
{metrics}
"""


def _write_spec(tmp_path: Path, name: str, ray: str = "num_cpus = 4", metrics: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(TOKEN_SPEC).format(name=name, ray=ray, tests=TESTS_DIR, metrics=metrics))
    return path


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ray-supervisor test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


def _wait_for_event(proc: subprocess.Popen, log: Path, event: str, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [e for e in log_events(log) if e.get("event") == event]
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode} before {event}: {log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {event} after {timeout_s}s: {log.read_text()[-3000:]}")


class EmbeddedDaemon:
    def __init__(self, proc: subprocess.Popen, log: Path, env: dict[str, str], name: str, address: str, token: Path, metrics: str, cert: Path):
        self.proc, self.log, self.env, self.name = proc, log, env, name
        self.address, self.token, self.metrics, self.cert = address, token, metrics, cert


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """A daemon on its own embedded Ray (token auth on), started from a user's shell, metrics over TLS."""
    tmp = tmp_path_factory.mktemp("embedded")
    cert, key = _self_signed(tmp)
    spec = _write_spec(tmp, "sv-token", metrics=f'tls_cert = "{cert}"\ntls_key = "{key}"')
    # Ray's temporary directory of its own, where Ray notes "the cluster this machine started last": the
    # other xdist worker (and anyone else on the machine) starts clusters too. Short: Ray's socket paths
    # go under it.
    ray_tmp = tempfile.mkdtemp(prefix="ray-sec-", dir="/tmp")
    env = {**USER_ENV, RUNTIME_DIR_ENV: str(tmp / "run"), "RAY_TMPDIR": ray_tmp}
    log = tmp / "daemon.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "supervisor"), "start", str(spec), "--log-json"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = _wait_for_event(proc, log, "embedded_ray_started")
        running = _wait_for_event(proc, log, "supervisor_running")
        # Commands name the cluster (RAY_ADDRESS): Ray's "last cluster started here" may be another's.
        env["RAY_ADDRESS"] = started["address"]
        yield EmbeddedDaemon(proc, log, env, "sv-token", started["address"], Path(started["auth_token_path"]), running["metrics"], cert)
    finally:
        _stop(proc)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _run(args: list[str], env: dict[str, str], timeout_s: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s)


def _supervisor(embedded: EmbeddedDaemon, *args: str, **env: str) -> subprocess.CompletedProcess:
    return _run([str(BIN / "supervisor"), *args], {**embedded.env, **env})


def _ray_driver(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = f"import ray; ray.init(address={address!r}); print('connected', ray.cluster_resources()['CPU'])"
    # A plain Ray driver needs the loopback variable to dial a loopback GCS at all. Three connection
    # attempts instead of Ray's twenty.
    return _run([sys.executable, "-c", code], {**env, LOOPBACK_ENV: "0", "RAY_gcs_server_port_wait_time_s": "3"})


def test_the_embedded_token_is_fresh_and_private(embedded):
    assert embedded.token.parent.parent == Path(embedded.env[RUNTIME_DIR_ENV])
    assert stat.S_IMODE(os.stat(embedded.token).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(embedded.token.parent).st_mode) == 0o700
    token = embedded.token.read_text()
    assert len(token) == 64 and int(token, 16)


def test_a_driver_without_the_token_is_refused(embedded):
    refused = _ray_driver(embedded.address, USER_ENV)
    assert refused.returncode != 0 and "connected" not in refused.stdout
    assert "Authentication token is missing or incorrect" in refused.stderr
    wrong = _ray_driver(embedded.address, {**USER_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})
    assert wrong.returncode != 0 and "Authentication token is missing or incorrect" in wrong.stderr
    # The same driver with the token gets in: the refusals above were about the token.
    allowed = _ray_driver(embedded.address, {**USER_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(embedded.token)})
    assert allowed.returncode == 0 and allowed.stdout.startswith("connected 4.0"), allowed.stderr[-2000:]


def test_commands_on_this_machine_find_the_token(embedded):
    status = _supervisor(embedded, "status")
    assert status.returncode == 0 and "sv-token" in status.stdout, status.stderr
    # Found as the cluster is: here, as the cluster this machine started last.
    env = {k: v for k, v in embedded.env.items() if k != "RAY_ADDRESS"}
    discovered = _run([str(BIN / "supervisor"), "status", "sv-token"], env)
    assert discovered.returncode == 0 and "sv-token" in discovered.stdout, discovered.stderr
    listed = _supervisor(embedded, "list", "--json")
    assert listed.returncode == 0 and [r["name"] for r in json.loads(listed.stdout)] == ["sv-token"], listed.stderr
    doctor = _supervisor(embedded, "doctor", "--json")
    assert doctor.returncode in (0, 1) and isinstance(json.loads(doctor.stdout), list), doctor.stderr
    collected = _supervisor(embedded, "gc", "--dry-run")
    assert collected.returncode == 0 and "nothing to collect" in collected.stdout, collected.stderr


def test_a_wrong_or_missing_token_is_one_line_and_exit_1(embedded, tmp_path):
    wrong = _supervisor(embedded, "status", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
    assert wrong.returncode == 1
    assert wrong.stderr.strip().splitlines() == [f"Error: the Ray cluster at {embedded.address} refused the token from Ray's RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH"]
    # Another runtime directory and no ~/.ray/auth_token (Ray writes one at any local ray.init()):
    # nothing on this machine names a token.
    missing = _supervisor(embedded, "status", **{RUNTIME_DIR_ENV: str(tmp_path / "elsewhere"), "HOME": str(tmp_path)})
    assert missing.returncode == 1
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith(f"Error: the Ray cluster at {embedded.address} requires a token and none was given: set RAY_AUTH_TOKEN_PATH")


def test_a_daemon_joins_a_token_cluster_with_auth_token_path(embedded, tmp_path):
    # Its own runtime directory and home, so that only the spec can give it a token.
    env = {**USER_ENV, RUNTIME_DIR_ENV: str(tmp_path / "run"), "HOME": str(tmp_path)}
    copy = tmp_path / "cluster-token"
    shutil.copy(embedded.token, copy)
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    for token, refusal in [(None, "requires a token and none was given"), (wrong, f"refused the token from the token file {wrong}")]:
        ray = f'address = "{embedded.address}"' + (f'\nauth_token_path = "{token}"' if token else "")
        result = _run([str(BIN / "supervisor"), "start", str(_write_spec(tmp_path, "sv-refused", ray=ray)), "--log-json"], env)
        assert result.returncode == 1
        (failed,) = [e for e in map(json.loads, filter(lambda s: s.startswith("{"), result.stderr.splitlines())) if e["event"] == "daemon_not_started"]
        assert refusal in failed["error"]
    log = tmp_path / "joiner.log"
    spec = _write_spec(tmp_path, "sv-joiner", ray=f'address = "{embedded.address}"\nauth_token_path = "{copy.name}"')
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "supervisor"), "start", str(spec), "--log-json"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_event(proc, log, "supervisor_running")
        status = _supervisor(embedded, "status", "sv-joiner")
        assert status.returncode == 0 and "sv-joiner" in status.stdout
    finally:
        _stop(proc)
    assert proc.returncode == 0


def test_metrics_over_tls(embedded):
    context = ssl.create_default_context(cafile=str(embedded.cert))
    host, port = embedded.metrics.rsplit(":", 1)
    # A client that connects and never starts its handshake holds up nobody else's scrape.
    with socket.create_connection((host, int(port)), timeout=10):
        with urllib.request.urlopen(f"https://{embedded.metrics}/metrics", context=context, timeout=5) as response:
            assert response.status == 200 and "supervisor_build_info" in response.read().decode()
    plain = http.client.HTTPConnection(host, int(port), timeout=10)
    with pytest.raises((OSError, http.client.HTTPException)):
        plain.request("GET", "/metrics")
        plain.getresponse().read()
    plain.close()


def test_stop_finds_the_token_and_the_runtime_directory_goes_with_the_embedded_ray(embedded):
    stopped = _supervisor(embedded, "stop", "sv-token")
    assert stopped.returncode == 0, stopped.stderr
    assert embedded.proc.wait(60) == 0
    assert not embedded.token.parent.exists()
