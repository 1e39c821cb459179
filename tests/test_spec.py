"""The supervisor spec (supervisor/daemon/spec.py): parsing, defaults, one-line problems, fuzzing and the CLI.

Pure: no Ray cluster is started and torch is never imported. Worker classes come from tests/workers.py
(``workers:CounterWorker``), importable because tests/ is on sys.path under pytest.

The ``was_bug_`` rows are inputs that broke the first version (a traceback, or a second misleading line).
"""

from __future__ import annotations

import ast
import copy
import datetime as dt
import math
import os
import pickle
import re
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.daemon.spec import (
    DriverSpec,
    GroupSpec,
    MetricsSpec,
    PoolSpec,
    RaySpec,
    SpecError,
    SupervisorSection,
    SupervisorSpec,
    load_spec,
    parse_spec,
)
from supervisor.errors import ConfigError
from supervisor.placement.pool import PlacementStrategy
from supervisor.placement.standby import StandbyReach
from supervisor.supervision import InFlightPolicy, SupervisionConfig
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.restart_policy import RestartPolicy, RestartStrategy

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "rlhf" / "rlhf.toml"
SECTIONS = ("supervisor", "ray", "pools", "groups", "metrics", "driver")
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # everything str.splitlines() splits on

MINIMAL = """\
[supervisor]
name = "unit"

[pools.main]
process_on_nodes = [2]

[groups.counter]
pool = "main"
class = "workers:CounterWorker"
"""


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch):
    """check_imports puts the spec's python_path on sys.path; keep that out of other tests."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def _section(header: str, base: dict[str, str], changes: dict[str, str | None] | None) -> str:
    """``[header]`` with ``base`` updated by ``changes`` (raw TOML values; None drops the key)."""
    merged = {**base, **(changes or {})}
    return f"[{header}]\n" + "".join(f"{k} = {v}\n" for k, v in merged.items() if v is not None) + "\n"


def doc(
    supervisor: dict[str, str | None] | None | bool = None,
    pool: dict[str, str | None] | None | bool = None,
    group: dict[str, str | None] | None | bool = None,
    head: str = "",
    tail: str = "",
) -> str:
    """The minimal valid spec with edits: a dict edits a section's keys, ``False`` drops the section.

    ``head`` goes before the first table (top-level keys), ``tail`` after the last one (more tables).
    """
    parts = [head]
    if supervisor is not False:
        parts.append(_section("supervisor", {"name": '"unit"'}, supervisor or None))
    if pool is not False:
        parts.append(_section("pools.main", {"process_on_nodes": "[2]"}, pool or None))
    if group is not False:
        parts.append(_section("groups.counter", {"pool": '"main"', "class": '"workers:CounterWorker"'}, group or None))
    parts.append(tail)
    return "".join(parts)


def _path_of(problem: str) -> str:
    return problem.split(": ", 1)[0]


def _assert_well_formed(exc: SpecError, source: str) -> None:
    """The SpecError contract: >= 1 problem, each one line ``<field path>: <reason>``, str() prefixed."""
    assert isinstance(exc, ConfigError)
    assert exc.problems, "a SpecError without problems"
    for problem in exc.problems:
        assert isinstance(problem, str)
        assert not any(c in problem for c in LINE_BREAKS), f"problem spans several lines: {problem!r}"
        assert ": " in problem, problem
    assert str(exc).splitlines() == [f"{source}: {p}" for p in exc.problems]
    assert exc.source == source


def _problems(text: str, check_imports: bool = True, source: str = "bad.toml") -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source=source, check_imports=check_imports)
    _assert_well_formed(info.value, source)
    return info.value.problems


# -- 1. valid specs and defaults ------------------------------------------------------------------


def test_minimal_spec_defaults():
    spec = parse_spec(MINIMAL, source="min.toml")
    assert isinstance(spec, SupervisorSpec)
    assert spec.name == "unit"

    assert spec.supervisor == SupervisorSection(name="unit", heartbeat_interval_s=1.0, orphan_grace_s=30.0)
    assert spec.ray == RaySpec(address=None, local_nodes=1, num_cpus=4, num_gpus=0, resources={}, python_path=[])

    assert list(spec.pools) == ["main"]
    pool = spec.pools["main"]
    assert pool.process_on_nodes == [2]
    assert pool.strategy is PlacementStrategy.STRICT_PACK
    assert pool.use_gpu is True
    assert pool.max_colocate_count == 1
    assert pool.resource_timeout_s == 600.0
    assert pool.progress_interval_s == 10.0
    assert pool.autoscaling is False
    assert pool == PoolSpec(process_on_nodes=[2])

    assert list(spec.groups) == ["counter"]
    group = spec.groups["counter"]
    assert group.pool == "main"
    assert group.worker_class == "workers:CounterWorker"
    assert group.restart_strategy is RestartStrategy.ONE_FOR_ONE
    assert group.max_restarts == 10
    assert group.init_method is None
    assert group.init_attempts == 3
    assert group.init_timeout_s == 300.0
    assert group.call_timeout_s is None
    assert group.in_flight is None
    assert group.shutdown_method is None
    assert (group.args, group.kwargs, group.env, group.init_kwargs) == ([], {}, {}, {})
    assert group == GroupSpec(pool="main", worker_class="workers:CounterWorker")

    assert spec.metrics == MetricsSpec(enabled=True, host="127.0.0.1", port=9400)
    assert spec.driver is None
    assert spec.base_dir == Path(".")


def test_minimal_group_supervision_matches_library_defaults():
    """A group that sets nothing is supervised exactly like a library user's default SupervisionConfig."""
    group = parse_spec(MINIMAL).groups["counter"]
    assert group.supervision_config() == SupervisionConfig()
    assert group.restart_policy() == RestartPolicy()
    assert group.init_policy() == InitPolicy()


