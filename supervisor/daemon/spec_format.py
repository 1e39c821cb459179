"""A spec's text as tables: TOML, or YAML (verl users keep their configs in YAML). Both give the
same nested dict to :mod:`.spec`, which validates it, so the model and its one-line errors are the
same whatever the file's format."""

from __future__ import annotations

import enum
import functools
import tomllib
import typing
from pathlib import Path
from typing import Any

__all__ = ["SpecFormat", "format_of", "parse_document"]


class SpecFormat(enum.StrEnum):
    TOML = "toml"
    YAML = "yaml"


def format_of(path: str | Path) -> SpecFormat:
    """YAML for ``.yaml`` and ``.yml`` files, TOML for every other name."""
    return SpecFormat.YAML if Path(path).suffix.lower() in (".yaml", ".yml") else SpecFormat.TOML


def parse_document(text: str, fmt: SpecFormat) -> tuple[dict[str, Any] | None, list[str]]:
    """The document's tables, or None and the one-line problems that made it unreadable."""
    if fmt is SpecFormat.TOML:
        try:
            return tomllib.loads(text), []
        except tomllib.TOMLDecodeError as exc:
            return None, [f"not valid TOML: {exc}"]
    return _parse_yaml(text)


def _parse_yaml(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    import yaml

    try:
        document = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader that refuses duplicate keys
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return None, [f"not valid YAML: {exc.problem or exc.context}{where}"]
    except yaml.YAMLError as exc:
        return None, [f"not valid YAML: {exc}".splitlines()[0]]
    if document is None:
        return {}, []
    if not isinstance(document, dict):
        return None, [f"expected a mapping of sections (supervisor, ray, pools, ...), got a YAML {type(document).__name__}"]
    problems: list[str] = []
    _check_keys(document, "", problems)
    return (None if problems else document), problems


def _check_keys(node: Any, path: str, problems: list[str]) -> None:
    # TOML keys are always strings; YAML's may be numbers or booleans (`1:`, `yes:`), which no spec
    # field is: name them rather than fail later on a lookup.
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                problems.append(f"{path}{key!r}: keys must be strings (quote it: '{key}')")
                continue
            _check_keys(value, f"{path}{key}.", problems)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _check_keys(item, f"{path.rstrip('.')}[{i}].", problems)


@functools.cache
def _strict_loader() -> type:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader, but a key given twice in one mapping is an error (TOML's rule), not the last one wins."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, typing.Hashable):
                    break  # SafeLoader names an unhashable key itself
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader
