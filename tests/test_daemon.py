"""The daemon and its CLI against a real two-node cluster: `supervisor start` runs as a subprocess
(as users run it) against the module's cluster; the test process is a second driver that reads the
state record, the placement-group table and the actor table to check what the daemon did."""

from __future__ import annotations

import ast
import json
import re
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from daemon_harness import BIN, ENV, TESTS_DIR, log_events, wait_for_record


@pytest.fixture(scope="module")
def cluster():
    """Two nodes, 8 CPUs and 4 declared GPUs each (two supervisors fit); this process is a driver too."""
    import ray

    from supervisor.daemon.local_cluster import LocalCluster

    c = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 4, "include_dashboard": False})
    try:
        c.add_node(num_cpus=8, num_gpus=4)
        c.wait_for_nodes()
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False, namespace="daemon-tests")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def write_spec(
    tmp_path: Path, name: str, driver: str | None = None, extra_group: str = "", grace_s: float = 30.0, linger_s: float = 0,
    on_sigterm: str = "teardown", pool_extra: str = "", detached_grace_s: float = 86400.0, **group_opts: object,
) -> Path:  # fmt: skip
    driver_block = f'[driver]\nfunction = "daemon_drivers:count_steps"\n[driver.args]\n{driver}\n' if driver is not None else ""
    text = textwrap.dedent(
        f"""
        [supervisor]
        name = "{name}"
        heartbeat_interval_s = 0.5
        orphan_grace_s = {grace_s}
        detached_grace_s = {detached_grace_s}
        on_sigterm = "{on_sigterm}"
        [ray]
        python_path = ["{TESTS_DIR}"]
        [pools.p]
        process_on_nodes = [2, 2]
        max_colocate_count = 2
        {pool_extra}
        [groups.counters]
        pool = "p"
        """
    )
    group_opts = {"class": "workers:CounterWorker", "probe_period_s": 1.0, **group_opts}
    opts = "\n".join(f"{k} = {_toml_value(v)}" for k, v in group_opts.items())
    path = tmp_path / f"{name}.toml"
    path.write_text(text + opts + "\n" + extra_group + f"\n[metrics]\nport = 0\nlinger_s = {linger_s}\n" + driver_block)
    return path


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


class DaemonProcess:
    """`supervisor start SPEC --address ...` as a subprocess, JSON logs to a file."""

    def __init__(self, spec: Path, address: str, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(BIN / "supervisor"), "start", str(spec), "--address", address, "--log-json"],
            stdout=self._log, stderr=subprocess.STDOUT, env=ENV,
        )  # fmt: skip

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.flush()

    def events(self) -> list[dict]:
        return log_events(self.log_path)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


@pytest.fixture
def daemons(cluster):
    started: list[DaemonProcess] = []
    names: list[str] = []

    def start(spec: Path, name: str) -> DaemonProcess:
        d = DaemonProcess(spec, cluster.address, spec.with_suffix(f".{len(started)}.log"))
        started.append(d)
        names.append(name)
        return d

    yield start
    for d in started:
        d.stop()
    from supervisor.daemon.ownership import find_owned, remove_owned
    from supervisor.daemon.record import RecordStore

    for name in set(names):  # whatever a failed test left
        remove_owned(name, find_owned(name))
        RecordStore().delete(name)


def scrape(address: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "supervisor"), *args], capture_output=True, text=True, env=ENV, timeout=timeout_s)


def wait_record(name: str, state: str = "running", timeout_s: float = 90.0, daemon: DaemonProcess | None = None):
    if daemon is None:
        return wait_for_record(name, state=state, timeout_s=timeout_s)
    return wait_for_record(name, daemon.proc, state, timeout_s, daemon.log_path)


