"""The docs site's generated pages: references built from the code at build time, so they cannot drift.

A page asks for one with a marker line, ``<!-- generated: NAME -->``; :func:`on_page_markdown` (an
MkDocs hook, see ``mkdocs.yml``) replaces it with :data:`GENERATORS` ``[NAME]()``. Each fact has one
source: the spec's fields come from its JSON Schema (itself generated from the spec's dataclasses and
their comments), the metrics from the registry, the errors from the exception classes, the Python API
from ``supervisor.__all__``, the layers from the package's own imports, the interface between
supervision and the group from core's ``SupervisedGroup`` Protocol. The CLI reference is
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


def _code_cell(text: str) -> str:
    """Like :func:`_cell`, for text with code spans whose pipes (``X | None``) stay as they are: the
    tables extension does not split a cell inside a code span, and would show the escape there."""
    parts = _RST_ROLE.sub(r"`\1`", text).replace("\n", " ").split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


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


def _sub_layer(module: str, prefix: str) -> str:
    """The sub-layer of ``prefix`` that ``module`` is in (``""``: ``prefix`` itself)."""
    return module.removeprefix(prefix).removeprefix(".").split(".")[0]


def _import_graph(under: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """Sub-layer -> the sub-layers its modules import, inside ``supervisor.<under>`` (a sub-layer is a
    subpackage or a top-level module of it; ``""`` its own ``__init__``). Imports leaving it are dropped."""
    prefix = ".".join(["supervisor", *under])
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.joinpath(*under).rglob("*.py")):
        if "_assets" in path.parts:
            continue
        source = _sub_layer(_module_name(path), prefix)
        inside = {_sub_layer(m, prefix) for m in _imported_modules(path) if m.startswith(prefix + ".")}
        graph.setdefault(source, set()).update(t for t in inside if t not in (source, ""))
    return graph


def layer_graph() -> dict[str, set[str]]:
    """Layer -> the layers its modules import (function-level and annotation-only imports included);
    a top-level module (``errors``, ``failure``, ``fencing``, ``retrying``, ``version``) is a layer of its own."""
    graph = _import_graph()
    graph.pop("", None)
    return graph


def layer_bands(graph: dict[str, set[str]], order: tuple[str, ...] = LAYERS) -> list[list[str]]:
    """The layers stacked as bands, bottom up: each layer in the lowest band above every layer it
    imports, so a layer imports only bands below its own and always something of the band directly
    below. Layers that import each other (``run`` and ``integrations``) share a band. Inside a band,
    in ``order``."""
    layers = set(graph) | {t for targets in graph.values() for t in targets}

    def reach(layer: str) -> set[str]:
        seen, todo = set(), [layer]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {layer: reach(layer) for layer in layers}
    mates = {layer: {layer} | {o for o in reaches[layer] if layer in reaches[o]} for layer in layers}
    level: dict[str, int] = {}

    def level_of(layer: str) -> int:
        if layer not in level:
            below = {t for m in mates[layer] for t in graph.get(m, ()) if t not in mates[layer]}
            level[layer] = 1 + max((level_of(t) for t in below), default=-1)
        return level[layer]

    rank = {layer: i for i, layer in enumerate(order)}
    bands: list[list[str]] = [[] for _ in range(1 + max((level_of(layer) for layer in layers), default=-1))]
    for layer in sorted(layers, key=lambda name: (rank.get(name, len(rank)), name)):
        bands[level_of(layer)].append(layer)
    return bands


_PARENTHESES = re.compile(r" ?\([^()]*\)")


def _short(text: str) -> str:
    """``text``'s first sentence without its asides in parentheses (what a band of the figure says)."""
    while _PARENTHESES.search(text):
        text = _PARENTHESES.sub("", text)
    return re.split(r"(?<=\.) (?=[A-Z])", text, maxsplit=1)[0]


_INLINE_CODE = re.compile(r"``([^`]+)``|`([^`]+)`")


def _inline_html(text: str) -> str:
    """A docstring's text as HTML: Sphinx roles and ``code`` as <code>."""
    text = _RST_ROLE.sub(r"`\1`", text)
    out, last = [], 0
    for match in _INLINE_CODE.finditer(text):
        out += [html.escape(text[last : match.start()]), f"<code>{html.escape(match.group(1) or match.group(2))}</code>"]
        last = match.end()
    return "".join(out + [html.escape(text[last:])])


ROOT_LAYER = "supervisor"  # the package's own __init__ (the public API): the top band
# The lanes' colours, one per importing layer (told apart side by side; cycled past twelve).
LANE_COLOURS = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#393b79", "#637939",
)  # fmt: skip