def test_names_namespace_and_prefixes():
    spec = parse_spec(doc(supervisor={"name": '"rlhf-demo_2"'}))
    assert spec.name == "rlhf-demo_2"
    assert spec.namespace == "supervisor.rlhf-demo_2"
    assert spec.pool_prefix("main") == "rlhf-demo_2.main"
    assert spec.group_prefix("counter") == "counter_"


def test_every_group_field_reaches_the_supervision_config():
    group = parse_spec(
        doc(
            group={
                "args": '[1, "two"]',
                "kwargs": "{ offset = 5 }",
                "env": '{ FOO = "bar" }',
                "actor_start_timeout_s": "45",
                "init_method": '"add"',
                "init_kwargs": "{ n = 1 }",
                "init_timeout_s": "7",
                "init_attempts": "4",
                "restart_strategy": '"one_for_all"',
                "max_restarts": "0",
                "restart_window_s": "60",
                "backoff_initial_s": "0.5",
                "backoff_max_s": "8",
                "probe_period_s": "2",
                "probe_timeout_s": "4",
                "call_timeout_s": "30",
                "in_flight": '"raise"',
                "shutdown_method": '"unregistered"',
                "shutdown_timeout_s": "3",
                "standbys": "1",
                "standby_reach": '"any_node"',
                "standby_nice": "5",
                "standby_sched_idle": "false",
                "standby_preload": '["torch", "tensordict"]',
            },
            pool={"capacity_factor": "1.5"},
        )
    ).groups["counter"]
    assert (group.args, group.kwargs, group.env) == ([1, "two"], {"offset": 5}, {"FOO": "bar"})
    assert group.actor_start_timeout_s == 45.0 and isinstance(group.actor_start_timeout_s, float)
    assert (group.shutdown_method, group.shutdown_timeout_s) == ("unregistered", 3.0)

    restart = RestartPolicy(strategy=RestartStrategy.ONE_FOR_ALL, max_restarts=0, restart_window_s=60.0, backoff_initial_s=0.5, backoff_max_s=8.0)
    init = InitPolicy(timeout_s=7.0, attempts=4)
    assert group.restart_policy() == restart
    assert group.init_policy() == init
    config = group.supervision_config()
    assert config == SupervisionConfig(
        restart=restart,
        init_method="add",
        init_kwargs={"n": 1},
        init_policy=init,
        probe_period_s=2.0,
        probe_timeout_s=4.0,
        call_timeout_s=30.0,
        in_flight=InFlightPolicy.RAISE,
        standbys=1,
        standby_reach=StandbyReach.ANY_NODE,
        standby_nice=5,
        standby_sched_idle=False,
        standby_preload=("torch", "tensordict"),
        actor_start_timeout_s=45.0,
    )
    config.init_kwargs["n"] = 99  # the config gets a copy: the (frozen) spec is not changed through it
    assert group.init_kwargs == {"n": 1}


def test_inf_means_no_limit_and_ints_become_floats():
    spec = parse_spec(doc(pool={"resource_timeout_s": "inf"}, group={"call_timeout_s": "inf", "init_timeout_s": "120"}))
    assert spec.pools["main"].resource_timeout_s is None
    assert spec.groups["counter"].call_timeout_s is None
    assert spec.groups["counter"].supervision_config().call_timeout_s is None
    init_timeout = spec.groups["counter"].init_timeout_s
    assert init_timeout == 120.0 and type(init_timeout) is float


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("pool", "strategy", "spread", PlacementStrategy.SPREAD),
        ("pool", "strategy", "Strict_Spread", PlacementStrategy.STRICT_SPREAD),
        ("pool", "strategy", "PACK", PlacementStrategy.PACK),
        ("group", "restart_strategy", "ONE_FOR_ALL", RestartStrategy.ONE_FOR_ALL),
        ("group", "restart_strategy", "One_For_One", RestartStrategy.ONE_FOR_ONE),
        ("group", "in_flight", "RETRY", InFlightPolicy.RETRY),
        ("group", "in_flight", "raise", InFlightPolicy.RAISE),
    ],
)
def test_enum_values_are_case_insensitive(section, key, value, expected):
    spec = parse_spec(doc(**{section: {key: f'"{value}"'}}))
    target = spec.pools["main"] if section == "pool" else spec.groups["counter"]
    assert getattr(target, key) is expected


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param({"supervisor": {"heartbeat_interval_s": "1", "orphan_grace_s": "2.5"}}, id="orphan_grace_just_above_2x"),
        pytest.param({"group": {"backoff_initial_s": "0", "backoff_max_s": "0", "max_restarts": "0"}}, id="zero_allowed"),
        pytest.param({"tail": "[metrics]\nport = 0\n"}, id="metrics_port_0"),
        pytest.param({"tail": "[metrics]\nport = 65535\nenabled = false\nhost = '0.0.0.0'\n"}, id="metrics_port_65535"),
        pytest.param({"tail": "[ray]\nnum_gpus = 0\nlocal_nodes = 3\nresources = { special = 2 }\n"}, id="ray_local"),
        pytest.param({"tail": "[ray]\naddress = 'auto'\npython_path = ['src']\n"}, id="ray_address_alone"),
        pytest.param({"pool": {"process_on_nodes": "[4, 4, 1]", "max_colocate_count": "3", "use_gpu": "false"}}, id="pool_shape"),
        pytest.param({"group": {"init_method": '"add"', "init_kwargs": "{}"}}, id="init_method_found"),
        pytest.param({"tail": '[pools."a.b-c_d"]\nprocess_on_nodes = [1]\n'}, id="pool_name_with_dot"),
        pytest.param({"tail": '[driver]\nfunction = "supervisor.daemon.spec:load_spec"\n[driver.args]\nx = 1\n'}, id="driver"),
    ],
)
def test_valid_edge_values_are_accepted(edits):
    assert isinstance(parse_spec(doc(**edits)), SupervisorSpec)


