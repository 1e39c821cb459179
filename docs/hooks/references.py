"""The docs site's generated pages: references built from the code at build time, so they cannot drift.

A page asks for one with a marker line, ``<!-- generated: NAME -->``; :func:`on_page_markdown` (an
MkDocs hook, see ``mkdocs.yml``) replaces it with :data:`GENERATORS` ``[NAME]()``. Each fact has one
source: the spec's fields come from its JSON Schema (itself generated from the spec's dataclasses and
their comments), the metrics from the registry, the errors from the exception classes, the Python API
from ``supervisor.__all__``, the layers from the package's own imports. The CLI reference is
mkdocs-click's, from the click commands (``reference/cli.md``).

The site's address is set once, in ``ops/docs_url`` (alerts link their runbook pages under it):
:func:`on_config` makes it the site's ``site_url``.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "supervisor"
DOCS_URL_FILE = ROOT / "ops" / "docs_url"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
# The layers of the package, bottom up: the order the diagram draws them in.
LAYERS = (
    "errors", "version", "failure", "retrying", "observability", "fencing", "placement", "core", "state", "supervision", "daemon", "integrations",
    "run", "cli", "compat",
)  # fmt: skip


def docs_url() -> str:
    """The docs site's base address (``ops/docs_url``: its one line that is not a comment)."""
    lines = [ln.strip() for ln in DOCS_URL_FILE.read_text().splitlines()]
    urls = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(urls) != 1:
        raise ValueError(f"{DOCS_URL_FILE} must hold one address besides its comments, found {len(urls)}")
    url = urls[0]
    return url if url.endswith("/") else url + "/"


# -- the spec ---------------------------------------------------------------------------------------


def _schema_type(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return " or ".join(_schema_type(p) for p in prop["anyOf"] if p.get("type") != "null") + " (or unset)"
    if "enum" in prop:
        return " or ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type")
    if kind == "array":
        return f"array of {_schema_type(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict) and prop["additionalProperties"]:
        return f"table of {_schema_type(prop['additionalProperties'])}"
    return {None: "any", "object": "table"}.get(kind, kind)


