"""The package's layering, read off its import graph.

Every import counts: module-level, function-level and annotation-only (``if TYPE_CHECKING:``) ones.

* the graph has no cycle;
* no module of ``supervisor/core/`` imports ``supervisor/supervision/`` (supervision fills core's
  seams, e.g. :mod:`supervisor.core.group.call_runner`, instead);
* every layer imports only the layers :data:`MAY_IMPORT` lists for it (the table the subpackages'
  docstrings state), and every entry of the table is used;
* inside ``core``, every sub-layer (its subpackages ``protocol``, ``worker``, ``group`` and its
  top-level modules) imports only what :data:`CORE_MAY_IMPORT` lists (the table the subpackages'
  docstrings state), and every entry of it is used;
* no module is longer than :data:`MAX_LINES` (a few modules outside core are listed as known to be
  longer: splitting them is left to their owners);
* no module file name is used twice in the package (``__init__.py`` aside), so a name says which
  module it is.

Each check has a self-test showing it can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "supervisor"

# Layer -> the layers it may import. A layer is a subpackage (``core``), a top-level module
# (``errors``) or ``""``, the package's own ``__init__`` (the curated public API).
MAY_IMPORT: dict[str, set[str]] = {
    "": {"core", "errors", "failure", "observability", "placement", "supervision", "version"},
    "errors": set(),
    "version": set(),
    # The one classification of errors and the reasons a rank is replaced: every layer's vocabulary.
    "failure": {"errors"},
    "retrying": set(),
    "fencing": {"errors", "observability"},
    # The hooks read placement's and supervision's facts through protocols of their own.
    "observability": {"failure", "version"},
    "placement": {"errors", "fencing", "observability"},
    "core": {"errors", "failure", "fencing", "observability", "placement", "retrying"},
    "state": {"core", "errors", "fencing", "observability"},
    "supervision": {"core", "errors", "failure", "observability", "placement", "retrying", "state"},
    "daemon": {"core", "errors", "failure", "fencing", "observability", "placement", "retrying", "state", "supervision"},
    "compat": {"core", "placement"},
    "integrations": {"core", "daemon", "errors", "fencing", "observability", "placement", "run", "state", "supervision", "retrying"},
    "run": {"daemon", "errors", "integrations", "observability", "placement"},
    "cli": {"core", "daemon", "errors", "observability", "placement", "run", "supervision", "version"},
}  # fmt: skip

# Inside core: sub-layer -> what it may import. A sub-layer is a subpackage of core (``protocol``) or
# a top-level module of it (``state_tree``); an entry names sub-layers of core and layers outside it.
# The batch protocol is shared by both sides of a call and needs neither; a rank's code never
# imports the driver's side; the driver's side uses both.
CORE_MAY_IMPORT: dict[str, set[str]] = {
    "": set(),
    "state_tree": set(),
    "protocol": {"errors"},
    "worker": {"state_tree", "errors", "observability", "retrying"},
    "group": {"protocol", "worker", "errors", "failure", "fencing", "observability", "placement", "retrying"},
}

MAX_LINES = 600
# Longer than MAX_LINES, outside core: known, to be split by their owners (no module of core may be here).
KNOWN_LONG = {
    "supervisor.cli.commands",
    "supervisor.daemon.kv",
    "supervisor.daemon.spec",
    "supervisor.integrations.verl.supervised_group",
    "supervisor.placement.pool",
    "supervisor.state.domain",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    return _imports_in(name, path.name == "__init__.py", path.read_text(), set(modules))


def _imports_in(name: str, is_package: bool, source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the source of module ``name`` imports, anywhere in it."""
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            out |= set(subs) if len(subs) == len(node.names) else {target, *subs}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _in(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def _core_imports_of_supervision(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _in(m, "supervisor.core")
        for t in targets
        if _in(t, "supervisor.supervision")
    )


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_edges(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """layer -> {imported layer: the module edges that make it}."""
    out: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        for target in targets:
            if _layer(module) != _layer(target):
                out.setdefault(_layer(module), {}).setdefault(_layer(target), []).append(
                    f"{module} -> {target}"
                )
    return out


def _layer_violations(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    return sorted(
        edge
        for layer, imported in _layer_edges(graph).items()
        for target, edges in imported.items()
        if target not in table.get(layer, set())
        for edge in edges
    )


def _unused_entries(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    edges = _layer_edges(graph)
    return sorted(
        f"{layer} -> {t}"
        for layer, targets in table.items()
        for t in targets
        if t not in edges.get(layer, {})
    )


def _core_sublayer(module: str) -> str | None:
    """The sub-layer of core ``module`` is in (``""`` for core's own ``__init__``), None outside core."""
    parts = module.split(".")
    return (parts[2] if len(parts) > 2 else "") if _in(module, "supervisor.core") else None


def _core_edges(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """core's sub-layer -> {imported sub-layer of core, or layer outside it: the module edges that make it}."""
    out: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        if (sub := _core_sublayer(module)) is None:
            continue
        for target in targets:
            to = _core_sublayer(target)
            to = _layer(target) if to is None else to
            if to != sub:
                out.setdefault(sub, {}).setdefault(to, []).append(f"{module} -> {target}")
    return out


def _core_violations(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    return sorted(
        edge
        for sub, imported in _core_edges(graph).items()
        for target, edges in imported.items()
        if target not in table.get(sub, set())
        for edge in edges
    )


def _core_unused_entries(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    edges = _core_edges(graph)
    return sorted(f"{sub} -> {t}" for sub, targets in table.items() for t in targets if t not in edges.get(sub, {}))


def _repeated_file_names(paths: list[Path]) -> dict[str, list[str]]:
    """File name -> the paths that use it, for every name (but ``__init__.py``) more than one path uses."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(path.as_posix())
    return {name: sorted(ps) for name, ps in by_name.items() if len(ps) > 1}


def _too_long(lengths: dict[str, int], limit: int, known: set[str]) -> list[str]:
    return sorted(
        f"{m}: {n} lines"
        for m, n in lengths.items()
        if n > limit and (m not in known or _in(m, "supervisor.core"))
    )


def test_no_import_cycle():
    graph = _graph()
    assert "supervisor.supervision.supervisor" in graph and graph["supervisor.supervision.supervisor"]
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_core_does_not_import_supervision():
    assert _core_imports_of_supervision(_graph()) == []


def test_layers_import_only_what_the_table_allows():
    graph = _graph()
    assert set(MAY_IMPORT) == {_layer(m) for m in graph}, "every layer has an entry"
    assert _layer_violations(graph, MAY_IMPORT) == []
    assert _unused_entries(graph, MAY_IMPORT) == [], "the table says more than the code does"


def test_core_sublayers_import_only_what_the_table_allows():
    graph = _graph()
    subs = {s for m in graph if (s := _core_sublayer(m)) is not None}
    assert {"protocol", "worker", "group"} <= subs
    assert set(CORE_MAY_IMPORT) == subs, "every sub-layer of core has an entry"
    assert _core_violations(graph, CORE_MAY_IMPORT) == []
    assert _core_unused_entries(graph, CORE_MAY_IMPORT) == [], "the table says more than the code does"


def test_no_module_file_name_is_used_twice():
    paths = [p.relative_to(PACKAGE.parent) for p in PACKAGE.rglob("*.py")]
    assert len(paths) > 100
    assert _repeated_file_names(paths) == {}


def test_modules_are_at_most_max_lines():
    lengths = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert not any(_in(m, "supervisor.core") for m in KNOWN_LONG)
    assert _too_long(lengths, MAX_LINES, KNOWN_LONG) == []


# -- the checks can fail --------------------------------------------------------------------------


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_reader_sees_function_level_and_type_checking_imports():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..supervision.gate import CallGate\n"
        "def f():\n    from ..supervision import supervised_call\n"
    )
    modules = {
        "supervisor.core.x",
        "supervisor.supervision",
        "supervisor.supervision.gate",
        "supervisor.supervision.supervised_call",
    }
    found = _imports_in("supervisor.core.x", False, source, modules)
    assert found == {"supervisor.supervision.gate", "supervisor.supervision.supervised_call"}
    assert _core_imports_of_supervision({"supervisor.core.x": found}) == [
        "supervisor.core.x -> supervisor.supervision.gate",
        "supervisor.core.x -> supervisor.supervision.supervised_call",
    ]


def test_the_table_check_finds_a_forbidden_and_an_unused_edge():
    graph = {"supervisor.core.a": {"supervisor.daemon.b"}, "supervisor.daemon.b": set()}
    assert _layer_violations(graph, {"core": set(), "daemon": set()}) == [
        "supervisor.core.a -> supervisor.daemon.b"
    ]
    assert _layer_violations(graph, {"core": {"daemon"}, "daemon": set()}) == []
    assert _unused_entries(graph, {"core": {"daemon", "errors"}, "daemon": set()}) == ["core -> errors"]


def test_the_core_check_finds_a_forbidden_and_an_unused_edge():
    graph = {
        "supervisor.core.protocol.data": {"supervisor.core.worker.env", "supervisor.errors"},
        "supervisor.core.worker.env": {"supervisor.core.worker.modes"},
        "supervisor.core.worker.modes": set(),
        "supervisor.errors": set(),
    }
    table = {"protocol": {"errors"}, "worker": {"group"}}
    assert _core_violations(graph, table) == ["supervisor.core.protocol.data -> supervisor.core.worker.env"]
    assert _core_unused_entries(graph, table) == ["worker -> group"]
    assert _core_sublayer("supervisor.core") == "" and _core_sublayer("supervisor.errors") is None


def test_the_name_check_finds_a_repeated_file_name():
    paths = [Path(p) for p in ("s/a/events.py", "s/b/events.py", "s/a/__init__.py", "s/b/__init__.py", "s/c.py")]
    assert _repeated_file_names(paths) == {"events.py": ["s/a/events.py", "s/b/events.py"]}


def test_the_length_check_finds_a_long_module_and_holds_core_to_it():
    lengths = {"supervisor.core.a": 601, "supervisor.daemon.b": 601, "supervisor.daemon.c": 600}
    assert _too_long(lengths, 600, set()) == [
        "supervisor.core.a: 601 lines",
        "supervisor.daemon.b: 601 lines",
    ]
    assert _too_long(lengths, 600, {"supervisor.core.a", "supervisor.daemon.b"}) == [
        "supervisor.core.a: 601 lines"
    ]


def _stated_imports(layer: str) -> set[str]:
    """The layers ``supervisor/<layer>/__init__.py``'s docstring says it may import."""
    doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text())) or ""
    (stated,) = [p for p in doc.split("\n\n") if p.startswith("May import:")]
    return set(re.findall(r"``(\w+)``", stated.split("checked against")[0]))


def test_every_layers_docstring_states_the_imports_the_table_allows():
    layers = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "_assets")
    assert "core" in layers and "supervision" in layers
    wrong = {layer: (_stated_imports(layer), MAY_IMPORT[layer]) for layer in layers if _stated_imports(layer) != MAY_IMPORT[layer]}
    assert not wrong, "docstring says, table says: " + repr(wrong)


def test_every_core_subpackages_docstring_states_the_imports_the_table_allows():
    subpackages = sorted(p.parent.name for p in (PACKAGE / "core").glob("*/__init__.py"))
    assert subpackages == ["group", "protocol", "worker"]
    wrong = {
        sub: (_stated_imports(f"core/{sub}"), CORE_MAY_IMPORT[sub])
        for sub in subpackages
        if _stated_imports(f"core/{sub}") != CORE_MAY_IMPORT[sub]
    }
    assert not wrong, "docstring says, table says: " + repr(wrong)


# -- the interface between core and the layers above it ------------------------------------------
# Actor endpoints every supervised worker has (``_supervisor_start_heartbeat``...): the protocol
# between the driver and a rank's actor, prefixed so that a user's method never clashes with them.
ACTOR_ENDPOINT_PREFIX = "_supervisor_"


def _private_names(source: str) -> tuple[set[str], set[str]]:
    """``(classes, private names)`` a module defines: ``_``-prefixed methods and ``self._x`` attributes."""
    classes, names = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("_") and not node.name.startswith("__"):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
            and node.value.id == "self" and node.attr.startswith("_") and not node.attr.startswith("__")
        ):  # fmt: skip
            names.add(node.attr)
    return classes, {n for n in names if not n.startswith(ACTOR_ENDPOINT_PREFIX)}


def _private_core_accesses(core: dict[str, str], others: dict[str, str]) -> list[str]:
    """Where a module outside core uses a private name of core: ``obj._x`` on another object (unless
    the module defines ``_x`` itself, so the object is likely its own), and, in a subclass of a core
    class, ``self._x``/``super()._x`` and overriding ``_x`` (a subclass reaching into its base)."""
    core_classes, core_private = set(), set()
    for source in core.values():
        classes, names = _private_names(source)
        core_classes |= classes
        core_private |= names
    found: list[str] = []
    for module, source in sorted(others.items()):
        _PrivateAccesses(module, _private_names(source)[1], core_classes, core_private, found).visit(ast.parse(source))
    return found


class _PrivateAccesses(ast.NodeVisitor):
    def __init__(self, module: str, own: set[str], core_classes: set[str], core_private: set[str], found: list[str]) -> None:
        self.module, self.own, self.core_classes, self.core_private, self.found = module, own, core_classes, core_private, found
        self.subclass: list[bool] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.subclass.append(bool({ast.unparse(b).split(".")[-1] for b in node.bases} & self.core_classes))
        self.generic_visit(node)
        self.subclass.pop()

    def _in_subclass(self) -> bool:
        return bool(self.subclass) and self.subclass[-1]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if self._in_subclass() and node.name in self.core_private:
            self.found.append(f"{self.module}:{node.lineno}: overrides {node.name}")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in self.core_private:
            receiver = ast.unparse(node.value)
            on_self = receiver in ("self", "cls") or receiver.startswith("super(")
            if (on_self and self._in_subclass()) or (not on_self and node.attr not in self.own):
                self.found.append(f"{self.module}:{node.lineno}: {receiver}.{node.attr}")
        self.generic_visit(node)


def test_nothing_outside_core_uses_a_private_name_of_core():
    """What supervision, state, the daemon and the integrations need of a group is core's public
    interface (``supervisor.core.group.interface``); replacement is a strategy handed in, not a
    subclass overriding private methods."""
    core, others = {}, {}
    for name, path in _modules().items():
        (core if _in(name, "supervisor.core") else others)[name] = path.read_text()
    assert _private_core_accesses(core, others) == []


def test_the_private_access_check_finds_a_reach_in_and_an_override():
    core = {"supervisor.core.g": "class WorkerGroup:\n    def __init__(self):\n        self._rendezvous = None\n    def _pick(self): pass\n"}
    others = {
        "supervisor.supervision.x": "def f(group):\n    return group._rendezvous\n",
        "supervisor.integrations.y": "class Ranks(WorkerGroup):\n    def _pick(self):\n        return super()._pick()\n",
        "supervisor.daemon.z": "class Own:\n    def __init__(self):\n        self._rendezvous = 1\n    def f(self, other):\n        return other._rendezvous, self._rendezvous\n",
        "supervisor.state.w": "def f(handle):\n    return handle._supervisor_snapshot.remote()\n",
    }
    assert _private_core_accesses(core, others) == [
        "supervisor.integrations.y:2: overrides _pick",
        "supervisor.integrations.y:3: super()._pick",
        "supervisor.supervision.x:2: group._rendezvous",
    ]


def test_the_group_implements_every_member_of_the_interface_the_layers_above_use():
    from supervisor.core.group.group import WorkerGroup
    from supervisor.core.group.interface import SupervisedGroup

    members = {n for n in vars(SupervisedGroup) if not n.startswith("_")} | set(SupervisedGroup.__annotations__)
    init = ast.parse((PACKAGE / "core" / "group" / "group.py").read_text())
    assigned = {
        node.attr for node in ast.walk(init)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }  # fmt: skip
    missing = sorted(m for m in members if not hasattr(WorkerGroup, m) and m not in assigned)
    assert "replace_worker" in members and "current_rendezvous" in members and missing == []