def test_driver_section():
    spec = parse_spec(doc(tail='[driver]\nfunction = "supervisor.daemon.spec:load_spec"\n[driver.args]\nsteps = 3\nname = "x"\n'))
    assert spec.driver == DriverSpec(function="supervisor.daemon.spec:load_spec", args={"steps": 3, "name": "x"})


def test_groups_keep_declaration_order():
    tail = '[groups.zeta]\npool = "main"\nclass = "workers:CounterWorker"\n[groups.alpha]\npool = "main"\nclass = "workers:CounterWorker"\n'
    assert parse_spec(doc(pool={"max_colocate_count": "3"}, tail=tail)).groups_in_start_order() == ["counter", "zeta", "alpha"]


def test_load_spec_resolves_python_path_against_the_spec_directory(tmp_path):
    path = tmp_path / "conf" / "job.toml"
    path.parent.mkdir()
    path.write_text(doc(tail='[ray]\npython_path = ["src", "..", "."]\n'))
    spec = load_spec(path)
    conf = path.parent.resolve()
    assert spec.base_dir == conf
    assert spec.ray.python_path == ["src", "..", "."]
    assert spec.python_path() == [os.getcwd(), str(conf / "src"), str(conf.parent), str(conf)]


def test_rlhf_example_spec():
    spec = load_spec(EXAMPLE, check_imports=False)
    assert spec.name == "rlhf-demo"
    assert spec.namespace == "supervisor.rlhf-demo"
    assert spec.ray.local_nodes == 2 and spec.ray.num_gpus == 6
    assert spec.python_path()[-1] == str(REPO)  # "../.." from examples/rlhf/
    assert {n: p.process_on_nodes for n, p in spec.pools.items()} == {"rollout": [2, 2], "reference": [1, 1], "actor": [1, 1], "critic": [1, 1]}
    assert spec.groups_in_start_order() == ["rollout", "reference", "actor", "critic"]
    rollout = spec.groups["rollout"]
    assert rollout.worker_class == "examples.rlhf.workers:RolloutWorker"
    assert rollout.kwargs == {"vocab_size": 64, "hidden": 32, "seed": 0, "max_new_tokens": 16}
    assert rollout.supervision_config().call_timeout_s == 60.0
    assert rollout.in_flight is None
    assert spec.metrics.port == 0
    assert spec.driver is not None and spec.driver.function == "examples.rlhf.driver:main"
    assert spec.driver.args["steps"] == 20


def test_rlhf_example_imports_check():
    """check_imports=True on the example: the worker classes import and have init/shutdown methods.

    examples/rlhf/driver.py imports torch at module level, so the driver's import is checked
    statically here (``main`` is a top-level function) to keep torch out of this process.
    """
    torch_before = "torch" in sys.modules
    text, _, driver = EXAMPLE.read_text().partition("\n[driver]")
    assert "examples.rlhf.driver:main" in driver
    spec = parse_spec(text, source=str(EXAMPLE), base_dir=EXAMPLE.parent, check_imports=True)
    assert spec.groups["reference"].init_method == "init_model"
    assert torch_before or "torch" not in sys.modules
    tree = ast.parse((EXAMPLE.parent / "driver.py").read_text())
    assert "main" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


# -- 2. one bad thing, one line -------------------------------------------------------------------

_LONG_NAME = "a" * 65


