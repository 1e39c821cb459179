"""The JSON Schema of a spec, generated from the spec model (:mod:`.spec`'s dataclasses), for editors:
Taplo (TOML) and yaml-language-server complete field names and flag unknown keys and wrong types.

Each table's fields, types, enum values and defaults come from the dataclasses, and each field's
description from the comment beside or above it in their source, so the schema has no second list of
fields to forget. What the schema cannot say (a group's pool must be defined, budgets, imports,
value ranges that depend on other fields) stays ``supervisor validate``'s.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import re
import types
import typing
from typing import Any

from .spec import (
    RUN_GROUP_KEYS,
    TOML_KEYS,
    DriverSpec,
    GroupSpec,
    MetricsSpec,
    PoolSpec,
    RaySpec,
    SupervisorSection,
)

__all__ = ["SCHEMA_ID", "spec_schema"]

SCHEMA_ID = "https://ray-supervisor.invalid/spec.schema.json"  # an id, not a place: the file ships with the package
_NAME_PATTERN = "^[A-Za-z0-9_.-]+$"  # pool and group names (validate_name_prefix)
_REQUIRED: dict[type, list[str]] = {PoolSpec: ["process_on_nodes"], GroupSpec: ["pool", "class"], DriverSpec: ["function"]}


def spec_schema() -> dict[str, Any]:
    """The schema of a ``supervisor start`` or ``supervisor run`` spec (JSON Schema draft 2020-12)."""
    run_group = _table(GroupSpec, only=RUN_GROUP_KEYS, required=[])
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


def _table(cls: type, only: frozenset[str] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = TOML_KEYS.get(f.name, f.name)
        if only is not None and key not in only:
            continue
        prop = _type(hints[f.name])
        default = _default(f)
        if default is not None:
            prop["default"] = default
        if f.name in comments:
            prop["description"] = comments[f.name]
        properties[key] = prop
    table: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    doc = inspect.getdoc(cls)
    if doc:
        table["description"] = doc.split("\n\n")[0].replace("\n", " ").replace("``", "`")
    wanted = _REQUIRED.get(cls, []) if required is None else required
    if wanted:
        table["required"] = wanted
    return table


def _type(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = _type([a for a in args if a is not type(None)][0])
        return {"anyOf": [inner, {"type": "null"}]}  # null: YAML's "not set" (TOML writes inf for "no limit")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    if origin is list:
        return {"type": "array", "items": _type(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type(args[1])}
    if hint is Any:
        return {}
    return {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[hint]}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return None
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float) and math.isinf(value):
        return None
    return value if value not in ("", [], {}) else None


_FIELD = re.compile(r"^    (\w+): [^#\n]*?(?:#\s*(.*))?$")


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: the one after it on its line, else the lines above."""
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match:
            text = match.group(2) or " ".join(above)
            text = re.sub(r"\s*\(the TOML key is ``class``\)", "", text).replace("``", "`")
            if text:
                comments[match.group(1)] = text[0].upper() + text[1:]
        above = []
    return comments
