"""The JSON Schema of a spec, generated from the spec model (:mod:`.spec`'s pydantic dataclasses), for
editors: Taplo (TOML) and yaml-language-server complete field names and flag unknown keys and wrong types.

Each table's fields, types, enum values, defaults, descriptions (the docstring below each field) and
required keys come from its model, so the schema has no second list of fields to forget. What the
schema cannot say (a group's pool must be defined, budgets, imports, value ranges that depend on other
fields) stays ``supervisor validate``'s.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from .spec import RUN_GROUP_KEYS, DriverSpec, GroupSpec, MetricsSpec, PoolSpec, RaySpec, SupervisorSection

__all__ = ["SCHEMA_ID", "spec_schema"]

SCHEMA_ID = "https://ray-supervisor.invalid/spec.schema.json"  # an id, not a place: the file ships with the package
_NAME_PATTERN = "^[A-Za-z0-9_.-]+$"  # pool and group names (validate_name_prefix)


def spec_schema() -> dict[str, Any]:
    """The schema of a ``supervisor start`` or ``supervisor run`` spec (JSON Schema draft 2020-12)."""
    run_group = _table(GroupSpec, only=RUN_GROUP_KEYS)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "ray-supervisor spec",
        "description": "One supervisor: `supervisor start SPEC` (pools, groups, driver) or `supervisor run --spec SPEC` "
        "([run.groups.NAME]). Check a spec with `supervisor validate SPEC`.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "supervisor": _table(SupervisorSection),
            "ray": _table(RaySpec),
            "pools": _named(_table(PoolSpec), "Resource pools by name: [pools.NAME]."),
            "groups": _named(_table(GroupSpec), "Worker groups by name: [groups.NAME]."),
            "metrics": _table(MetricsSpec),
            "driver": _table(DriverSpec),
            "run": {
                "type": "object",
                "description": "`supervisor run` only: the supervision settings of the groups the program creates.",
                "additionalProperties": False,
                "properties": {"groups": _named(run_group, "By verl group name (name_prefix) or resource pool name.")},
            },
        },
    }


def _named(table: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "propertyNames": {"pattern": _NAME_PATTERN}, "additionalProperties": table}


def _table(cls: type, only: frozenset[str] | None = None) -> dict[str, Any]:
    """A model's schema, self-contained (enums inline) and plain (no titles, no "not set" defaults);
    ``only``: just these keys, none of them required (a ``[run.groups.NAME]`` table)."""
    schema = TypeAdapter(cls).json_schema(by_alias=True)
    enums = schema.pop("$defs", {})
    schema["description"] = schema["description"].split("\n\n")[0].replace("\n", " ").replace("``", "`")
    if only is not None:
        schema["properties"] = {key: prop for key, prop in schema["properties"].items() if key in only}
        schema.pop("required", None)
    return _plain(schema, enums)


def _plain(node: Any, enums: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(item, enums) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:  # an enum: its values, not its definition's title and docstring
        kind = enums[node["$ref"].rpartition("/")[2]]
        node = {"type": kind["type"], "enum": kind["enum"], **{k: v for k, v in node.items() if k != "$ref"}}
    plain = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value in (None, "", [], {})):
            continue
        plain[key] = " ".join(value.split()) if key == "description" else _plain(value, enums)
    return plain