BAD_SPECS = [
    # (id, text, expected text in the problem, its field path, number of problems (None: not checked))
    pytest.param(doc(pool={"capacity_factor": "0.5"}), "capacity_factor must be a number >= 1.0 (1.0: no spare bundles), got 0.5", "pools.main.capacity_factor", 1, id="capacity_below_one"),
    pytest.param(
        doc(group={"standbys": "2"}, pool={"capacity_factor": "1.5"}),
        "2 standby(s) need as many spare bundles, pool 'main' reserves 1 (capacity_factor 1.5); raise pools.main.capacity_factor",
        "groups.counter.standbys", 1, id="standbys_beyond_spares",
    ),  # fmt: skip
    pytest.param(doc(group={"standbys": "-1"}), "must be >= 0, got -1", "groups.counter.standbys", 1, id="negative_standbys"),
    pytest.param("name = \n", "not valid TOML: Invalid value (at line 1", "not valid TOML", 1, id="invalid_toml"),
    pytest.param(doc(tail="[bogus]\nx = 1\n"), "unknown key (known: driver, groups, metrics, pools, ray, supervisor)", "bogus", 1, id="unknown_section"),
    pytest.param(doc(tail="[metric]\nport = 1\n"), "unknown key (did you mean 'metrics'?)", "metric", 1, id="misspelled_section"),
    pytest.param(
        doc(group={"restart_stratgy": '"one_for_one"'}), "unknown key (did you mean 'restart_strategy'?)", "groups.counter.restart_stratgy", 1, id="unknown_key_did_you_mean"
    ),
    pytest.param(doc(pool={"use_gpus": "false"}), "unknown key (did you mean 'use_gpu'?)", "pools.main.use_gpus", 1, id="unknown_pool_key"),
    pytest.param(doc(pool={"use_gpu": '"yes"'}), "expected a boolean, got string 'yes'", "pools.main.use_gpu", 1, id="string_for_bool"),
    pytest.param(doc(group={"init_attempts": "2.0"}), "expected an integer, got number 2.0", "groups.counter.init_attempts", 1, id="float_for_int"),
    pytest.param(doc(tail="[metrics]\nport = true\n"), "expected an integer, got boolean True", "metrics.port", 1, id="bool_for_int"),
    pytest.param(doc(pool={"max_colocate_count": "true"}), "expected an integer, got boolean True", "pools.main.max_colocate_count", 1, id="bool_for_int_pool"),
    pytest.param(doc(tail="[metrics]\nhost = { a = 1 }\n"), "expected a string, got table {'a': 1}", "metrics.host", 1, id="table_for_string"),
    pytest.param(doc(group={"init_timeout_s": "1979-05-27T07:32:00Z"}), "expected a number, got datetime", "groups.counter.init_timeout_s", 1, id="datetime_for_number"),
    pytest.param(doc(group={"init_timeout_s": "nan"}), "expected a number, got nan", "groups.counter.init_timeout_s", 1, id="nan_for_number"),
    pytest.param(doc(group={"kwargs": "5"}), "expected a table, got integer 5", "groups.counter.kwargs", 1, id="scalar_for_kwargs"),
    pytest.param(doc(group={"env": "{ FOO = 1 }"}), "expected a table of strings, got table {'FOO': 1}", "groups.counter.env", 1, id="env_value_not_string"),
    pytest.param(doc(tail='[ray]\npython_path = "src"\n'), "expected a list of strings, got string 'src'", "ray.python_path", 1, id="string_for_list"),
    pytest.param(doc(tail='[ray]\nresources = { x = "a" }\n'), "expected a table of numbers, got table {'x': 'a'}", "ray.resources", 1, id="resources_not_numbers"),
    pytest.param(
        doc(pool=False, head="pools = 5\n"), "expected a table, got integer 5", "pools", None, id="scalar_for_pools_table"
    ),  # also "at least one pool" and the group's undefined pool: see the report
    pytest.param(doc(pool=False, tail="[pools]\nmain = 5\n"), "expected a table, got integer 5", "pools.main", None, id="scalar_for_pool_table"),
    pytest.param(doc(head="driver = 5\n"), "expected a table", "driver", 1, id="scalar_for_driver"),
    pytest.param(doc(supervisor={"name": None}), "required (it names the pools, actors and state record)", "supervisor.name", 1, id="missing_supervisor_name"),
    pytest.param(doc(supervisor=False), "required", "supervisor.name", 1, id="missing_supervisor_section"),
    pytest.param(doc(supervisor={"name": '"a.b"'}), "'a.b' must be 1 to 64 letters, digits, '_' or '-'", "supervisor.name", 1, id="name_with_dot"),
    pytest.param(doc(supervisor={"name": '""'}), "'' must be 1 to 64 letters", "supervisor.name", 1, id="name_empty"),
    pytest.param(doc(supervisor={"name": f'"{_LONG_NAME}"'}), repr(_LONG_NAME), "supervisor.name", 1, id="name_too_long"),
    pytest.param(
        doc(supervisor={"orphan_grace_s": "2"}), "must exceed twice heartbeat_interval_s (1s), got 2", "supervisor.orphan_grace_s", 1, id="orphan_grace_not_above_2x"
    ),
    pytest.param(
        doc(supervisor={"heartbeat_interval_s": "5", "orphan_grace_s": "10.0"}), "(5s), got 10", "supervisor.orphan_grace_s", 1, id="orphan_grace_equals_2x"
    ),
    pytest.param(doc(supervisor={"heartbeat_interval_s": "0"}), "must be > 0, got 0", "supervisor.heartbeat_interval_s", 1, id="heartbeat_zero"),
    pytest.param(
        doc(tail='[ray]\naddress = "auto"\nlocal_nodes = 2\n'),
        "only for an embedded local Ray; remove it or remove ray.address",
        "ray.local_nodes",
        1,
        id="address_with_local_nodes",
    ),
    pytest.param(doc(tail="[ray]\nlocal_nodes = 0\n"), "must be >= 1, got 0", "ray.local_nodes", 1, id="local_nodes_0"),
    pytest.param(doc(tail="[ray]\nnum_cpus = 0\n"), "must be > 0, got 0", "ray.num_cpus", 1, id="num_cpus_0"),
    pytest.param(doc(tail="[ray]\nnum_gpus = -1\n"), "must be >= 0, got -1", "ray.num_gpus", 1, id="num_gpus_negative"),
    # the group still names pool 'main', so its line is a second, genuine problem
    pytest.param(doc(pool=False), "at least one pool is required ([pools.NAME])", "pools", 2, id="no_pools"),
    pytest.param(doc(group=False), "at least one group is required ([groups.NAME])", "groups", 1, id="no_groups"),
    pytest.param(doc(pool={"process_on_nodes": None}), "required (ranks per node, e.g. [4, 4])", "pools.main.process_on_nodes", 1, id="no_process_on_nodes"),
    pytest.param(doc(pool={"process_on_nodes": "[0]"}), "process_on_nodes[0] must be a positive int, got 0", "pools.main.process_on_nodes", 1, id="process_on_nodes_0"),
    pytest.param(
        doc(pool={"process_on_nodes": "[2, -1]"}), "process_on_nodes[1] must be a positive int, got -1", "pools.main.process_on_nodes", 1, id="process_on_nodes_negative"
    ),
    pytest.param(
        doc(pool={"process_on_nodes": "[]"}), "must be a non-empty list of positive ints, got []", "pools.main.process_on_nodes", 1, id="process_on_nodes_empty"
    ),
    pytest.param(doc(pool={"max_colocate_count": "0"}), "must be a positive int, got 0", "pools.main.max_colocate_count", 1, id="max_colocate_count_0"),
    pytest.param(doc(pool={"resource_timeout_s": "-inf"}), "must be > 0, got -inf", "pools.main.resource_timeout_s", 1, id="resource_timeout_minus_inf"),
    pytest.param(doc(pool={"progress_interval_s": "0"}), "must be > 0, got 0", "pools.main.progress_interval_s", 1, id="progress_interval_0"),
    pytest.param(doc(pool={"strategy": '"packed"'}), "expected one of 'STRICT_PACK', 'PACK', 'SPREAD', 'STRICT_SPREAD', got string 'packed'", "pools.main.strategy", 1, id="bad_strategy"),
    pytest.param(doc(tail='[pools."a b"]\nprocess_on_nodes = [1]\n'), "names may use only letters, digits, '_', '.', '-'", "pools.'a b'", 1, id="bad_pool_name"),
    pytest.param(doc(group={"pool": None}), "required (one of: main)", "groups.counter.pool", 1, id="group_without_pool"),
    pytest.param(doc(group={"pool": '"mian"'}), "pool 'mian' is not defined (pools: main)", "groups.counter.pool", 1, id="group_pool_undefined"),
    pytest.param(doc(group={"class": None}), "required ('module:Class' of the worker)", "groups.counter.class", 1, id="group_without_class"),
    pytest.param(
        doc(group={"class": '"workers.CounterWorker"'}), "expected 'module:Class', got 'workers.CounterWorker'", "groups.counter.class", 1, id="class_not_module_colon_class"
    ),
    pytest.param(doc(group={"class": '"workers:"'}), "expected 'module:Class', got 'workers:'", "groups.counter.class", 1, id="class_empty_attribute"),
    pytest.param(
        doc(group={"class": '"no_such_module_xyz:Worker"'}),
        "cannot import module 'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz'",
        "groups.counter.class",
        1,
        id="class_module_missing",
    ),
    pytest.param(doc(group={"class": '"workers:NoSuchWorker"'}), "module 'workers' has no attribute 'NoSuchWorker'", "groups.counter.class", 1, id="class_attribute_missing"),
    pytest.param(
        doc(group={"class": '"workers:CounterWorker.add"'}), "'workers:CounterWorker.add' is not a class", "groups.counter.class", 1, id="class_not_a_class"
    ),
    pytest.param(doc(group={"init_method": '"init_model"'}), "CounterWorker has no method 'init_model'", "groups.counter.init_method", 1, id="init_method_missing"),
    pytest.param(doc(group={"shutdown_method": '"close"'}), "CounterWorker has no method 'close'", "groups.counter.shutdown_method", 1, id="shutdown_method_missing"),
    pytest.param(doc(group={"init_timeout_s": "-1"}), "must be > 0, got -1", "groups.counter.init_timeout_s", 1, id="negative_init_timeout"),
    pytest.param(doc(group={"probe_timeout_s": "0"}), "must be > 0, got 0", "groups.counter.probe_timeout_s", 1, id="zero_probe_timeout"),
    pytest.param(doc(group={"call_timeout_s": "-0.5"}), "must be > 0, got -0.5", "groups.counter.call_timeout_s", 1, id="negative_call_timeout"),
    pytest.param(doc(group={"backoff_initial_s": "-0.5"}), "must be >= 0, got -0.5", "groups.counter.backoff_initial_s", 1, id="negative_backoff"),
    pytest.param(doc(group={"init_attempts": "0"}), "must be >= 1, got 0", "groups.counter.init_attempts", 1, id="init_attempts_0"),
    pytest.param(doc(group={"max_restarts": "-1"}), "must be >= 0, got -1", "groups.counter.max_restarts", 1, id="max_restarts_negative"),
    pytest.param(doc(group={"init_kwargs": "{ n = 1 }"}), "given without init_method", "groups.counter.init_kwargs", 1, id="init_kwargs_without_init_method"),
    pytest.param(doc(group={"standby_warmup_method": '"add"'}), "given without standbys", "groups.counter.standby_warmup_method", 1, id="warm_up_without_standbys"),
    pytest.param(doc(group={"standby_reach": '"any_node"'}), "given without standbys", "groups.counter.standby_reach", 1, id="reach_without_standbys"),
    pytest.param(doc(group={"standby_nice": "5"}), "given without standbys", "groups.counter.standby_nice", 1, id="nice_without_standbys"),
    pytest.param(doc(group={"standby_sched_idle": "false"}), "given without standbys", "groups.counter.standby_sched_idle", 1, id="sched_idle_without_standbys"),
    pytest.param(doc(group={"standby_preload": '["torch"]'}), "given without standbys", "groups.counter.standby_preload", 1, id="preload_without_standbys"),
    pytest.param(
        doc(group={"standbys": "1", "standby_preload": '["torch..nn"]'}, pool={"capacity_factor": "2.0"}),
        "'torch..nn' is not a module name", "groups.counter.standby_preload", 1, id="preload_bad_module_name",
    ),  # fmt: skip
    pytest.param(doc(group={"preload": '["torch", "2torch"]'}), "'2torch' is not a module name", "groups.counter.preload", 1, id="group_preload_bad_module_name"),
    pytest.param(doc(group={"preload": '"torch"'}), "expected a list of strings, got string 'torch'", "groups.counter.preload", 1, id="group_preload_a_string"),
    pytest.param(
        doc(group={"standbys": "1", "standby_nice": "20"}, pool={"capacity_factor": "2.0"}),
        "must be 0..19 (a nice increment), got 20", "groups.counter.standby_nice", 1, id="nice_out_of_range",
    ),  # fmt: skip
    pytest.param(
        doc(group={"standby_reach": '"anywhere"'}, pool={"capacity_factor": "2.0"}),
        "expected one of 'same_node', 'any_node', got string 'anywhere'", "groups.counter.standby_reach", 1, id="unknown_reach",
    ),  # fmt: skip
    pytest.param(doc(group={"env": '{ RANK = "3", FOO = "x" }'}), "may not override RANK", "groups.counter.env", 1, id="env_reserved"),
    pytest.param(
        doc(group={"restart_strategy": '"all_for_one"'}),
        "expected one of 'one_for_one', 'one_for_all', got string 'all_for_one'",
        "groups.counter.restart_strategy",
        1,
        id="bad_restart_strategy",
    ),
    pytest.param(doc(group={"in_flight": '"sometimes"'}), "expected one of 'retry', 'raise', got string 'sometimes'", "groups.counter.in_flight", 1, id="bad_in_flight"),
    pytest.param(doc(tail="[metrics]\nport = 70000\n"), "must be 0..65535, got 70000", "metrics.port", 1, id="metrics_port_70000"),
    pytest.param(doc(tail="[metrics]\nport = -1\n"), "must be 0..65535, got -1", "metrics.port", 1, id="metrics_port_negative"),
    pytest.param(doc(tail="[driver]\nargs = { steps = 1 }\n"), "required ('module:function' run once the groups are ready)", "driver.function", 1, id="driver_without_function"),
    pytest.param(doc(tail='[driver]\nfunction = "workers"\n'), "expected 'module:function', got 'workers'", "driver.function", 1, id="driver_function_format"),
    pytest.param(
        doc(tail='[driver]\nfunction = "no_such_module_xyz:main"\n'), "cannot import module 'no_such_module_xyz'", "driver.function", 1, id="driver_module_missing"
    ),
    pytest.param(doc(tail='[driver]\nfunction = "workers:no_such_main"\n'), "module 'workers' has no attribute 'no_such_main'", "driver.function", 1, id="driver_attr_missing"),
    pytest.param(doc(tail='[driver]\nfunction = "supervisor:__version__"\n'), "'supervisor:__version__' is not callable", "driver.function", 1, id="driver_not_callable"),
    # -- bugs the first version had --
    pytest.param(
        doc(supervisor=False, head="supervisor = 5\n"),
        "expected a table, got integer 5",
        "supervisor",
        1,
        id="was_bug_scalar_for_supervisor_table",
    ),
    pytest.param(
        doc(pool={"process_on_nodes": '["2"]'}),
        "expected a list of integers, got list ['2']",
        "pools.main.process_on_nodes",
        1,
        id="was_bug_list_of_strings_for_process_on_nodes",
    ),
    pytest.param(
        doc(group={"pool": "5"}),
        "expected a string, got integer 5",
        "groups.counter.pool",
        1,
        id="was_bug_int_for_group_pool",
    ),
    pytest.param(
        doc(group={"args": "5"}),
        "expected a list, got integer 5",
        "groups.counter.args",
        1,
        id="was_bug_scalar_for_args",
    ),
    pytest.param(
        doc(group={'"bad\\nkey"': "1"}),
        "unknown key",
        None,
        1,
        id="was_bug_line_break_in_unknown_key",
    ),
    pytest.param(
        doc(tail='[ray]\npython_path = ["a\\u0000b"]\n'),
        "embedded null byte",
        "ray.python_path",
        1,
        id="was_bug_nul_in_python_path",
    ),
]


