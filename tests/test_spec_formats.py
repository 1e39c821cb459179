"""Specs in YAML as in TOML (one model, the same one-line errors), and the spec's JSON Schema: generated
from the model, committed, and true to every example spec."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from supervisor.cli.commands import main
from supervisor.daemon.spec import RUN_GROUP_KEYS, GroupSpec, PoolSpec, SpecError, load_spec, parse_spec
from supervisor.daemon.spec_format import SpecFormat, format_of
from supervisor.daemon.spec_schema import spec_schema

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
COMMITTED_SCHEMA = EXAMPLES / "spec.schema.json"

MINIMAL_TOML = """
[supervisor]
name = "s"
[pools.p]
process_on_nodes = [2]
[groups.g]
pool = "p"
class = "workers:CounterWorker"
"""
MINIMAL_YAML = """
supervisor: {name: s}
pools:
  p: {process_on_nodes: [2]}
groups:
  g: {pool: p, class: "workers:CounterWorker"}
"""


def _problems(text: str, fmt: SpecFormat) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="s", check_imports=False, fmt=fmt)
    return info.value.problems


def test_the_yaml_example_is_the_toml_example():
    toml, yml = load_spec(EXAMPLES / "rlhf/rlhf.toml"), load_spec(EXAMPLES / "rlhf/rlhf.yaml")
    assert toml == yml


@pytest.mark.parametrize(("name", "fmt"), [("job.toml", SpecFormat.TOML), ("job.yaml", SpecFormat.YAML), ("JOB.YML", SpecFormat.YAML), ("job", SpecFormat.TOML)])
def test_the_format_follows_the_file_name(name, fmt):
    assert format_of(name) is fmt


def test_yaml_and_toml_give_the_same_spec_and_the_same_problems():
    assert parse_spec(MINIMAL_TOML, check_imports=False) == parse_spec(MINIMAL_YAML, check_imports=False, fmt=SpecFormat.YAML)
    toml = _problems(MINIMAL_TOML.replace('pool = "p"', 'pool = "p"\nmax_restarts = "ten"\nmax_restart = 1'), SpecFormat.TOML)
    yml = _problems(MINIMAL_YAML.replace("{pool: p,", "{pool: p, max_restarts: ten, max_restart: 1,"), SpecFormat.YAML)
    assert toml == yml == ["groups.g.max_restart: unknown key (did you mean 'max_restarts'?)", "groups.g.max_restarts: expected an integer, got string 'ten'"]


def test_yaml_null_and_inf_mean_not_set_and_no_limit():
    spec = parse_spec(
        MINIMAL_YAML.replace("{pool: p,", "{pool: p, call_timeout_s: null, init_method: ~,") + "  q: {pool: p, class: 'workers:CounterWorker', call_timeout_s: .inf}\n",
        check_imports=False, check_budget=False, fmt=SpecFormat.YAML,
    )  # fmt: skip
    assert spec.groups["g"].call_timeout_s is None and spec.groups["g"].init_method is None and spec.groups["q"].call_timeout_s is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("supervisor: {name: s\n", "not valid YAML: "),
        ("supervisor:\n  name: s\n  name: t\n", "not valid YAML: key 'name' is given twice (line 3, column 3)"),
        ("- supervisor\n", "expected a mapping of sections (supervisor, ray, pools, ...), got a YAML list"),
        ("supervisor: {name: s}\npools:\n  1: {process_on_nodes: [2]}\n", "pools.1: keys must be strings (quote it: '1')"),
        ("supervisor: {name: s}\nray:\n  num_cpus: null\n", "ray.num_cpus: expected an integer, got null"),
    ],
)
def test_bad_yaml_is_one_line_naming_where(text, problem):
    problems = _problems(text, SpecFormat.YAML)
    assert problems[0].startswith(problem), problems
    assert all("\n" not in p for p in problems)


def test_validate_takes_yaml_specs(tmp_path):
    result = CliRunner().invoke(main, ["validate", str(EXAMPLES / "rlhf/rlhf.yaml")])
    assert result.exit_code == 0 and result.output.strip().endswith("valid (supervisor rlhf-demo: 4 pool(s), 4 group(s), a driver)"), result.output
    bad = tmp_path / "bad.yml"
    bad.write_text(MINIMAL_YAML.replace("{process_on_nodes: [2]}", "{process_on_nodes: [2], strategy: SPREAD_OUT}"))
    result = CliRunner().invoke(main, ["validate", "--no-imports", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {bad}: pools.p.strategy: expected one of 'STRICT_PACK', 'PACK', 'SPREAD', 'STRICT_SPREAD', got string 'SPREAD_OUT'"


# -- the schema --------------------------------------------------------------------------------


def test_the_committed_schema_is_the_generated_one():
    out = CliRunner().invoke(main, ["schema"])
    assert out.exit_code == 0
    assert json.loads(out.output) == spec_schema() == json.loads(COMMITTED_SCHEMA.read_text()), (
        "regenerate it: supervisor schema > examples/spec.schema.json"
    )
    assert yaml.safe_load(CliRunner().invoke(main, ["schema", "-o", "yaml"]).output) == spec_schema()
    Draft202012Validator.check_schema(spec_schema())


def _example_specs() -> list[tuple[str, dict]]:
    specs = [(str(p.relative_to(ROOT)), tomllib.loads(p.read_text())) for p in sorted(EXAMPLES.glob("**/*.toml"))]
    specs += [(str(p.relative_to(ROOT)), yaml.safe_load(p.read_text())) for p in sorted(EXAMPLES.glob("**/*.yaml"))]
    for manifest in sorted((ROOT / "ops/kuberay").glob("*.yaml")):  # the specs in the ConfigMaps
        for doc in yaml.safe_load_all(manifest.read_text()):
            if doc and doc.get("kind") == "ConfigMap":
                specs += [(f"{manifest.name}:{key}", tomllib.loads(text)) for key, text in doc["data"].items() if key.endswith(".toml")]
    return specs


@pytest.mark.parametrize(("where", "raw"), _example_specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_example_spec_is_valid_under_the_schema(where, raw):
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in Draft202012Validator(spec_schema()).iter_errors(raw)]
    assert errors == [], where


def test_the_schema_flags_what_editors_should():
    validator = Draft202012Validator(spec_schema())
    base = tomllib.loads(MINIMAL_TOML)

    def errors(change) -> list[str]:
        raw = json.loads(json.dumps(base))
        change(raw)
        return [e.message for e in validator.iter_errors(raw)]

    assert errors(lambda r: None) == []
    assert any("'retsrats' was unexpected" in m for m in errors(lambda r: r["groups"]["g"].update(retsrats=1)))
    assert any("is not of type 'integer'" in m for m in errors(lambda r: r["groups"]["g"].update(max_restarts="ten")))
    assert any("is not one of ['one_for_one', 'one_for_all']" in m for m in errors(lambda r: r["groups"]["g"].update(restart_strategy="all")))
    assert any("'class' is a required property" in m for m in errors(lambda r: r["groups"]["g"].pop("class")))
    assert any("'pools' was unexpected" not in m and "'pool' was unexpected" in m for m in errors(lambda r: r.update(run={"groups": {"g": {"pool": "p"}}})))
    assert errors(lambda r: r.update(run={"groups": {"actor_rollout_ref": {"max_restarts": 3, "in_flight": "retry"}}})) == []


def test_the_schema_has_every_field_of_the_model():
    props = spec_schema()["properties"]
    group = props["groups"]["additionalProperties"]["properties"]
    assert set(group) == {"class" if f.name == "worker_class" else f.name for f in dataclasses.fields(GroupSpec)}
    assert set(props["pools"]["additionalProperties"]["properties"]) == {f.name for f in dataclasses.fields(PoolSpec)}
    assert set(props["run"]["properties"]["groups"]["additionalProperties"]["properties"]) == RUN_GROUP_KEYS
    assert group["max_restarts"]["default"] == GroupSpec.max_restarts and group["restart_strategy"]["default"] == "one_for_one"
    assert group["cpus_per_worker"]["description"] == "Reserved in the bundle (Ray's num_cpus)"