def _default_text(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return "unset"
    value = prop["default"]
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


_RST_ROLE = re.compile(r":(?:class|mod|func|meth|data|attr|exc):`~?\.?([^`]+)`")


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: Sphinx roles (docstrings) as code, no pipes or newlines."""
    return _RST_ROLE.sub(r"`\1`", text).replace("|", "\\|").replace("\n", " ")


def _spec_table(heading: str, table: dict[str, Any]) -> list[str]:
    required = set(table.get("required", []))
    out = [f"### `{heading}`", ""]
    if table.get("description"):
        out += [table["description"], ""]
    out += ["| field | type | default | description |", "|---|---|---|---|"]
    for key, prop in table["properties"].items():
        out.append(
            f"| `{key}` | {_cell(_schema_type(prop))} | {_default_text(prop, key in required)} | {_cell(prop.get('description', ''))} |"
        )
    return out + [""]


def spec_reference() -> str:
    """Every table and field of a spec, from :func:`supervisor.daemon.spec_schema.spec_schema`."""
    from supervisor.daemon.spec_schema import spec_schema

    schema = spec_schema()
    out = [schema["description"], ""]
    for name, section in schema["properties"].items():
        if name == "run":
            out += ["### `[run]`", "", section["description"], ""]
            groups = section["properties"]["groups"]
            out += _spec_table("[run.groups.NAME]", groups["additionalProperties"])
        elif "propertyNames" in section:  # pools and groups: tables by name
            out += _spec_table(f"[{name}.NAME]", section["additionalProperties"])
        else:
            out += _spec_table(f"[{name}]", section)
    return "\n".join(out)


# -- the metrics ------------------------------------------------------------------------------------


def _doc_comments(path: Path) -> dict[str, str]:
    """``NAME`` -> the ``#:`` comment lines right above ``NAME = ...`` in ``path`` (Sphinx's attribute doc comments)."""
    found: dict[str, str] = {}
    above: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#:"):
            above.append(line[2:].strip())
            continue
        match = re.match(r"^([A-Z_]+) = ", line)
        if match and above:
            found[match.group(1)] = " ".join(above)
        above = []
    return found


def metrics_reference() -> str:
    """Every metric of the registry: exported name, type, labels, help, and when it is recorded (the
    ``#:`` comment above its definition)."""
    from supervisor.observability import metrics

    notes = _doc_comments(Path(metrics.__file__))
    found = {
        const: m
        for const, m in vars(metrics).items()
        if hasattr(m, "_name") and hasattr(m, "_labelnames") and hasattr(m, "_documentation") and not isinstance(m, type)
    }
    out = [
        "Every series also carries `supervisor` (the daemon's name). Counters are exported with the "
        "`_total` suffix; histograms as `_bucket`, `_sum` and `_count`.",
        "",
        "| metric | type | labels | help | recorded |",
        "|---|---|---|---|---|",
    ]
    for const, metric in sorted(found.items(), key=lambda item: item[1]._name):
        name = metric._name + ("_total" if metric._type == "counter" else "")
        labels = ", ".join(f"`{label}`" for label in metric._labelnames) or "none"
        out.append(f"| `{name}` | {metric._type} | {labels} | {_cell(metric._documentation)} | {_cell(notes.get(const, ''))} |")
    return "\n".join(out)


# -- the errors -------------------------------------------------------------------------------------


def _first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return _RST_ROLE.sub(r"`\1`", " ".join(doc.split("\n\n")[0].split()))


def _load_everything() -> None:
    import supervisor

    for module in pkgutil.walk_packages(supervisor.__path__, "supervisor."):
        if module.name.startswith(("supervisor.compat", "supervisor.integrations")):
            continue  # they import verl-only and optional packages; their errors are the core's
        importlib.import_module(module.name)


def errors_reference() -> str:
    """The exception hierarchy under :class:`supervisor.errors.SupervisorError`, with where to import each."""
    import supervisor
    from supervisor.errors import SupervisorError

    _load_everything()
    exported = {getattr(supervisor, name): name for name in supervisor.__all__ if inspect.isclass(getattr(supervisor, name, None))}

    def lines(cls: type, depth: int) -> list[str]:
        where = f"`supervisor.{exported[cls]}`" if cls in exported else f"`{cls.__module__}.{cls.__qualname__}`"
        std = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"]
        also = f" (also `{'`, `'.join(std)}`)" if std else ""
        out = [f"{'    ' * depth}- **{cls.__name__}**{also}: {_first_paragraph(cls)} Import: {where}."]
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            if sub.__module__.startswith("supervisor"):
                out += lines(sub, depth + 1)
        return out

    return "\n".join(lines(SupervisorError, 0))


# -- the Python API ---------------------------------------------------------------------------------


def api_reference() -> str:
    """One mkdocstrings block per name of ``supervisor.__all__``, by the module that defines it."""
    import supervisor

    out = []
    for name in sorted(supervisor.__all__, key=str.lower):
        if name.startswith("__"):
            continue
        obj = getattr(supervisor, name)
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", name)
        out += [f"## `supervisor.{name}`", "", f"::: {module}.{qualname}", "    options:", "      show_root_heading: false", "      show_root_toc_entry: false", ""]
    return "\n".join(out)


# -- the layers -------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "supervisor"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            out |= {target, *(f"{target}.{alias.name}" for alias in node.names)}  # `from .. import errors` too
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("supervisor")}