@pytest.mark.parametrize(("text", "expected", "path", "count"), BAD_SPECS)
def test_bad_spec_is_one_clear_line(text, expected, path, count):
    problems = _problems(text)
    if count is not None:
        assert len(problems) == count, problems
    matching = [p for p in problems if expected in p and (path is None or _path_of(p) == path)]
    assert matching, f"no problem at {path!r} containing {expected!r} in {problems}"


def test_import_error_spanning_lines_is_reported_on_one_line(tmp_path):
    (tmp_path / "spec_multiline_import_xyz.py").write_text('raise RuntimeError("first line\\nsecond line")\n')
    text = doc(group={"class": '"spec_multiline_import_xyz:W"'}, tail=f"[ray]\npython_path = [{str(tmp_path)!r}]\n")
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.toml")
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith("groups.counter.class: cannot import module 'spec_multiline_import_xyz': RuntimeError: first line")
    assert "second line" not in info.value.problems[0]
    _assert_well_formed(info.value, "bad.toml")


def test_spec_error_survives_pickling():
    with pytest.raises(SpecError) as info:
        parse_spec(doc(tail="[metrics]\nport = 70000\n"), source="p.toml")
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is SpecError
    assert (clone.source, clone.problems, str(clone)) == ("p.toml", info.value.problems, str(info.value))