def architecture_diagram() -> str:
    """The layers stacked as bands (lowest at the bottom), each saying what it owns, and, in a lane of
    its own per importing layer, only the imports that skip a band (an import of the band directly
    below is what the stacking says). Then the table of every layer's imports. HTML and CSS only
    (``docs/stylesheets/extra.css``), so the text wraps and no line crosses it."""
    graph = layer_graph()
    bands = layer_bands(graph)
    root_imports = {t for t in _import_graph().get("", set()) if t}
    bands.append([ROOT_LAYER])
    full = {**graph, ROOT_LAYER: root_imports}
    band_of = {layer: i for i, band in enumerate(bands) for layer in band}
    rows = [layer for band in reversed(bands) for layer in band]  # top to bottom
    skips = {
        source: sorted((t for t in targets if band_of[t] < band_of[source] - 1), key=rows.index)
        for source, targets in full.items()
    }
    lanes = sorted((s for s in skips if skips[s]), key=lambda s: -rows.index(s))  # the shortest next to the text
    docs = _layer_docs()
    row_of = {layer: i for i, layer in enumerate(rows)}

    def lane_cell(lane: str, layer: str) -> str:
        top, bottom, row = row_of[lane], row_of[skips[lane][-1]], row_of[layer]
        style = f' style="--lane: {colours[lane]}"'
        if row == top:
            return f'<div class="ls-lane ls-start"{style} title="{lane} imports, skipping a band: {", ".join(skips[lane])}"></div>'
        if not top < row <= bottom:
            return '<div class="ls-lane"></div>'
        kind = "ls-end" if row == bottom else "ls-through"
        if layer in skips[lane]:
            return f'<div class="ls-lane {kind} ls-import"{style} title="{lane} imports {layer}"></div>'
        return f'<div class="ls-lane {kind}"{style}></div>'

    colours = {lane: LANE_COLOURS[i % len(LANE_COLOURS)] for i, lane in enumerate(lanes)}
    out = [f'<div class="layer-stack" style="--lanes: {len(lanes)}" role="figure" aria-label="the layers of the supervisor package, stacked">']
    out.append('<div class="ls-row ls-head"><div class="ls-layer"></div>')
    out += [f'<div class="ls-lane-name" style="color: {colours[lane]}">{html.escape(lane)}</div>' for lane in lanes]
    out.append("</div>")
    for layer in rows:
        band = band_of[layer]
        first = bands[band][0] == layer
        mates = [t for t in full.get(layer, ()) if band_of[t] == band]
        text = f'<code class="ls-name">{html.escape(ROOT_LAYER + (".__init__" if layer == ROOT_LAYER else "." + layer))}</code> '
        text += _inline_html(_short(docs.get("__init__" if layer == ROOT_LAYER else layer, "")))
        if mates:
            text += " <span class=\"ls-mates\">⇄ " + ", ".join(f"<code>{html.escape(m)}</code>" for m in sorted(mates)) + "</span>"
        if layer == "core":
            text += _core_stack()
        classes = f"ls-row ls-band-{band % 2}" + (" ls-band-top" if first else "")
        out.append(f'<div class="{classes}"><div class="ls-layer">{text}</div>')
        out += [lane_cell(lane, layer) for lane in lanes]
        out.append("</div>")
    out.append("</div>")
    table = [
        f"| `{source}` | {_cell(docs.get(source, ''))} | {', '.join(f'`{t}`' for t in sorted(graph[source])) or 'nothing'} |"
        for source in rows
        if source in graph
    ]
    return "\n".join(["".join(out), "", "| layer | owns | imports |", "|---|---|---|", *table])


def _core_stack() -> str:
    """Core's own sub-layers, stacked the same way (a small figure inside core's band)."""
    graph = _import_graph(("core",))
    graph.pop("", None)
    docs = _layer_docs(PACKAGE / "core")
    out = ['<div class="ls-core">']
    for band in reversed(layer_bands(graph, order=tuple(sorted(graph)))):
        out.append('<div class="ls-core-band">')
        for layer in band:
            out.append(f'<div class="ls-core-layer"><code class="ls-name">{html.escape(layer)}</code> {_inline_html(_short(docs.get(layer, "")))}</div>')
        out.append("</div>")
    return "".join(out + ["</div>"])


def _layer_docs(package: Path = PACKAGE) -> dict[str, str]:
    """Layer -> what it owns: the ``Owns:`` paragraph of its docstring, else its first line
    (``__init__``: the package's own)."""
    out = {}
    paths = {path.stem: path for path in package.glob("*.py")}
    paths |= {init.parent.name: init for init in package.glob("*/__init__.py")}
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


# -- the interface between supervision and the group -------------------------------------------------

