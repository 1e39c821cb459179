"""`supervisor run -- COMMAND`: argument errors, the spec's run mode, the exit status, signals, the
record while the command runs, teardown after any end (SIGKILL of the command too), --detach and the
next run's adoption. The command is plain Python here (tests/run_programs.py builds a supervised group
through the run's host as the verl integration does); tests/test_run_verl.py runs real verl.

Each run is `python -m supervisor.cli.commands run` as a subprocess against the module's cluster;
the test process is a second driver that reads the record, the placement-group and actor tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from click.testing import CliRunner
from daemon_harness import TESTS_DIR
from run_harness import (
    ENV,
    assert_nothing_left,
    live_pgs,
    reports,
    run_factory,
    shared_cluster,
    status_json,
    wait_for,
)

from supervisor.cli.commands import main
from supervisor.daemon.spec import SpecError, parse_spec
from supervisor.run.descriptor import HOOK_DIR, RUN_ENV, RunDescriptor, child_environment
from supervisor.run.exit_status import RunExit, command_problem, shell_status
from supervisor.run.launcher import forwards_sigint
from supervisor.supervision.restart_policy import RestartStrategy

PROGRAMS = TESTS_DIR / "run_programs.py"


# -- pure parts ------------------------------------------------------------------------------------
def test_shell_status_is_a_shells():
    assert shell_status(0) == 0 and shell_status(3) == 3
    assert shell_status(-signal.SIGKILL) == 137 and shell_status(-signal.SIGTERM) == 143


def test_command_problem():
    assert command_problem([sys.executable, "-c", "pass"]) is None
    assert command_problem(["python3"]) is None
    assert command_problem(["no-such-command-xyz"]) == (RunExit.NOT_FOUND, "no-such-command-xyz: command not found")
    assert command_problem(["/nonexistent/prog"])[0] is RunExit.NOT_FOUND
    assert command_problem([str(PROGRAMS)])[0] is RunExit.NOT_EXECUTABLE  # not chmod +x


def test_sigint_is_forwarded_unless_the_terminal_delivered_it():
    assert forwards_sigint(terminal_foreground=False)
    assert not forwards_sigint(terminal_foreground=True)


def test_child_environment_puts_the_hook_first_and_chains_a_runtime_env_hook():
    d = RunDescriptor("r1", "owner1", "[supervisor]\n", "x.toml")
    env = child_environment({"PYTHONPATH": f"/a{os.pathsep}{HOOK_DIR}", "RAY_RUNTIME_ENV_HOOK": "mine.hook"}, d, "127.0.0.1:1")
    assert env["PYTHONPATH"].split(os.pathsep) == [HOOK_DIR, "/a"]
    assert RunDescriptor.from_environment(env) == d
    assert env["RAY_ADDRESS"] == "127.0.0.1:1"
    assert env["RAY_RUNTIME_ENV_HOOK"] == "supervisor.run.runtime_env.propagate"
    assert env["SUPERVISOR_RUN_NEXT_RUNTIME_ENV_HOOK"] == "mine.hook"
    assert RunDescriptor.from_environment({}) is None


def test_runtime_env_hook_adds_the_run_to_the_jobs_env_vars(monkeypatch):
    from supervisor.run.runtime_env import propagate

    monkeypatch.setenv(RUN_ENV, RunDescriptor("r1", "o").to_json())
    monkeypatch.setenv("PYTHONPATH", f"{HOOK_DIR}{os.pathsep}/b")
    monkeypatch.delenv("SUPERVISOR_RUN_NEXT_RUNTIME_ENV_HOOK", raising=False)
    assert propagate(None)["env_vars"] == {RUN_ENV: os.environ[RUN_ENV], "PYTHONPATH": f"{HOOK_DIR}{os.pathsep}/b"}
    out = propagate({"env_vars": {"PYTHONPATH": "/mine", "X": "1"}, "pip": ["p"]})
    assert out == {"env_vars": {"PYTHONPATH": f"{HOOK_DIR}{os.pathsep}/mine", "X": "1", RUN_ENV: os.environ[RUN_ENV]}, "pip": ["p"]}
    # A hook of the user's runs first.
    monkeypatch.setenv("SUPERVISOR_RUN_NEXT_RUNTIME_ENV_HOOK", "run_programs_env_hook.add_marker")
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    assert propagate({})["env_vars"]["MARKER"] == "user hook ran"


def test_run_spec():
    spec = parse_spec(
        '[supervisor]\nheartbeat_interval_s = 0.5\n[run.groups.actor_rollout]\nrestart_strategy = "one_for_all"\nmax_restarts = 2\n'
        "[run.groups.critic]\nprobe_period_s = 2\n",
        run=True,
    )
    assert spec.name == "" and spec.pools == {} and spec.groups == {}
    assert spec.run.strategy_set == {"actor_rollout"}
    assert spec.run.groups["actor_rollout"].supervision_config().restart.strategy is RestartStrategy.ONE_FOR_ALL
    assert spec.run.groups["critic"].supervision_config().probe_period_s == 2.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[pools.p]\nprocess_on_nodes = [1]\n', "pools: only for `supervisor start`"),
        ("[metrics]\nport = 0\n", "metrics: not served by `supervisor run` yet"),
        ('[run.groups.a]\nclass = "m:C"\n', "run.groups.a.class: only for `supervisor start`'s [groups.NAME]"),
        ("[run.groups.a]\nmax_restarts = -1\n", "run.groups.a.max_restarts: must be >= 0, got -1"),
        ('[run.groups.a]\nrestart_strategy = "sometimes"\n', "run.groups.a.restart_strategy: expected one of"),
        ("[run]\ngroup = 1\n", "run.group: unknown key"),
        ('[supervisor]\nname = "a.b"\n', "supervisor.name: 'a.b' must be"),
    ],
)
def test_run_spec_problems_are_one_line_each(text, problem):
    with pytest.raises(SpecError) as err:
        parse_spec(text, run=True)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(problem), err.value.problems


def test_a_daemon_spec_has_no_run_section():
    with pytest.raises(SpecError, match="run: unknown key"):
        parse_spec('[supervisor]\nname = "x"\n[run.groups.a]\n', run=False, check_imports=False)


# -- usage errors: one line, nothing started ---------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        ([], 2, "error: no command to run: supervisor run [OPTIONS] -- COMMAND [ARGS]..."),
        (["--name", "a.b", "--", "true"], 2, "error: --name: 'a.b' must be 1 to 64 letters, digits, '_' or '-'"),
        (["--detach", "--", "true"], 2, "error: --detach needs a cluster that outlives the run"),
        (["--", "no-such-command-xyz"], 127, "error: no-such-command-xyz: command not found"),
    ],
)
def test_usage_errors(args, code, line):
    result = CliRunner().invoke(main, ["run", *args], env={"RAY_ADDRESS": ""})
    assert result.exit_code == code, result.output
    assert result.output.strip().splitlines()[0].startswith(line), result.output


def test_malformed_spec_names_the_field(tmp_path):
    spec = tmp_path / "job.toml"
    spec.write_text("[run.groups.actor]\nmax_restarts = 'many'\n")
    result = CliRunner().invoke(main, ["run", "--spec", str(spec), "--", "true"], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {spec}: run.groups.actor.max_restarts: expected an integer, got string 'many'"


def test_dead_cluster_is_one_line_and_125():
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "run", "--address", "127.0.0.1:1", "--", "true"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert out.returncode == 125, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: cannot reach the Ray cluster: ClusterUnavailableError: no Ray cluster at 127.0.0.1:1: [Errno 111] Connection refused"]
    assert time.monotonic() - started < 30


# -- runs against a real cluster ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    yield from shared_cluster("run-tests")


@pytest.fixture
def runs(cluster, tmp_path):
    yield from run_factory(cluster, tmp_path)


def test_exit_code_passes_through_and_nothing_is_left(runs):
    r = runs([sys.executable, "-c", "import sys; sys.exit(7)"])
    assert r.wait() == 7, r.output()
    assert_nothing_left(r.name)


def test_a_command_killed_by_a_signal_exits_128_plus_n(runs):
    r = runs([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert r.wait() == 128 + signal.SIGKILL
    assert_nothing_left(r.name)


def test_sigterm_is_forwarded_to_the_command(runs, tmp_path):
    out = tmp_path / "sigterm.txt"
    r = runs([sys.executable, str(PROGRAMS), "sigterm", str(out)])
    wait_for(out.with_suffix(".ready").exists, "the command to start", proc=r)
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait() == 42, r.output()
    assert out.read_text() == "SIGTERM"
    assert_nothing_left(r.name)


def test_a_name_that_is_running_is_refused_and_left_alone(runs, tmp_path):
    from supervisor.daemon.record import RecordStore

    out = tmp_path / "first.txt"
    first = runs([sys.executable, str(PROGRAMS), "sigterm", str(out)])
    wait_for(out.with_suffix(".ready").exists, "the first run's command", proc=first)
    owner = RecordStore().get(first.name).owner
    second = runs([sys.executable, "-c", "raise SystemExit(0)"], name=first.name)
    assert second.wait() == 125
    errors = [line for line in second.output().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: supervisor {first.name} is already running (pid {first.proc.pid} on "), errors
    assert RecordStore().get(first.name).owner == owner  # untouched
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 42
    assert_nothing_left(first.name)


def test_the_record_shows_the_groups_and_restarts_and_a_sigkilled_command_leaves_nothing(runs, cluster, tmp_path):
    import ray

    from supervisor.daemon.ownership import namespace_of
    from supervisor.daemon.record import RecordStore

    out = tmp_path / "group.jsonl"
    spec = tmp_path / "run.toml"  # the group's settings come from the spec: a call a rank dies in is retried
    spec.write_text('[supervisor]\nheartbeat_interval_s = 0.5\n[run.groups.counters]\nin_flight = "retry"\nmax_restarts = 4\n')
    r = runs([sys.executable, str(PROGRAMS), "group", str(out), "0"], "--spec", str(spec))
    ready = wait_for(lambda: [e for e in reports(out) if e["event"] == "ready"], "the group", proc=r)[0]
    # The run reached a task of the command's job: the hook is first on its PYTHONPATH, the descriptor there.
    assert ready["task_env"]["PYTHONPATH"].split(os.pathsep)[0] == HOOK_DIR
    assert json.loads(ready["task_env"]["SUPERVISOR_RUN"])["name"] == r.name
    assert ready["pool"] == "counters_pool"
    assert "max_restarts=4" in ready["config"]
    record = wait_for(lambda: (rec := RecordStore().get(r.name)) and "counters" in rec.groups and rec, "the group in the record")
    assert record.pid == ready["pid"] and record.state == "running"  # the command's process writes it
    assert record.heartbeat_interval_s == 0.5 and record.groups["counters"].max_restarts == 4
    assert record.pools["counters_pool"].prefix == f"{r.name}.counters_pool"
    assert [rank.state.value for rank in record.groups["counters"].ranks] == ["running", "running"]

    # A rank killed between calls is replaced; status shows the restart while the run goes on.
    victim = ray.get_actor(ready["actors"][1], namespace=namespace_of(r.name))
    ray.kill(victim, no_restart=True)

    def restarted():
        report = status_json(r.name, cluster.address)
        (sup,) = report["supervisors"]
        (group,) = [g for g in sup["groups"] if g["name"] == "counters"]
        done = sup["liveness"] == "alive" and group["restarts_in_window"] >= 1 and group["alive"] == group["world_size"] == 2
        return (sup, group) if done else None

    sup, group = wait_for(restarted, "the restart in `supervisor status`", proc=r)
    assert group["pool"] == "counters_pool" and group["state"] == "running"
    assert [f["rank"] for f in sup["failures"]] == [1]
    calls_before = len(reports(out))
    wait_for(lambda: len(reports(out)) > calls_before + 2, "calls after the restart", proc=r)

    os.kill(ready["pid"], signal.SIGKILL)  # the command dies without a word
    assert r.wait() == 128 + signal.SIGKILL, r.output()
    assert_nothing_left(r.name)
    assert not live_pgs(ready["pgs"])


def test_detach_leaves_the_pools_for_the_next_run_and_gc_removes_them(runs, cluster, tmp_path):
    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    name = f"run-detach-{uuid.uuid4().hex[:6]}"
    firsts = []
    for i in range(2):
        out = tmp_path / f"detach{i}.jsonl"
        out.with_suffix(".stop").write_text("")  # the program returns once its group is up
        r = runs([sys.executable, str(PROGRAMS), "group", str(out), "3"], "--detach", name=name)
        assert r.wait() == 3, r.output()
        (ready,) = [e for e in reports(out) if e["event"] == "ready"]
        firsts.append(ready["pgs"])
        record = RecordStore().get(name)
        assert record.state == "detached" and record.groups == {} and "counters_pool" in record.pools
        owned = wait_for(lambda: (o := find_owned(name)) and o.actors == ["fence"] and o, "the actors to go, the fence to stay")
        assert sorted(owned.placement_groups.values()) == sorted(ready["pgs"])
    assert firsts[0] == firsts[1]  # the second run adopted the first one's placement groups
    gc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "gc", "--include-detached", "--address", cluster.address],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert gc.returncode == 0 and f"removed supervisor {name}" in gc.stdout, gc.stdout + gc.stderr
    assert_nothing_left(name)


def test_the_hook_chains_to_the_sitecustomize_it_shadows(tmp_path):
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([HOOK_DIR, str(user)]), RUN_ENV: RunDescriptor("x", "o").to_json()}
    code = "import os, sys, sitecustomize; print(os.environ.get('USER_SITECUSTOMIZE'), sitecustomize.__file__, type(sys.meta_path[0]).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran", str(user / "sitecustomize.py"), "_VerlFinder"]
    # Outside a run the hook does nothing but chain.
    env.pop(RUN_ENV)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split()[:2] == ["ran", str(user / "sitecustomize.py")] and out.stdout.split()[2] != "_VerlFinder"


def test_the_parent_beats_again_when_the_host_process_is_gone(runs, tmp_path):
    from supervisor.daemon.fence import fence_status
    from supervisor.daemon.record import RecordStore

    out = tmp_path / "lost.jsonl"
    r = runs([sys.executable, str(PROGRAMS), "lost-host", str(out)])
    wait_for(out.with_suffix(".ready").exists, "the command to go on after its host died", proc=r)
    (hosted,) = reports(out)
    assert hosted["pid"] != r.proc.pid
    # The host claimed (its pid was in the record); it is gone, so the parent writes the record again.
    record = wait_for(lambda: (rec := RecordStore().get(r.name)) and rec.pid == r.proc.pid and rec.generation >= 3 and rec, "the parent", proc=r)
    seq = record.heartbeat_seq
    wait_for(lambda: RecordStore().get(r.name).heartbeat_seq > seq + 2, "the parent's beats", proc=r)
    assert fence_status(r.name).liveness.value == "alive"
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait() == 42
    assert_nothing_left(r.name)


def test_an_owner_claiming_again_gets_a_new_generation():
    from supervisor.daemon.fence import ClaimRequest, ClaimVerdict, FenceState, decide_claim

    state = FenceState(generation=4, owner="o1", grace_s=30.0, interval_s=1.0)
    assert decide_claim(state, ClaimRequest("o1", "o1", False, 30.0, 1.0), silent_s=0.0) is ClaimVerdict.GRANTED
    assert decide_claim(state, ClaimRequest("o2", "o1", False, 30.0, 1.0), silent_s=0.0) is ClaimVerdict.ALIVE


def test_supervisor_stop_is_a_sigterm_to_the_command(runs, cluster, tmp_path):
    out = tmp_path / "stop.txt"
    r = runs([sys.executable, str(PROGRAMS), "sigterm", str(out)])
    wait_for(out.with_suffix(".ready").exists, "the command to start", proc=r)
    stop = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "stop", r.name, "--address", cluster.address, "--timeout", "60"],
        capture_output=True, text=True, env=ENV, timeout=90,
    )  # fmt: skip
    assert stop.returncode == 0 and stop.stdout.strip() == f"supervisor {r.name} stopped", stop.stdout + stop.stderr
    assert r.wait() == 42 and out.read_text() == "SIGTERM"
    assert_nothing_left(r.name)


def test_the_hosts_pool_names_and_group_settings():
    from supervisor.daemon.spec import parse_spec
    from supervisor.run.descriptor import named
    from supervisor.run.run_host import RunHost

    spec = named(
        parse_spec('[run.groups.actor]\nrestart_strategy = "one_for_all"\nprobe_period_s = 2\n[run.groups.global_pool]\nprobe_period_s = 3\n', run=True),
        "r1",
    )
    host = RunHost(RunDescriptor("r1", "o"), spec)  # nothing claimed: no cluster needed for these
    assert [host.pool_name(n) for n in ("global_pool", "global_pool", "a.b c", "", "global_pool")] == [
        "global_pool", "global_pool-2", "a_b_c", "pool", "global_pool-3",
    ]  # fmt: skip
    actor, other = host.settings("actor"), host.settings("critic")
    assert actor.strategy_set and actor.config.restart.strategy is RestartStrategy.ONE_FOR_ALL and actor.config.probe_period_s == 2.0
    assert not other.strategy_set and other.config.probe_period_s == 5.0
    # verl's trainer names its groups at random: a table may name the group's pool instead; the group's own wins.
    assert host.settings("Xy12ab", "global_pool").config.probe_period_s == 3.0
    assert host.settings("actor", "global_pool").config.probe_period_s == 2.0


def test_the_host_outside_a_run_says_so(monkeypatch):
    from supervisor.run.run_host import NotInRunError, RunHost

    monkeypatch.delenv(RUN_ENV, raising=False)
    with pytest.raises(NotInRunError, match="not under `supervisor run`"):
        RunHost.from_environment()


def test_the_command_gets_the_users_environment_not_what_connecting_set(monkeypatch):
    """Connecting makes Ray set a token mode and path in this process (and PYTHONBREAKPOINT): passed on,
    they broke actors of the command's job on a cluster given by address; an embedded Ray's token is
    passed on (the command cannot know it)."""
    from supervisor.daemon.spec import parse_spec
    from supervisor.run.descriptor import named
    from supervisor.run.launcher import RunLauncher

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    launcher = RunLauncher(["true"], named(parse_spec("", run=True), "r1"), address="127.0.0.1:1")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # what connecting does
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    env = launcher._command_base_env()
    assert "RAY_AUTH_MODE" not in env and env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    launcher._cluster.embedded = object()  # as if it had started an embedded Ray
    assert launcher._command_base_env()["RAY_AUTH_MODE"] == "token"


def test_only_a_supervisors_pool_adopts_placement_groups_from_another_namespace(cluster):
    """Ray finds a placement group by name in the caller's namespace only; the fallback that scans every
    namespace (a detached run's pools, adopted by the next run's program) is for pools a supervisor's
    prefix names, never for a plain pool that happens to share a name with another job's."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from supervisor.placement.pool import ResourcePool

    pg = placement_group([{"CPU": 0.01}], name="other-job:pg1:0")
    ray.get(pg.ready(), timeout=60)
    try:

        def elsewhere(name):  # what get_placement_group does in a namespace that has no such name
            raise ValueError(name)

        assert ResourcePool._find_existing(elsewhere, "other-job:pg1:0", any_namespace=False) is None
        found = ResourcePool._find_existing(elsewhere, "other-job:pg1:0", any_namespace=True)
        assert found is not None and found.id == pg.id
        assert ResourcePool([1], use_gpu=False).adopt_from_any_namespace is False
    finally:
        remove_placement_group(pg)