# -- 3. several problems --------------------------------------------------------------------------

MANY_PROBLEMS = """\
extra = 1

[metrics]
port = 70000

[groups.counter]
pool = "mian"
class = "workers:CounterWorker"
max_restarts = -1

[pools.main]
process_on_nodes = [2]
max_colocate_count = 0
use_gpu = "no"

[ray]
local_nodes = 0

[supervisor]
name = "a.b"
"""


def test_all_problems_are_reported_in_a_stable_order():
    expected = [
        # key and type problems first, section by section, then the cross-field rules in the same order
        "extra: unknown key (known: driver, groups, metrics, pools, ray, supervisor)",
        "pools.main.use_gpu: expected a boolean, got string 'no'",
        "supervisor.name: 'a.b' must be 1 to 64 letters, digits, '_' or '-'",
        "ray.local_nodes: must be >= 1, got 0",
        "pools.main.max_colocate_count: max_colocate_count must be a positive int, got 0",
        "groups.counter.pool: pool 'mian' is not defined (pools: main)",
        "groups.counter.max_restarts: must be >= 0, got -1",
        "metrics.port: must be 0..65535, got 70000",
    ]
    assert _problems(MANY_PROBLEMS, source="many.toml") == expected
    assert _problems(MANY_PROBLEMS, source="many.toml") == expected  # deterministic


def test_every_import_problem_is_reported():
    text = doc(
        pool={"max_colocate_count": "2"},
        group={"class": '"no_such_module_xyz:A"'},
        tail=(
            '[groups.other]\npool = "main"\nclass = "workers:CounterWorker"\ninit_method = "nope"\nshutdown_method = "nada"\n'
            '[driver]\nfunction = "workers:missing_main"\n'
        ),
    )
    assert [_path_of(p) for p in _problems(text)] == [
        "groups.counter.class",
        "groups.other.init_method",
        "groups.other.shutdown_method",
        "driver.function",
    ]


def test_imports_are_not_checked_when_disabled():
    assert parse_spec(doc(group={"class": '"no_such_module_xyz:A"'}), check_imports=False).groups["counter"].worker_class == "no_such_module_xyz:A"


# -- 4. files ------------------------------------------------------------------------------------


def test_load_spec_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems == ["cannot read the spec: No such file or directory"]
    assert str(info.value) == f"{path}: cannot read the spec: No such file or directory"