def live_state(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """Through the GCS tables: {placement-group name: id} and {actor name: actor id} of live ones."""
    import ray
    from ray._private import state
    from ray.util import placement_group_table

    from supervisor.daemon.record import RecordStore

    pgs = {
        str(info["name"]): pg_id
        for pg_id, info in placement_group_table().items()
        if info["state"] != "REMOVED" and str(info["name"]).startswith(f"{name}.")
    }
    record = RecordStore().get(name)
    actors = {}
    names = {"kv", "fence", *(n for g in record.groups.values() for n in [*g.actor_names, *(s.name for s in g.standbys)])} if record else set()
    for actor_name in sorted(names):
        try:  # by name within the supervisor's namespace: another supervisor may use the same names
            actor_id = ray.get_actor(actor_name, namespace=record.namespace)._actor_id.hex()
        except ValueError:
            continue
        if state.actors(actor_id).get("State") != "DEAD":
            actors[actor_name] = actor_id
    return pgs, actors


def assert_nothing_left(name: str, actor_ids: set[str], timeout_s: float = 15.0) -> None:
    """No placement group of ``name``, none of the actors ``actor_ids`` alive (GCS tables), no named actor
    in its namespace, no record. Actor ids, not names: two supervisors may use the same actor names."""
    from ray._private import state
    from ray.util import placement_group_table

    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    deadline = time.monotonic() + timeout_s
    while True:
        pgs = [info["name"] for info in placement_group_table().values() if info["state"] != "REMOVED" and str(info["name"]).startswith(f"{name}.")]
        actors = [actor_id for actor_id, info in state.actors().items() if actor_id in actor_ids and info.get("State") != "DEAD"]
        named = find_owned(name).actors
        record = RecordStore().get(name)
        if (not pgs and not actors and not named and record is None) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not pgs, f"placement groups left: {pgs}"
    assert not actors and not named, f"actors left: {actors} {named}"
    assert record is None, "state record left"


# -- `ray status` layout ------------------------------------------------------------------------

HEADER = re.compile(r"^======== (.+): (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}) ========$")


def parse_layout(text: str) -> tuple[str, dict[str, list[str]], str]:
    """Split status text into its header title, {section title: lines}, and the rule line; asserts
    the layout rules `ray status` follows (so running it on `ray status` output checks the parser)."""
    lines = text.rstrip("\n").splitlines()
    match = HEADER.match(lines[0])
    assert match, f"header line {lines[0]!r}"
    sections: dict[str, list[str]] = {}
    rule = None
    body: list[str] = []
    for i, line in enumerate(lines[1:], start=1):
        if i + 1 < len(lines) and lines[i + 1] and set(lines[i + 1]) == {"-"}:
            rule = rule or lines[i + 1]
            assert lines[i + 1] == rule, "rules differ in width"
            body = sections[line] = []
        elif line == "" or set(line) == {"-"}:
            continue  # blank lines separate sections (and, in `ray status`, blocks within one)
        else:
            assert body is not None and sections, f"line before any section: {line!r}"
            assert (line.endswith(":") and not line.startswith(" ")) or (line.startswith(" ") and not line.startswith("  ")), (
                f"line is neither a 'Heading:' nor a one-space item: {line!r}"
            )
            body.append(line)
    return match.group(1), sections, rule or ""


def subsection(lines: list[str], heading: str) -> list[str]:
    """The items under ``heading:`` up to the next heading."""
    start = lines.index(f"{heading}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def parse_demand(line: str) -> tuple[dict, str]:
    """A pending-demand line as (bundle, rest): Ray does not order the bundle's keys."""
    shape, _, rest = line.strip().partition("} ")
    return ast.literal_eval(shape + "}"), rest


def empty_markers(section: list[str]) -> list[str]:
    return [line for line in section if line.startswith(" (no ")]


def test_start_status_stop_and_layout_of_ray_status(cluster, daemons, tmp_path):
    import ray
    from ray.util import placement_group, remove_placement_group

    name = "sv-status"
    # `others` starts 4 data processes per worker: 2 x 1 + 2 x (1 + 4) = 12 CPUs wanted on 8-CPU nodes.
    others = '[groups.others]\npool = "p"\nclass = "workers:CounterWorker"\ndata_processes_per_worker = 4\n'
    daemon = daemons(write_spec(tmp_path, name, extra_group=others), name)
    record = wait_record(name, daemon=daemon)
    actor_ids = set(live_state(name)[1].values())
    assert len(actor_ids) == 8 + 2  # the ranks, the KV store and the owner fence
    # One rank killed and replaced: status shows the failure and the restart.
    ray.kill(ray.get_actor("counters_CounterWorker_1:0", namespace=record.namespace), no_restart=True)
    deadline = time.monotonic() + 30
    while not (r := wait_record(name, daemon=daemon)).groups["counters"].restarts or [x.state for x in r.groups["counters"].ranks] != ["running"] * 4:
        assert time.monotonic() < deadline, "the killed rank was not replaced"
        time.sleep(0.2)
    # A demand nobody can satisfy, so both views have a pending-demand line to compare.
    pending = placement_group([{"CPU": 1, "GPU": 1}] * 3, strategy="STRICT_PACK", name="someone-else")
    try:
        deadline = time.monotonic() + 30
        while True:
            ray_text = subprocess.run([str(BIN / "ray"), "status", "--address", cluster.address], capture_output=True, text=True, env=ENV).stdout
            if "STRICT_PACK" in ray_text or time.monotonic() > deadline:
                break
            time.sleep(1)
        result = cli("status", "--address", cluster.address)
        assert result.returncode == 0, result.stderr
        ours = result.stdout
        json_result = json.loads(cli("status", "--address", cluster.address, "--json").stdout)
    finally:
        remove_placement_group(pending)
    ray_title, ray_sections, ray_rule = parse_layout(ray_text[ray_text.index("========") :])
    title, sections, rule = parse_layout(ours)
    assert (ray_title, title) == ("Autoscaler status", "Supervisor status")
    assert rule == ray_rule
    assert list(sections) == ["Supervisors", "Pools", "Groups", "Resources"]
    # Shared section: the pending demand line is the same line `ray status` prints.
    ray_demands = subsection(ray_sections["Resources"], "Pending Demands")
    our_demands = subsection(sections["Resources"], "Pending Demands")
    assert len(ray_demands) == len(our_demands) == 1
    assert parse_demand(ray_demands[0]) == parse_demand(our_demands[0]) == ({"CPU": 1.0, "GPU": 1.0}, "* 3 (STRICT_PACK): 1+ pending placement groups")
    # "(no ...)" for empty lists, as ray status writes "(no pending nodes)".
    assert any(m.startswith(" (no ") for m in empty_markers(ray_sections["Node status"]))
    assert empty_markers(sections["Supervisors"]) == [" (no stopped supervisors)"]
    assert empty_markers(sections["Groups"]) == []
    failures = sections["Groups"][sections["Groups"].index("Recent failures:") + 1 :]
    assert len(failures) == 1 and re.match(rf"^ \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {name}/counters rank 2: died: ", failures[0]), failures
    sup_line = sections["Supervisors"][1]
    assert sup_line.startswith(f" {name}: running, pid {daemon.proc.pid} on ") and "heartbeat" in sup_line
    pool_lines = sections["Pools"]
    assert pool_lines[0] == f"{name}/p:" and len(pool_lines) == 3
    assert all(re.match(rf"^ {name}\.p:pg2_2:\d CREATED 2/2 bundles placed \[0:node_\w{{12}} 1:node_\w{{12}}\]$", ln) for ln in pool_lines[1:])
    assert f"{name}/counters (pool p, world size 4, running):" in sections["Groups"]
    assert " workers: 4 alive, 0 restarting, 0 failed" in sections["Groups"]
    assert " restarts: 1 in the last 10m00s (budget 10)" in sections["Groups"]
    warnings = subsection(sections["Resources"], "Warnings")
    assert len(warnings) == 2 and all(
        re.fullmatch(rf" {name}: CPU oversubscribed: node \w{{12}}: workers need 12 CPUs \(4 reserved \+ 8 data processes\) of 8", w) for w in warnings
    ), warnings
    # --json carries the same facts.
    (sup,) = [s for s in json_result["supervisors"] if s["name"] == name]
    assert sup["liveness"] == "alive" and [g["alive"] for g in sup["groups"]] == [4, 4]
    assert [pg["bundles_placed"] for pool in sup["pools"] for pg in pool["placement_groups"]] == [2, 2]
    # -o wide: a row per rank, the pid its actor really has; yaml the same document as json.
    wide = cli("status", name, "-o", "wide", "--address", cluster.address)
    assert wide.returncode == 0, wide.stderr
    header = next(line for line in wide.stdout.splitlines() if line.split()[:2] == ["RANK", "STATE"])
    assert header.split() == ["RANK", "STATE", "NODE", "ORIGINAL", "NODE", "ACTOR", "ID", "PID", "RESTARTS", "LAST", "FAILURE"]
    rows = [line.split() for line in wide.stdout.splitlines() if re.match(r"^\s+\d\s+running\s", line)]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"] * 2 and all(int(r[5]) > 0 for r in rows), wide.stdout  # two groups
    import yaml

    as_yaml = cli("status", name, "-o", "yaml", "--address", cluster.address)
    document = yaml.safe_load(as_yaml.stdout)
    assert as_yaml.returncode == 0 and document["schema_version"] == 1 and document["supervisors"][0]["name"] == name
    # --watch: the view again every interval, until interrupted.
    watching = subprocess.Popen(
        [str(BIN / "supervisor"), "status", name, "-o", "json", "--watch", "--interval", "0.5", "--address", cluster.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    first = watching.stdout.readline()  # it is connected and watching: Ctrl-C now ends the watch
    time.sleep(2)
    watching.send_signal(signal.SIGINT)
    out, err = watching.communicate(timeout=30)
    updates = [json.loads(line) for line in (first + out).splitlines() if line.strip()]
    assert watching.returncode == 0 and len(updates) >= 2 and all(u["supervisors"][0]["name"] == name for u in updates), err
    listing = cli("list", "--address", cluster.address)
    assert listing.stdout.splitlines()[0].split() == ["NAME", "LIVENESS", "STATE", "PID", "HOST", "HEARTBEAT", "POOLS", "GROUPS"]
    assert re.search(rf"^{name} +alive +running +{daemon.proc.pid} ", listing.stdout, re.M), listing.stdout

    # The event history: the start, the kill and its replacement, oldest first.
    history = json.loads(cli("events", name, "-o", "json", "--address", cluster.address).stdout)
    seen = [(e["kind"], e["group"], e["rank"]) for e in history["events"]]
    assert history["schema_version"] == 1 and ("DaemonState", None, None) in seen, seen
    failed = seen.index(("WorkerFailed", "counters", 2))
    assert ("WorkerReplaced", "counters", 2) in seen[failed:] and ("WorkerRecovered", "counters", 2) in seen[failed:], seen
    warnings = cli("events", name, "--warnings", "--since", "10m", "--address", cluster.address)
    lines = warnings.stdout.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], warnings.stdout
    assert [ln.split()[1:4] for ln in lines[1:]] == [["Warning", "WorkerFailed", "group/counters/2"]], warnings.stdout
    assert cli("events", name, "--since", "ten minutes", "--address", cluster.address).returncode == 2
    # The rank's log: its current actor's, and with --previous the one that was killed.
    current = cli("logs", name, "counters", "2", "--address", cluster.address)
    (row,) = [ln.split() for ln in wide.stdout.splitlines() if re.match(r"^\s+2\s+running\s", ln)][:1]
    assert current.returncode == 0 and current.stdout.splitlines() == [f"counter worker of rank 2 up, pid {row[5]}"], (current.stdout, current.stderr)
    before = cli("logs", name, "counters", "2", "--previous", "--err", "--address", cluster.address)
    assert before.returncode == 0 and before.stdout.splitlines()[-1] == "counter worker of rank 2: stderr", (before.stdout, before.stderr)
    earlier = cli("logs", name, "counters", "2", "-p", "--tail", "1", "--address", cluster.address).stdout.strip()
    assert earlier.startswith("counter worker of rank 2 up, pid ") and earlier != current.stdout.strip()
    missing = cli("logs", name, "counters", "9", "--address", cluster.address)
    assert missing.returncode == 1 and missing.stderr.strip() == f"Error: group counters of supervisor {name} has ranks 0..3, not 9"
    none = cli("logs", name, "counters", "0", "-p", "--address", cluster.address)
    assert none.returncode == 1 and "has no earlier actor (it was never replaced)" in none.stderr

    stopped = cli("stop", name, "--address", cluster.address)
    assert stopped.returncode == 0 and f"supervisor {name} stopped" in stopped.stdout, stopped.stderr
    assert daemon.wait_exit() == 0
    assert_nothing_left(name, actor_ids)
    # The history outlives the record, and ends with the teardown.
    after = json.loads(cli("events", name, "-o", "json", "--address", cluster.address).stdout)["events"]
    assert len(after) > len(history["events"]) and (after[-1]["kind"], after[-1]["type"]) == ("Stopped", "Normal"), after[-3:]
    assert after[-1]["message"] == "torn down (supervisor stop)"
    events = [e["event"] for e in daemon.events()]
    assert events.index("teardown_started") < events.index("pool_torn_down") < events.index("supervisor_stopped")


def test_a_log_neither_on_this_machine_nor_served_by_a_dashboard_is_one_clear_line(cluster, monkeypatch):
    from ray.experimental import internal_kv

    from supervisor.cli.logs import LogStream, LogsUnavailableError, RankActor, read_log

    # Ray's log API makes the GCS client it asks this process's key-value client, through which the
    # records are read: it must not stay so (under two xdist workers the cluster Ray finds by itself,
    # the one this machine started last, was the other worker's, and records went unseen). RAY_ADDRESS,
    # which Ray's lookup reads first, names this cluster: a client of any other would fail to connect.
    monkeypatch.setenv("RAY_ADDRESS", "localhost:" + cluster.address.rpartition(":")[2])
    connected_kv = internal_kv.internal_kv_get_gcs_client()
    # This module's cluster runs without a dashboard (Ray's log API); the node is not one of this machine's.
    elsewhere = RankActor("counters_CounterWorker_0:0", "00" * 16, 4321, "ff" * 28, True)
    with pytest.raises(LogsUnavailableError) as info:
        list(read_log(elsewhere, LogStream.OUT, None, follow=False))
    message = str(info.value)
    assert message.startswith("the log of counters_CounterWorker_0:0 (node ffffffffffff) is not on this machine, and Ray's log API did not answer (")
    assert message.endswith("): it needs the cluster's dashboard (ray start --head --include-dashboard=true)") and "\n" not in message
    assert internal_kv.internal_kv_get_gcs_client() is connected_kv


def test_sigkilled_daemon_is_readopted_and_the_job_continues(cluster, daemons, tmp_path):
    name = "sv-readopt"
    spec = write_spec(tmp_path, name, driver="steps = 25\ninterval_s = 0.3")
    first = daemons(spec, name)
    wait_record(name, daemon=first)
    from supervisor.daemon.record import RecordStore

    store = RecordStore()
    deadline = time.monotonic() + 60
    while store.get(name).driver_progress.get("step", 0) < 3:
        assert time.monotonic() < deadline, "driver made no progress"
        time.sleep(0.2)
    pgs_before, actors_before = live_state(name)
    assert len(pgs_before) == 2 and len(actors_before) == 4 + 2  # the ranks, the KV store and the fence
    from supervisor.daemon.kv import KVStore

    assert KVStore.attach(f"supervisor.{name}").get("last_step", timeout_s=10, namespace="driver") >= 2
    KVStore.attach(f"supervisor.{name}").put("written", "before the crash", namespace="test")
    first.proc.send_signal(signal.SIGKILL)
    first.wait_exit()
    killed_at_step = store.get(name).driver_progress["step"]

    second = daemons(spec, name)
    wait_record(name, daemon=second)
    history = json.loads(cli("events", name, "-o", "json", "--address", cluster.address).stdout)["events"]
    (taken,) = [e for e in history if e["kind"] == "TakenOver"]
    assert taken["type"] == "Warning" and f"took over from pid {first.proc.pid}" in taken["message"], taken
    assert taken["generation"] == max(e["generation"] for e in history) > min(e["generation"] for e in history)
    # The KV store kept what was written before the crash (it is detached and was adopted, not re-created).
    assert KVStore.attach(f"supervisor.{name}").get("written", timeout_s=0, namespace="test") == "before the crash"
    pgs_after, actors_after = live_state(name)
    assert pgs_after == pgs_before, "placement groups were recreated"
    assert actors_after == actors_before, "healthy actors (and the KV store) were restarted"
    assert second.wait_exit(120) == 0
    events = second.events()
    (start,) = [e for e in events if e["event"] == "count_steps_start"]
    assert start["resumed"] is True and start["start_step"] >= killed_at_step
    assert any(e["event"] == "count_steps_done" for e in events)
    ready = [e for e in events if e["event"] == "group_ready"]
    assert ready and ready[0]["adopted"] is True and ready[0]["initialized"] == []
    assert_nothing_left(name, set(actors_before.values()))


def test_standbys_take_over_killed_ranks_and_are_readopted_with_the_job(cluster, daemons, tmp_path):
    import ray

    from supervisor.daemon.record import RecordStore

    name = "sv-standby"
    spec = write_spec(
        tmp_path, name, pool_extra="capacity_factor = 1.5", standbys=2, init_method="init_model",
        kwargs={"start_s": 0.2}, **{"class": "supervised_workers:SlowStartWorker"},
    )  # fmt: skip
    daemon = daemons(spec, name)
    record = wait_record(name, daemon=daemon)
    store = RecordStore()

    def group(condition, what):
        deadline = time.monotonic() + 60
        while not condition(g := store.get(name).groups["counters"]):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {g}"
            time.sleep(0.2)
        return g

    g = group(lambda g: len([s for s in g.standbys if s.node_id]) == 2, "two ready standbys")
    standby_names = {s.name for s in g.standbys}
    status = cli("status", name, "--address", cluster.address).stdout
    assert "standbys: 2/2 ready" in status and f"{name}.p:pg2_2:spare2 CREATED 2/2 bundles placed" in status

    # A rank whose node holds a standby: the standby takes it over (a rank elsewhere would get a fresh actor
    # in its own bundle, which is still placed).
    standby_nodes = {s.node_id for s in g.standbys}
    rank = next((r.rank for r in g.ranks if r.node_id in standby_nodes), None)
    assert rank is not None, f"no rank shares a node with a standby: ranks {g.ranks}, standbys {g.standbys}"
    victim = g.actor_names[rank]
    ray.kill(ray.get_actor(victim, namespace=record.namespace), no_restart=True)
    g = group(lambda g: g.actor_names[rank] != victim and len([s for s in g.standbys if s.node_id]) == 2, "a takeover and a new standby")
    assert g.actor_names[rank] in standby_names, "a standby took the rank over, under its own name"
    assert g.ranks[rank].restarts == 1 and g.bundles[rank][0] == 2 and not g.ranks[rank].drifted

    # A restarted daemon re-adopts the job as it is now: the former standby as rank 1, the new standby.
    pgs_before, actors_before = live_state(name)
    assert len(pgs_before) == 3 and len(actors_before) == 4 + 2 + 2  # ranks, standbys, the KV store, the fence
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.wait_exit()
    second = daemons(spec, name)
    wait_record(name, daemon=second)
    group(lambda g: len([s for s in g.standbys if s.node_id]) == 2, "the adopted standbys to be ready")
    assert live_state(name) == (pgs_before, actors_before), "placement groups, ranks or standbys were recreated"
    assert store.get(name).groups["counters"].actor_names == g.actor_names

    assert cli("stop", name, "--address", cluster.address).returncode == 0
    assert second.wait_exit(60) == 0
    assert_nothing_left(name, set(actors_before.values()))


def test_a_spec_with_standby_preload_forks_standbys_from_zygotes_and_stop_removes_them(cluster, daemons, tmp_path):
    import ray

    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    name = "sv-zygote"
    spec = write_spec(
        tmp_path, name, pool_extra="capacity_factor = 1.5", standbys=1, init_method="init_model", standby_preload=["preload_marker"],
        standby_reach="any_node",  # every kill is a takeover, wherever the standby is
        kwargs={"start_s": 0.0}, **{"class": "supervised_workers:ForkProbeWorker"},
    )  # fmt: skip
    daemon = daemons(spec, name)
    record = wait_record(name, daemon=daemon)
    store = RecordStore()

    def standby(not_named=()):
        deadline = time.monotonic() + 90
        while True:
            ready = [s for s in store.get(name).groups["counters"].standbys if s.node_id and s.name not in not_named]
            if ready:
                return ready[0]
            assert time.monotonic() < deadline, f"timed out waiting for a ready standby other than {not_named}"
            time.sleep(0.2)

    def keepers():
        return [a for a in find_owned(name).actors if "zygote-" in a]

    first = standby()
    deadline = time.monotonic() + 90
    while len(keepers()) < 2:  # one on each node of the pool
        assert time.monotonic() < deadline, f"zygote keepers: {keepers()}"
        time.sleep(0.2)
    # Kill ranks until a standby is started once its node's zygote is ready: it is a fork of that zygote.
    seen, info = {first.name}, None
    for _ in range(4):
        g = store.get(name).groups["counters"]
        victim = g.actor_names[0]
        ray.kill(ray.get_actor(victim, namespace=record.namespace), no_restart=True)
        successor = standby(not_named=seen)
        seen.add(successor.name)
        info = ray.get(ray.get_actor(successor.name, namespace=record.namespace).process_info.remote(), timeout=30)
        if info["marker_imported_in"] != info["pid"]:
            break
    assert info is not None and info["marker_imported_in"] == info["ppid"] != info["pid"], info
    zygote = info["ppid"]

    assert cli("stop", name, "--address", cluster.address).returncode == 0
    assert daemon.wait_exit(60) == 0
    assert keepers() == []
    deadline = time.monotonic() + 30
    while True:
        try:
            if Path(f"/proc/{zygote}/stat").read_text().split(")")[1].split()[0] == "Z":
                break
        except FileNotFoundError:
            break
        assert time.monotonic() < deadline, "the zygote outlived the job"
        time.sleep(0.1)


@pytest.mark.parametrize("ending", ["sigterm", "sigint", "driver_raises", "driver_returns", "group_failed"])
def test_every_ending_tears_down_with_the_right_exit_code(cluster, daemons, tmp_path, ending):
    import ray

    name = f"sv-{ending.replace('_', '-')}"
    driver = {"sigterm": "steps = 1000", "sigint": "steps = 1000", "driver_raises": "steps = 100\nfail_at = 2", "driver_returns": "steps = 3"}
    opts = {"max_restarts": 0} if ending == "group_failed" else {}
    if ending == "driver_returns":  # the graceful stop calls the shutdown method of every rank
        opts = {"class": "workers:ShutdownAwareWorker", "shutdown_method": "shutdown", "env": {"SHUTDOWN_MARKER_DIR": str(tmp_path)}}
    linger = 5.0 if ending == "group_failed" else 0  # a failed exit keeps /metrics up so the failure is scraped
    daemon = daemons(write_spec(tmp_path, name, driver=driver.get(ending), linger_s=linger, **opts), name)
    record = wait_record(name, daemon=daemon)
    live_actors = live_state(name)[1]
    if ending in ("sigterm", "sigint"):
        daemon.proc.send_signal(signal.SIGTERM if ending == "sigterm" else signal.SIGINT)
    elif ending == "group_failed":
        ray.kill(ray.get_actor(sorted(live_actors)[0], namespace=record.namespace), no_restart=True)
        deadline = time.monotonic() + 30
        while f'supervisor_workers{{group="counters",state="failed",supervisor="{name}"}} 1.0' not in (text := scrape(record.metrics_address)):
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
    expected = 1 if ending in ("driver_raises", "group_failed") else 0
    assert daemon.wait_exit() == expected, daemon.log_path.read_text()[-3000:]
    assert_nothing_left(name, set(live_actors.values()))
    (stopped,) = [e for e in daemon.events() if e["event"] == "supervisor_stopped"]
    reason = {"sigterm": "SIGTERM", "sigint": "SIGINT", "driver_raises": "driver raised", "driver_returns": "driver returned"}
    assert stopped["reason"] == reason.get(ending, "group failed")
    if ending == "driver_returns":
        assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0", "rank1", "rank2", "rank3"]
    if ending == "driver_raises":
        assert stopped["error"] == "RuntimeError: driver failed at step 2"
    if ending == "group_failed":
        assert "FAILED" in stopped["error"] and "restart budget exhausted" in stopped["error"]
        assert [e["seconds"] for e in daemon.events() if e["event"] == "metrics_linger"] == [5.0]


def test_two_supervisors_stop_and_gc_touch_only_their_own(cluster, daemons, tmp_path):
    from supervisor.core.worker.actor_heartbeat import read_beats

    a = daemons(write_spec(tmp_path, "sv-a"), "sv-a")
    b_spec = write_spec(tmp_path, "sv-b", grace_s=8.0)  # each CLI call below takes a second or two
    b = daemons(b_spec, "sv-b")
    wait_record("sv-a", daemon=a)
    wait_record("sv-b", daemon=b)
    a_state = live_state("sv-a")
    b_pgs, b_actors = live_state("sv-b")
    assert len(a_state[0]) == len(b_pgs) == 2 and len(a_state[1]) == len(b_actors) == 4 + 2  # ranks, KV store, fence
    b.proc.send_signal(signal.SIGKILL)
    b.wait_exit()

    refused = cli("stop", "sv-b", "--address", cluster.address)
    assert refused.returncode == 1 and "sv-b is not running" in refused.stderr
    # sv-b is still within its grace period. (Earlier tests of this module SIGKILL daemons, whose ranks
    # leave heartbeats that this gc may remove: only supervisors matter here.)
    within_grace = cli("gc", "--address", cluster.address)
    assert within_grace.returncode == 0 and not re.search(r"^removed supervisor", within_grace.stdout, re.M), within_grace.stdout
    assert live_state("sv-b") == (b_pgs, b_actors)

    silent = cli("list", "--json", "--address", cluster.address)
    (b_row,) = [row for row in json.loads(silent.stdout) if row["name"] == "sv-b"]
    time.sleep(max(0.0, 8.5 - b_row["heartbeat_age_s"]))  # sv-b's daemon is now silent for longer than its grace period
    status = cli("status", "--address", cluster.address)
    assert re.search(r"^ sv-b: daemon not running since .*orphaned", status.stdout, re.M), status.stdout
    assert re.search(r"^ sv-a: running, pid ", status.stdout, re.M), status.stdout
    dry = cli("gc", "--dry-run", "--address", cluster.address)
    assert re.fullmatch(
        r"would remove supervisor sv-b \(silent for \d+s\): 2 placement group\(s\), 6 actor\(s\) and the record\n", dry.stdout
    ), dry.stdout
    assert live_state("sv-b") == (b_pgs, b_actors)
    collected = cli("gc", "--address", cluster.address)
    assert collected.returncode == 0 and collected.stdout.startswith("removed supervisor sv-b"), collected.stdout
    assert_nothing_left("sv-b", set(b_actors.values()))
    assert read_beats(b_actors.values()) == {}, "gc left the heartbeats of the ranks it killed"
    last = json.loads(cli("events", "sv-b", "-o", "json", "--address", cluster.address).stdout)["events"][-1]
    assert (last["kind"], last["type"]) == ("Collected", "Warning") and "6 actor(s)" in last["message"], last
    assert live_state("sv-a") == a_state, "gc touched the running sv-a"
    forced = cli("gc", "--grace", "0", "--address", cluster.address)  # a live heartbeat is never collected
    assert "nothing to collect" in forced.stdout and live_state("sv-a") == a_state

    b2 = daemons(b_spec, "sv-b")
    wait_record("sv-b", daemon=b2)
    b2_state = live_state("sv-b")
    assert cli("stop", "sv-a", "--address", cluster.address).returncode == 0
    assert a.wait_exit() == 0
    assert_nothing_left("sv-a", set(a_state[1].values()))
    assert live_state("sv-b") == b2_state, "stopping sv-a touched sv-b"
    b2.proc.send_signal(signal.SIGTERM)
    assert b2.wait_exit() == 0
    assert_nothing_left("sv-b", set(b2_state[1].values()))


@pytest.mark.parametrize("how", ["sigterm", "stop_command"])
def test_stop_while_waiting_for_resources(cluster, daemons, tmp_path, how):
    from ray.util import placement_group, remove_placement_group

    name = f"sv-starved-{how.replace('_', '-')}"
    hog = placement_group([{"GPU": 4}, {"GPU": 4}], strategy="STRICT_SPREAD", name="gpu-hog")
    try:
        hog.wait(30)
        daemon = daemons(write_spec(tmp_path, name), name)
        wait_record(name, state="starting", daemon=daemon)
        deadline = time.monotonic() + 30
        while "PENDING 0/2 bundles placed" not in (text := cli("status", name, "--address", cluster.address).stdout):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        assert f" {name}.p:pg2_2:0 PENDING 0/2 bundles placed [0:(unplaced) 1:(unplaced)]" in text.splitlines()
        assert " {'CPU': 2.0, 'GPU': 1.0} * 2 (STRICT_PACK): 2+ pending placement groups" in text.splitlines()
        started = time.monotonic()
        if how == "sigterm":
            daemon.proc.send_signal(signal.SIGTERM)
        else:
            result = cli("stop", name, "--address", cluster.address)
            assert result.returncode == 0, result.stderr
        assert daemon.wait_exit(30) == 0
        assert time.monotonic() - started < 15, "the stop waited for the resources"
        assert_nothing_left(name, set())
    finally:
        remove_placement_group(hog)


@pytest.mark.parametrize("how", ["stop_detach", "sigterm_with_on_sigterm_detach"])
def test_detach_leaves_the_job_running_for_the_next_start(cluster, daemons, tmp_path, how):
    name = f"sv-{how.replace('_', '-')}"
    spec = write_spec(tmp_path, name, on_sigterm="detach" if how.startswith("sigterm") else "teardown")
    first = daemons(spec, name)
    wait_record(name, daemon=first)
    before = live_state(name)
    if how == "stop_detach":
        result = cli("stop", name, "--detach", "--address", cluster.address)
        assert result.returncode == 0 and f"supervisor {name} detached" in result.stdout, result.stderr
    else:
        first.proc.send_signal(signal.SIGTERM)  # a Kubernetes rollout, a node drain
    assert first.wait_exit() == 0
    from supervisor.daemon.record import RecordStore

    assert RecordStore().get(name).state == "detached"
    assert live_state(name) == before, "detaching touched the job"
    second = daemons(spec, name)  # an upgraded daemon, say
    wait_record(name, daemon=second)
    assert live_state(name) == before, "the next start recreated what it should re-adopt"
    assert cli("stop", name, "--address", cluster.address).returncode == 0  # a real stop still tears down
    assert second.wait_exit() == 0
    assert_nothing_left(name, set(before[1].values()))


def test_a_restart_with_a_smaller_spec_removes_what_left_it_from_the_cluster_and_the_record(cluster, daemons, tmp_path):
    name = "sv-shrink"
    extra = '[pools.q]\nprocess_on_nodes = [1]\nmax_colocate_count = 2\n[groups.more]\npool = "q"\nclass = "workers:CounterWorker"\n'
    first = daemons(write_spec(tmp_path, name, extra_group=extra), name)
    record = wait_record(name, daemon=first)
    assert sorted(record.pools) == ["p", "q"] and sorted(record.groups) == ["counters", "more"]
    pgs, actors = live_state(name)
    first.proc.send_signal(signal.SIGKILL)
    first.wait_exit()
    second = daemons(write_spec(tmp_path, name), name)  # the same job without pool q and group more
    record = wait_record(name, daemon=second)
    assert sorted(record.pools) == ["p"] and sorted(record.groups) == ["counters"], "phantom pools or groups in the record"
    from supervisor.daemon.ownership import find_owned

    owned = find_owned(name)  # by name, not from the record: what the cluster still holds
    assert owned.placement_groups == {n: i for n, i in pgs.items() if n.startswith(f"{name}.p:")}
    assert sorted(owned.actors) == sorted(n for n in actors if not n.startswith("more_"))
    assert live_state(name)[1] == {n: i for n, i in actors.items() if not n.startswith("more_")}  # untouched
    assert cli("stop", name, "--address", cluster.address).returncode == 0
    assert second.wait_exit() == 0
    assert_nothing_left(name, set(actors.values()))


def test_gc_keeps_a_detached_job_until_its_detached_grace_s_or_include_detached(cluster, daemons, tmp_path):
    name = "sv-detached-gc"
    daemon = daemons(write_spec(tmp_path, name, grace_s=2.0, detached_grace_s=8.0), name)
    wait_record(name, daemon=daemon)
    before = live_state(name)
    assert cli("stop", name, "--detach", "--address", cluster.address).returncode == 0
    assert daemon.wait_exit() == 0
    detached_at = time.monotonic()
    time.sleep(2.5)  # past its orphan_grace_s: a crashed daemon's job would be collected now
    kept = cli("gc", "--address", cluster.address)
    assert kept.returncode == 0 and f"kept supervisor {name}: detached" in kept.stdout, kept.stdout
    assert live_state(name) == before
    status = cli("status", name, "--address", cluster.address)
    assert re.search(rf"^ {name}: detached \d+s ago .*start the same spec to re-adopt", status.stdout, re.M), status.stdout
    refused = cli("stop", name, "--address", cluster.address)
    assert refused.returncode == 1 and f"supervisor {name} is detached" in refused.stderr
    listed = cli("gc", "--include-detached", "--dry-run", "--address", cluster.address)
    assert f"would remove supervisor {name}" in listed.stdout, listed.stdout
    time.sleep(max(0.0, 8.5 - (time.monotonic() - detached_at)))  # past its detached_grace_s
    collected = cli("gc", "--address", cluster.address)
    assert f"removed supervisor {name}" in collected.stdout, collected.stdout
    assert_nothing_left(name, set(before[1].values()))


def test_second_daemon_of_a_running_supervisor_is_refused(cluster, daemons, tmp_path):
    spec = write_spec(tmp_path, "sv-once")
    first = daemons(spec, "sv-once")
    wait_record("sv-once", daemon=first)
    before = live_state("sv-once")
    second = daemons(spec, "sv-once")
    assert second.wait_exit() == 1
    (refusal,) = [e for e in second.events() if e["event"] == "daemon_not_started"]
    assert "sv-once is already running" in refusal["error"]
    assert live_state("sv-once") == before
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait_exit() == 0


def test_pools_that_cannot_fit_the_cluster_fail_before_creating_anything(cluster, daemons, tmp_path):
    name = "sv-budget"
    big = '[pools.q]\nprocess_on_nodes = [4, 4]\n[groups.more]\npool = "q"\nclass = "workers:CounterWorker"\n'
    daemon = daemons(write_spec(tmp_path, name, extra_group=big), name)
    assert daemon.wait_exit() == 1
    (failed,) = [e for e in daemon.events() if e["event"] == "start_failed"]
    assert failed["error"] == "BudgetError: budget: pools p 4 + q 8 GPU = 12 > 8 GPU in the cluster"
    assert_nothing_left(name, set())
    assert not [e for e in daemon.events() if e["event"] in ("resource_wait_done", "group_created")]


def test_bad_spec_exits_2_and_creates_nothing(cluster, tmp_path):
    from supervisor.daemon.record import RecordStore

    spec = write_spec(tmp_path, "sv-bad", extra_group='[groups.ghost]\npool = "nowhere"\nclass = "workers:CounterWorker"\n')
    result = cli("start", str(spec), "--address", cluster.address)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {spec}: groups.ghost.pool: pool 'nowhere' is not defined (pools: p)"]
    assert RecordStore().get("sv-bad") is None and live_state("sv-bad") == ({}, {})


def test_unreachable_cluster_is_one_line_and_non_zero(tmp_path):
    status = cli("status", "--address", "127.0.0.1:1", timeout_s=30)
    assert status.returncode == 1 and status.stderr.strip().count("\n") == 0 and "127.0.0.1:1" in status.stderr
    start = cli("start", str(write_spec(tmp_path, "sv-nowhere")), "--address", "127.0.0.1:1", "--log-json", timeout_s=30)
    assert start.returncode == 1
    (line,) = [json.loads(x) for x in start.stderr.splitlines() if x.startswith("{") and "daemon_not_started" in x]
    assert "no Ray cluster at 127.0.0.1:1" in line["error"]