INTERFACE_FILE = PACKAGE / "core" / "group" / "interface.py"
INTERFACE_CLASS = "SupervisedGroup"


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).split(".")[-1].split("[")[0] == "Protocol" for base in node.bases)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``name(arg: T = default, ...) -> R``, without ``self``."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parts = []

    def one(arg: ast.arg, default: ast.expr | None, star: str = "") -> str:
        text = star + arg.arg + (f": {ast.unparse(arg.annotation)}" if arg.annotation else "")
        return text + (f" = {ast.unparse(default)}" if default is not None else "")

    parts = [one(arg, default) for arg, default in zip(positional, defaults, strict=True) if arg.arg != "self"]
    if args.vararg:
        parts.append(one(args.vararg, None, "*"))
    elif args.kwonlyargs:
        parts.append("*")
    parts += [one(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg:
        parts.append(one(args.kwarg, None, "**"))
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{node.name}({', '.join(parts)}){returns}"


def _class_doc_notes(doc: str) -> dict[str, str]:
    """What a class docstring says of its members in passing: ````name```` (or ````a```` and ````b````)
    followed by ``(what it is)``."""
    notes = {}
    for match in re.finditer(r"``(\w+)``((?: and ``\w+``)*) \(([^()]*)\)", doc):
        for name in [match.group(1), *re.findall(r"``(\w+)``", match.group(2))]:
            notes.setdefault(name, " ".join(match.group(3).split()))
    return notes


def _member_rows(cls: ast.ClassDef, lines: list[str]) -> list[str]:
    """One table row per public member of a Protocol class: a property or attribute with its type, a
    method with its signature, each with what it is: the first paragraph of its docstring (an
    attribute's: the string right below it), else the comment right above it (or above the members
    right before it, with no blank line between), else what the class docstring says of it."""
    notes = _class_doc_notes(ast.get_docstring(cls) or "")
    rows: list[str] = []
    comment, previous_end = "", 0
    for i, node in enumerate(cls.body):
        above = []
        line = node.lineno - 2 - len(getattr(node, "decorator_list", []))
        while line >= 0 and lines[line].strip().startswith("#"):
            above.insert(0, lines[line].strip().lstrip("#").strip())
            line -= 1
        if above:
            comment = " ".join(above)
        elif previous_end != line + 1:  # a blank line (or a docstring) ends what a comment above says
            comment = ""
        previous_end = node.end_lineno or node.lineno
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name, doc = node.name, ast.get_docstring(node) or ""
            if any(ast.unparse(d).endswith("property") for d in node.decorator_list):
                kind = f"property: `{ast.unparse(node.returns)}`" if node.returns else "property"
            else:
                kind = f"`{_signature(node)}`"
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            following = cls.body[i + 1] if i + 1 < len(cls.body) else None
            is_doc = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)
            name, doc = node.target.id, inspect.cleandoc(following.value.value) if is_doc else ""
            kind = f"attribute: `{ast.unparse(node.annotation)}`"
        else:
            continue
        if name.startswith("_"):
            continue
        what = " ".join(doc.split("\n\n")[0].split()) or comment or notes.get(name, "—")
        rows.append(f"| `{name}` | {_code_cell(kind)} | {_code_cell(what)} |")
    return rows


def supervised_group_interface(path: Path = INTERFACE_FILE) -> str:
    """The members of core's :data:`INTERFACE_CLASS` Protocol (what supervision, state, the daemon and
    the integrations may use of a group), read from its source with their docstrings."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        raise FileNotFoundError(
            f"the generated block 'supervised-group-interface' reads the typing.Protocol {INTERFACE_CLASS} from {where}, "
            "which does not exist: add the file, or remove the block's marker from the page"
        )
    source = path.read_text()
    tree = ast.parse(source)
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == INTERFACE_CLASS and _is_protocol(n)]
    if not found:
        raise LookupError(f"{where} defines no typing.Protocol named {INTERFACE_CLASS} (the generated block 'supervised-group-interface' reads it)")
    cls = found[0]
    rows = _member_rows(cls, source.splitlines())
    if not rows:
        raise LookupError(f"{where}: the Protocol {INTERFACE_CLASS} has no public member to document")
    doc = " ".join((ast.get_docstring(cls) or "").split("\n\n")[0].split())
    head = [f"`{INTERFACE_CLASS}` (`{where}`): {_cell(doc)}", ""] if doc else []
    return "\n".join([*head, "| member | kind | what it is |", "|---|---|---|", *rows])


GENERATORS: dict[str, Callable[[], str]] = {
    "spec-reference": spec_reference,
    "metrics-reference": metrics_reference,
    "errors-reference": errors_reference,
    "api-reference": api_reference,
    "architecture-diagram": architecture_diagram,
    "modules-reference": modules_reference,
    "supervised-group-interface": supervised_group_interface,
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