def test_load_spec_directory(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert info.value.problems == ["cannot read the spec: Is a directory"]


def test_load_spec_names_the_file_in_every_line(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(MANY_PROBLEMS)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    _assert_well_formed(info.value, str(path))
    assert len(info.value.problems) == 8


# -- 5. fuzzing -----------------------------------------------------------------------------------

BASE_DOC: dict[str, Any] = {
    "supervisor": {"name": "fuzz", "heartbeat_interval_s": 1.0, "orphan_grace_s": 30.0},
    "ray": {"local_nodes": 2, "num_cpus": 4, "num_gpus": 0, "resources": {"custom": 1.0}, "python_path": ["."]},
    "pools": {
        "main": {"process_on_nodes": [2, 2], "use_gpu": False, "max_colocate_count": 1, "strategy": "PACK", "resource_timeout_s": math.inf},
    },
    "groups": {
        "counter": {
            "pool": "main",
            "class": "workers:CounterWorker",
            "kwargs": {"offset": 1},
            "env": {"FOO": "bar"},
            "init_method": "add",
            "init_kwargs": {"n": 1},
            "restart_strategy": "one_for_all",
            "call_timeout_s": 30.0,
            "in_flight": "retry",
            "shutdown_method": "unregistered",
        },
    },
    "metrics": {"host": "127.0.0.1", "port": 0},
    "driver": {"function": "supervisor.daemon.spec:load_spec", "args": {"x": 1}},
}
KNOWN_KEYS = sorted({k for section in BASE_DOC.values() for k in section} | set(SECTIONS) | {"address", "max_restarts", "args", "main", "counter"})

# Strings never contain ':' except these, so check_imports only ever imports modules known to be harmless.
_SAFE_STRINGS = ["", "main", "one_for_one", "ONE_FOR_ALL", "raise", "spread", "workers:CounterWorker", "workers:NoSuch", "no_such_module_xyz:X", "supervisor:__version__"]
_texts = st.text(alphabet=st.characters(exclude_characters=":", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(_SAFE_STRINGS)
_keys = st.sampled_from(KNOWN_KEYS) | st.text(max_size=8)
_scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, -1, 2, 65536, 0.0, -0.5, 2.5, math.inf, -math.inf, math.nan]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    _texts,
    st.datetimes(min_value=dt.datetime(1000, 1, 1)),
    st.datetimes(min_value=dt.datetime(1000, 1, 1), timezones=st.just(dt.UTC)),
    st.dates(min_value=dt.date(1000, 1, 1)),
    st.times(),
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3), max_leaves=6)


def _toml_string(text: str) -> str:
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def to_toml(document: dict[str, Any]) -> str:
    """Top-level tables as ``[section]`` headers, everything nested as inline tables."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for key, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{_toml_key(key)}]")
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _same(a: Any, b: Any) -> bool:
    """Deep equality where nan equals nan (to check the serializer round-trips)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _get(document: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def _paths(document: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for key, value in document.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out


@st.composite
def mutated_docs(draw: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE_DOC)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(document)
        kind = draw(st.sampled_from(["drop", "replace", "add", "rename"]))
        if kind == "add":
            tables = [()] + [p for p in paths if isinstance(_get(document, p), dict)]
            _get(document, draw(st.sampled_from(tables)))[draw(_keys)] = draw(_values)
        elif kind == "rename":
            tables = [p for p in paths if isinstance(_get(document, p), dict)]
            if tables:
                path = draw(st.sampled_from(tables))
                parent = _get(document, path[:-1])
                parent[draw(_keys)] = parent.pop(path[-1])
        elif paths:
            path = draw(st.sampled_from(paths))
            parent = _get(document, path[:-1])
            if kind == "drop":
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(_values)
    return document


def _keys_of(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in (key, *_keys_of(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys_of(v)]
    return []


def _check_outcome(text: str, raw: dict[str, Any] | None, check_imports: bool) -> None:
    """parse_spec either returns a consistent spec or raises a well-formed SpecError; nothing else."""
    try:
        spec = parse_spec(text, source="fuzz.toml", check_imports=check_imports)
    except SpecError as exc:
        _assert_well_formed(exc, "fuzz.toml")
        if raw is None:
            assert len(exc.problems) == 1 and exc.problems[0].startswith("not valid TOML: "), exc.problems
            return
        roots = set(SECTIONS) | set(raw) | {repr(k) for k in raw}  # an unknown top-level key is named by itself
        for problem in exc.problems:
            path = _path_of(problem)
            assert any(path == r or path.startswith(r + ".") for r in roots), problem
        return
    assert raw is not None
    assert isinstance(spec, SupervisorSpec)
    # what a spec that passed validation guarantees
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", spec.name)
    assert spec.supervisor.orphan_grace_s > 2 * spec.supervisor.heartbeat_interval_s > 0
    assert spec.pools and spec.groups
    assert all(p.process_on_nodes and all(type(n) is int and n > 0 for n in p.process_on_nodes) for p in spec.pools.values())
    assert all(g.pool in spec.pools and ":" in g.worker_class for g in spec.groups.values())
    assert all(g.init_attempts >= 1 and g.max_restarts >= 0 for g in spec.groups.values())
    assert 0 <= spec.metrics.port <= 65535
    for group in spec.groups.values():
        group.supervision_config()  # the library accepts every validated value


_FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(mutated_docs(), st.booleans())
def test_fuzz_mutated_specs(document, check_imports):
    saved_path = list(sys.path)  # check_imports may prepend random python_path entries
    try:
        text = to_toml(document)
        raw = tomllib.loads(text)
        assert _same(raw, document), text  # the test's own serializer is faithful
        _check_outcome(text, raw, check_imports)
    finally:
        sys.path[:] = saved_path


def test_fuzz_base_document_is_valid():
    """The fuzzing starts from a valid spec, so its mutations explore the edges of validity."""
    spec = parse_spec(to_toml(BASE_DOC), check_imports=True)
    assert spec.groups["counter"].supervision_config().restart.strategy is RestartStrategy.ONE_FOR_ALL


def _try_toml(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


@_FUZZ
@given(st.text(max_size=200))
def test_fuzz_arbitrary_text(text):
    raw = _try_toml(text)
    _check_outcome(text, raw, check_imports=False)


_FRAGMENTS = [
    "[supervisor]\n", 'name = "f"\n', "name = 5\n", "orphan_grace_s = 2\n", "[ray]\n", "local_nodes = 0\n", 'address = "auto"\n',
    "[pools.p]\n", "[pools]\n", "process_on_nodes = [1]\n", "process_on_nodes = []\n", "max_colocate_count = 0\n", "[groups.g]\n",
    'pool = "p"\n', 'pool = "q"\n', 'class = "workers:CounterWorker"\n', 'class = "workers"\n', 'init_method = "add"\n',
    "init_kwargs = {a = 1}\n", 'env = {RANK = "1"}\n', "[metrics]\n", "port = 70000\n", "[driver]\n", 'function = "supervisor.daemon.spec:load_spec"\n',
    "x = 1\n", "inf", "-1", "= ", '"', "[", "]", "{", "}", ",", ".", "\n", " ",
]  # fmt: skip


@_FUZZ
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=25).map("".join), st.booleans())
def test_fuzz_toml_shaped_text(text, check_imports):
    raw = _try_toml(text)
    _check_outcome(text, raw, check_imports)


# -- 6. the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch):
    """Run ``supervisor ...``; a Daemon (or any Ray connection) would fail the test."""
    import structlog

    import supervisor.observability.log
    from supervisor.cli.commands import main

    def no_daemon(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an invalid spec must not reach the daemon")

    monkeypatch.setitem(sys.modules, "supervisor.daemon.daemon", types.SimpleNamespace(Daemon=no_daemon))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    monkeypatch.setattr(supervisor.observability.log, "_configured", supervisor.observability.log._configured)
    saved = structlog.get_config()  # `start` points structlog at the runner's stderr; undo that after
    yield lambda *args: CliRunner().invoke(main, list(args))
    structlog.reset_defaults()
    structlog.configure(**saved)


def test_cli_start_invalid_spec_exits_2_with_one_error_line_per_problem(cli, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(doc(group={"pool": '"mian"'}, tail="[metrics]\nport = 70000\n"))
    result = cli("start", str(path))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {path}: groups.counter.pool: pool 'mian' is not defined (pools: main)",
        f"error: {path}: metrics.port: must be 0..65535, got 70000",
    ]


def test_cli_start_missing_spec(cli, tmp_path):
    path = tmp_path / "missing.toml"
    result = cli("start", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {path}: cannot read the spec: No such file or directory"]


def test_cli_start_import_problem(cli, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(doc(group={"class": '"workers:NoSuchWorker"'}))
    result = cli("start", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {path}: groups.counter.class: module 'workers' has no attribute 'NoSuchWorker'"]


# -- resource budgets ------------------------------------------------------------------------------


def _colocated(**per_group: str) -> str:
    """A pool of max_colocate_count 2 shared by the groups given as ``name="key = value, ..."``."""
    tail = "".join(f'[groups.{name}]\npool = "main"\nclass = "workers:CounterWorker"\n{opts.replace(", ", chr(10))}\n' for name, opts in per_group.items())
    return doc(pool={"max_colocate_count": "2"}, group=False, tail=tail)


def test_colocated_gpu_fractions_over_a_bundle_name_groups_and_arithmetic():
    text = _colocated(rollout="gpus_per_worker = 0.5", critic="gpus_per_worker = 0.5", ref="gpus_per_worker = 0.5, cpus_per_worker = 0")
    assert _problems(text) == ["pools.main: rollout 0.5 + critic 0.5 + ref 0.5 GPU = 1.5 > 1 GPU per bundle"]


def test_colocated_cpus_over_a_bundle():
    assert _problems(_colocated(actor="cpus_per_worker = 1.5", critic="cpus_per_worker = 1")) == [
        "pools.main: actor 1.5 + critic 1 CPU = 2.5 > 2 CPU per bundle"
    ]


def test_budgets_that_fit_exactly_pass_and_default_to_an_even_gpu_share():
    spec = parse_spec(_colocated(actor="", critic=""))
    assert [(b.group, b.cpus, b.gpus) for b in spec.worker_budgets()] == [("actor", 1.0, 0.5), ("critic", 1.0, 0.5)]
    thirds = doc(pool={"max_colocate_count": "3"}, group=False, tail="".join(
        f'[groups.g{i}]\npool = "main"\nclass = "workers:CounterWorker"\ngpus_per_worker = {1 / 3}\n' for i in range(3)
    ))  # fmt: skip
    assert len(parse_spec(thirds).groups) == 3  # 3 x 1/3 is not "more than 1"


def test_gpus_in_a_cpu_pool_and_negative_budgets_are_one_line_each():
    assert _problems(doc(pool={"use_gpu": "false"}, group={"gpus_per_worker": "0.5"})) == [
        "groups.counter.gpus_per_worker: pool 'main' has use_gpu = false"
    ]
    assert _problems(doc(group={"data_processes_per_worker": "-1"})) == ["groups.counter.data_processes_per_worker: must be >= 0, got -1"]


def test_standbys_need_a_worker_subclass():
    text = doc(pool={"capacity_factor": "2.0"}, group={"class": '"collections:OrderedDict"', "standbys": "1"})
    assert _problems(text) == ["groups.counter.standbys: OrderedDict is not a supervisor.Worker subclass, so it cannot take over a rank"]
    spec = parse_spec(doc(pool={"capacity_factor": "2.0"}, group={"standbys": "2"}))
    assert spec.pools["main"].spare_bundles == 2
    pool = spec.resource_pool("main")
    assert (pool.spare_bundle_count, pool.spare_placement_group_name()) == (2, "unit.main:pg2:spare2")
    assert pool.reserved_total() == {"CPU": 4.0, "GPU": 4.0}  # the spares are reserved like the ranks' bundles