def layer_graph() -> dict[str, set[str]]:
    """Layer -> the layers its modules import (function-level and annotation-only imports included);
    a top-level module (``errors``, ``failure``, ``fencing``, ``retrying``, ``version``) is a layer of its own."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_assets" in path.parts:
            continue
        source = _layer(_module_name(path))
        targets = {_layer(m) for m in _imported_modules(path)}
        graph.setdefault(source, set()).update(t for t in targets if t != source)
    graph.pop("supervisor", None)
    for targets in graph.values():
        targets.discard("supervisor")
    return graph


def architecture_diagram() -> str:
    """The layers as an inline SVG, bottom layer at the bottom, an arrow for each layer another imports."""
    graph = layer_graph()
    order = [layer for layer in LAYERS if layer in graph] + sorted(set(graph) - set(LAYERS))
    docs = _layer_docs()
    row_h, box_w, box_h = 56, 240, 34
    rows = list(reversed(order))
    width = 20 + box_w + 14 + 24 * len(rows) + 20
    height = row_h * len(rows) + 20
    y_of = {layer: 10 + i * row_h for i, layer in enumerate(rows)}
    x_box = 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="the layers of the supervisor package and the layers each imports" class="layer-diagram">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#888"/></marker></defs>',
    ]
    # Each import edge is drawn as an arc on the right of the boxes, further out the more rows it spans.
    for source in rows:
        for target in sorted(graph.get(source, ()), key=lambda t: y_of.get(t, 0)):
            if target not in y_of:
                continue
            y1, y2 = y_of[source] + box_h / 2, y_of[target] + box_h / 2
            span = abs(rows.index(source) - rows.index(target))
            bulge = x_box + box_w + 14 + 24 * span
            parts.append(
                f'<path d="M {x_box + box_w} {y1:.0f} C {bulge} {y1:.0f}, {bulge} {y2:.0f}, {x_box + box_w} {y2:.0f}" '
                f'fill="none" stroke="#888" stroke-width="1" marker-end="url(#arrow)"/>'
            )
    for layer in rows:
        y = y_of[layer]
        parts.append(f'<rect x="{x_box}" y="{y}" width="{box_w}" height="{box_h}" rx="5" fill="#e8eaf6" stroke="#3f51b5"/>')
        label = f"supervisor.{layer}"
        parts.append(f'<text x="{x_box + 10}" y="{y + 22}" font-family="monospace" font-size="13">{html.escape(label)}</text>')
    parts.append("</svg>")
    edges = [
        f"| `{source}` | {_cell(docs.get(source, ''))} | {', '.join(f'`{t}`' for t in sorted(graph[source])) or 'nothing'} |"
        for source in rows
    ]
    return "\n".join(["".join(parts), "", "| layer | owns | imports |", "|---|---|---|", *edges])


def _layer_docs() -> dict[str, str]:
    """Layer -> what it owns: the ``Owns:`` paragraph of its docstring, else its first line."""
    out = {}
    paths = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    paths |= {init.parent.name: init for init in PACKAGE.glob("*/__init__.py")}
    for layer, path in paths.items():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        owns = [p for p in doc.split("\n\n") if p.startswith("Owns:")]
        out[layer] = " ".join((owns[0].removeprefix("Owns:") if owns else doc.split("\n")[0]).split())
    return out


def modules_reference() -> str:
    """Every module of the package with the first sentence of its docstring, by layer."""
    out = []
    for sub in [PACKAGE, *sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists())]:
        modules = sorted(sub.glob("*.py")) if sub != PACKAGE else sorted(p for p in PACKAGE.glob("*.py"))
        if not modules:
            continue
        title = "supervisor (top level)" if sub == PACKAGE else f"supervisor.{sub.name}"
        out += [f"### `{title}`", "", "| module | what it holds |", "|---|---|"]
        for path in modules:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            first = " ".join(doc.split("\n\n")[0].split())
            out.append(f"| `{path.name}` | {_cell(first)} |")
        out.append("")
        for nested in sorted(p for p in sub.iterdir() if sub != PACKAGE and (p / "__init__.py").exists()):
            out += [f"`supervisor.{sub.name}.{nested.name}`: " + ", ".join(f"`{p.name}`" for p in sorted(nested.glob("*.py"))), ""]
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "spec-reference": spec_reference,
    "metrics-reference": metrics_reference,
    "errors-reference": errors_reference,
    "api-reference": api_reference,
    "architecture-diagram": architecture_diagram,
    "modules-reference": modules_reference,
}


def expand(markdown: str) -> str:
    """``markdown`` with every marker replaced by what its generator makes."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"no generator named {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)


# -- MkDocs hooks -----------------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    config["site_url"] = docs_url()
    return config


# Files outside docs/ that pages show: the benchmark's plot lives with the benchmark that draws it.
EXTERNAL_FILES = ("bench/goodput.png",)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path in EXTERNAL_FILES:
        files.append(File(path, src_dir=str(ROOT), dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)

