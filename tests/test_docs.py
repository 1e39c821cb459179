"""The docs site and the README: the site builds strict, its generated references cover what the code
has, every `supervisor` command and flag shown exists, every block marked runnable runs on a local
cluster, no hand-written copy of a generated reference remains, the README stays short and opens with
what CI runs, and the built site renders in a real browser (Debian's Chromium)."""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import importlib.util
import inspect
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SITE = ROOT / "build" / "docs" / "site"
SCREENSHOTS = ROOT / "build" / "docs" / "screenshots"  # kept as CI artifacts beside the site
README = ROOT / "README.md"
CHROMIUM = "/usr/bin/chromium"
# Chromium's flags on a machine without a network: no background connections, no sandbox as root.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
RUNNABLE = "<!-- runnable -->"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.MULTILINE | re.DOTALL)


def _references():
    spec = importlib.util.spec_from_file_location("docs_references", DOCS / "hooks" / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, body, marked runnable) of every fenced block."""
    out = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        body = "\n".join(line[len(match.group("indent")) :] for line in match.group("body").splitlines())
        out.append((match.group("lang"), body, before == RUNNABLE))
    return out


# -- the build --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Path:
    """The site, built by `make docs` (strict) into build/docs/site."""
    done = subprocess.run(["make", "--no-print-directory", "docs"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return SITE


def test_the_site_builds_strict_with_every_page_and_the_address_from_ops(site):
    pages = {p.relative_to(DOCS).with_suffix("") for p in _pages()}
    for page in pages:
        path = site / page.parent / "index.html" if page.name == "index" else site / page / "index.html"
        assert path.exists(), f"{page}.md was not built ({path})"
    sitemap = (site / "sitemap.xml").read_text()
    assert _references().docs_url() in sitemap, "the site's address is not ops/docs_url's"
    assert len(pages) >= 40
    assert not list(site.rglob("*.md")), "markdown sources were copied into the site"


def test_a_strict_build_fails_on_a_broken_link(tmp_path):
    # The same configuration on a copy of the docs with one link broken: --strict must refuse it.
    copy = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(DOCS), str(copy)], check=True)
    page = copy / "getting-started.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    config = (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {copy}")
    config = config.replace("site_dir: build/docs/site", f"site_dir: {tmp_path / 'site'}")
    config = config.replace("  - docs/hooks/references.py", f"  - {DOCS / 'hooks' / 'references.py'}").replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")], cwd=ROOT,
        capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


# -- the generated references -----------------------------------------------------------------------


def test_the_spec_reference_has_every_field_with_a_description():
    from supervisor.daemon.spec_schema import spec_schema

    text = _references().spec_reference()
    schema = spec_schema()
    tables = [v["additionalProperties"] if "propertyNames" in v else v for k, v in schema["properties"].items() if k != "run"]
    tables.append(schema["properties"]["run"]["properties"]["groups"]["additionalProperties"])
    for table in tables:
        for key, prop in table["properties"].items():
            assert f"| `{key}` |" in text, key
            assert prop.get("description"), f"spec field {key!r} has no docstring in supervisor/daemon/spec.py"


def test_the_metrics_reference_has_every_metric_with_when_it_is_recorded():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from supervisor.observability import metrics

    text = _references().metrics_reference()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `supervisor_")}
    exposed = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(generate_latest(metrics.EXPOSED).decode())  # what /metrics shows
    }
    for name in exposed | set(rows):
        assert name in rows, f"{name} is not in the metrics reference"
        assert not rows[name].rstrip().endswith("|  |"), f"{name}: no '#:' comment says when it is recorded"


def test_the_errors_reference_covers_every_exception_class():
    from supervisor.errors import SupervisorError

    refs = _references()
    errors = refs.errors_reference()

    def every(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from every(sub)

    for cls in every(SupervisorError):
        if cls.__module__.startswith("supervisor") and not cls.__module__.startswith(("supervisor.compat", "supervisor.integrations")):
            assert f"**{cls.__name__}**" in errors, cls


def test_the_built_api_page_documents_every_export_with_its_docstring(site):
    import supervisor

    page = (site / "reference" / "api" / "index.html").read_text()
    for name in supervisor.__all__:
        if name.startswith("__"):
            continue
        assert f"supervisor.{name}</code>" in page, f"{name} has no section on the API page"
        obj = getattr(supervisor, name)
        own = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__  # not a base class's
        doc = inspect.cleandoc(own) if own else ""
        first_words = " ".join(doc.split()[:4])
        if first_words and "`" not in first_words and ":" not in first_words:
            assert html.escape(first_words, quote=False) in page, f"{name}: its docstring was not rendered ({first_words!r})"


def test_a_page_asking_for_an_unknown_reference_fails_the_build():
    with pytest.raises(KeyError, match="no-such-reference"):
        _references().expand("# x\n\n<!-- generated: no-such-reference -->\n")


def test_the_layer_diagram_follows_the_packages_imports():
    refs = _references()
    graph = refs.layer_graph()
    assert "core" in graph["supervision"] and "supervision" not in graph.get("core", set())
    page = refs.architecture_diagram()
    assert page.startswith('<div class="layer-stack"')
    rows = {line.split("|")[1].strip().strip("`"): line.split("|")[3] for line in page.splitlines() if line.startswith("| `")}
    assert set(rows) == set(graph)
    assert rows["observability"].strip() == "`failure`, `version`" and "`supervision`" not in rows["core"]
    assert "`integrations`" in rows["run"] and "`run`" in rows["integrations"]


def test_the_layer_bands_stack_every_import_downwards_and_only_skipping_imports_are_drawn():
    refs = _references()
    graph = refs.layer_graph()
    bands = refs.layer_bands(graph)
    band_of = {layer: i for i, band in enumerate(bands) for layer in band}
    assert set(band_of) == set(graph) and band_of["errors"] == 0 and band_of["run"] == band_of["integrations"]
    for layer, targets in graph.items():
        outside = {t for t in targets if band_of[t] != band_of[layer]}
        assert all(band_of[t] < band_of[layer] for t in outside), layer
        assert not outside or max(band_of[t] for t in outside) == band_of[layer] - 1, f"{layer} floats above its imports"
    page = refs.architecture_diagram()
    drawn = set(re.findall(r'title="(\w+) imports (\w+)"', page))
    skipping = {(s, t) for s, targets in graph.items() for t in targets if band_of[t] < band_of[s] - 1}
    assert skipping and skipping <= drawn, skipping - drawn
    assert not {(s, t) for s, t in drawn if s in graph and band_of[t] >= band_of[s] - 1}, "an import of the band below is drawn"
    assert {t for s, t in drawn if s == refs.ROOT_LAYER}, "the package's __init__ (the top band) draws its imports"
    # A toy graph: a cycle shares a band, a layer sits right above its highest import.
    assert refs.layer_bands({"a": set(), "b": {"a"}, "c": {"a", "b", "d"}, "d": {"c"}}, ("a", "b", "c", "d")) == [["a"], ["b"], ["c", "d"]]


def test_the_supervised_group_interface_is_read_from_its_protocol(tmp_path):
    refs = _references()
    source = tmp_path / "interface.py"
    source.write_text(
        "from typing import Any, Protocol\n\n"
        "class SupervisedGroup(Protocol):\n"
        '    """What supervision may use of a group."""\n\n'
        "    name: str\n"
        '    """The group\'s name."""\n\n'
        "    @property\n"
        "    def world_size(self) -> int:\n"
        '        """How many ranks."""\n\n'
        "    def propagate_rendezvous(self, ranks: list[int]) -> list[int]:\n"
        '        """Give the ranks the new rendezvous; returns those that could not take it.\n\n        More."""\n\n'
        "    def _private(self) -> None: ...\n"
    )
    table = refs.supervised_group_interface(source)
    assert "| `name` | attribute: `str` | The group's name. |" in table
    assert "| `world_size` | property: `int` | How many ranks. |" in table
    assert "`propagate_rendezvous(ranks: list[int]) -> list[int]`" in table and "More" not in table and "_private" not in table
    real = refs.supervised_group_interface()  # core's own: what the architecture page shows
    for member in ("call_actor", "replace_worker", "take_over", "pick_new_rendezvous", "propagate_rendezvous"):
        assert f"| `{member}` | `{member}(" in real, member
    with pytest.raises(FileNotFoundError, match="does not exist"):
        refs.supervised_group_interface(tmp_path / "missing.py")
    source.write_text("class SupervisedGroup:\n    name: str\n")
    with pytest.raises(LookupError, match="no typing.Protocol named SupervisedGroup"):
        refs.supervised_group_interface(source)


# -- commands shown ---------------------------------------------------------------------------------


def _shown_commands(text: str) -> list[str]:
    """Every `supervisor ...` command line shown: in shell blocks, and in inline code."""
    found = []
    for lang, body, _ in _blocks(text):
        if lang in ("bash", "sh", "shell", "console"):  # not the unmarked blocks: those show output
            for line in body.splitlines():
                found += [seg for seg in re.split(r"&&|\|\||;|\$\(|\|(?! ?[a-z]+\|)", line.split(" #")[0])]
    without_blocks = FENCE.sub("", text)
    found += re.findall(r"`((?:\S*/)?supervisor [^`]+)`", without_blocks)
    out = []
    for segment in found:
        segment = segment.strip().removeprefix("$ ").strip()
        match = re.match(r"^(?:\S*/bin/|exec )?supervisor(\s.*)?$", segment)
        if match:
            out.append("supervisor" + (match.group(1) or ""))
    return out


def _check_command(line: str) -> str | None:
    """What is wrong with ``line`` against the click tree (None: every command and option exists)."""
    import click

    from supervisor.cli.commands import main

    try:
        tokens = shlex.split(line)
    except ValueError:
        tokens = line.split()
    tokens = [t.strip("[]") for t in tokens[1:] if t.strip("[]")]
    command: click.Command = main
    path = ["supervisor"]
    if tokens and not tokens[0].startswith("-"):
        name = tokens.pop(0)
        if name.isupper() or "<" in name or "|" in name or name in ("COMMAND", "CMD", "..."):
            return None  # a placeholder for any command
        sub = main.get_command(None, name)
        if sub is None:
            return f"{line!r}: no command {name!r}"
        command, path = sub, [*path, name]
    options = {opt: p for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    options["--help"] = None
    interspersed = (command.context_settings or {}).get("allow_interspersed_args", command.allow_interspersed_args)
    takes_value = False
    for token in tokens:
        if takes_value:
            takes_value = False
            continue
        if not token.startswith("-"):
            if not interspersed:
                break  # `supervisor run [OPTIONS] COMMAND ARGS`: the rest is the program's
            continue
        if token in ("-", "--"):
            break
        name = token.split("=", 1)[0]
        if name.startswith("--") or len(name) == 2:
            if name not in options:
                return f"{line!r}: {' '.join(path)} has no option {name}"
            param = options[name]
            takes_value = param is not None and "=" not in token and not getattr(param, "is_flag", False) and not getattr(param, "count", False)
        elif not all(f"-{c}" in options for c in name[1:]):  # combined short flags: -fp
            return f"{line!r}: {' '.join(path)} has no option {name}"
    return None


def test_every_supervisor_command_and_option_shown_exists():
    shown: dict[str, list[str]] = {}
    for path in [README, *_pages()]:
        for line in _shown_commands(path.read_text()):
            shown.setdefault(line, []).append(str(path.relative_to(ROOT)))
    assert len(shown) > 40, f"only {len(shown)} commands found: the extraction is broken"
    problems = [f"{', '.join(sorted(set(where)))}: {problem}" for line, where in shown.items() if (problem := _check_command(line))]
    assert not problems, "\n".join(problems)


def test_the_command_checker_catches_a_wrong_command_and_option():
    assert _check_command("supervisor status -o wide --watch") is None
    assert _check_command("supervisor run --spec s.toml python -m x --anything") is None
    assert "no command 'stats'" in _check_command("supervisor stats")
    assert "no option --wach" in _check_command("supervisor status --wach")
    assert _shown_commands("```bash\n.venv/bin/supervisor stop x --detach   # why\n```\nthen `supervisor gc --dry-run`.") == [
        "supervisor stop x --detach",
        "supervisor gc --dry-run",
    ]


def test_every_make_target_shown_exists():
    targets = set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    missing = []
    for path in [README, *_pages()]:
        text = path.read_text()
        shell = "\n".join(body for lang, body, _ in _blocks(text) if lang in ("bash", "sh", "shell", "console"))
        shown = re.findall(r"`make ([a-z][\w-]*)", text) + re.findall(r"(?:^|&& |; )make ([a-z][\w-]*)", shell, re.MULTILINE)
        for target in shown:
            if target not in targets:
                missing.append(f"{path.relative_to(ROOT)}: make {target}")
    assert not missing, missing


# -- runnable blocks --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_cluster_address() -> Iterator[str]:
    from supervisor.daemon.local_cluster import LocalCluster

    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 6, "num_gpus": 4, "include_dashboard": False})
    try:
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def _runnable_blocks() -> list[tuple[str, str]]:
    out = []
    for path in [README, *_pages()]:
        for i, (lang, body, runnable) in enumerate(_blocks(path.read_text())):
            if runnable:
                assert lang == "python", f"{path}: only python blocks can be marked runnable"
                out.append((f"{path.relative_to(ROOT)}#{i}", body))
    return out


def test_runnable_blocks_are_found():
    ids = [block_id for block_id, _ in _runnable_blocks()]
    assert any(i.startswith("README.md") for i in ids) and any(i.startswith("docs/") for i in ids), ids


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block_id,code", _runnable_blocks(), ids=[b for b, _ in _runnable_blocks()])
def test_a_runnable_block_runs_on_a_local_cluster(gpu_cluster_address, block_id, code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "RAY_ADDRESS": gpu_cluster_address},
    )  # fmt: skip
    assert done.returncode == 0, f"{block_id} failed:\n{done.stderr[-3000:]}"


# -- no hand-written copies -------------------------------------------------------------------------


def _generated_names() -> dict[str, set[str]]:
    from supervisor.cli.commands import main
    from supervisor.daemon.spec_schema import spec_schema
    from supervisor.observability import metrics

    schema = spec_schema()
    fields = set()
    for key, section in schema["properties"].items():
        table = section["additionalProperties"] if "propertyNames" in section else section
        if key == "run":
            table = section["properties"]["groups"]["additionalProperties"]
        fields |= set(table["properties"])
    metric_names = {m._name for m in vars(metrics).values() if hasattr(m, "_labelnames") and hasattr(m, "_name")}
    metric_names |= {n + "_total" for n in metric_names}
    commands = set(main.commands) | {f"supervisor {c}" for c in main.commands}
    options = {o for c in main.commands.values() for p in c.params for o in p.opts if o.startswith("--")}
    return {"spec fields": fields, "metrics": metric_names, "commands": commands | options}


def _hand_written_copies(text: str, names: dict[str, set[str]]) -> list[str]:
    """Tables of ``text`` whose rows name, in their first cell, three or more facts a generated
    reference holds (spec fields, metrics, commands and options)."""
    found = []
    for table in re.findall(r"(?:^\|.*\|[ \t]*\n)+", FENCE.sub("", text), re.MULTILINE):
        for kind, known in names.items():
            hits = []
            for row in table.splitlines()[2:]:
                first = row.split("|")[1]
                words = re.findall(r"`\[?(?:[\w.]+\] )?([^`\]]+?)\]?`", first)
                if any(word.split("=")[0].strip() in known for word in words):
                    hits.append(first.strip())
            if len(hits) >= 3:
                found.append(f"a table of {kind}: {', '.join(hits[:4])}...")
    return found


def test_no_hand_written_copy_of_a_generated_reference_remains():
    names = _generated_names()
    problems = []
    for path in [README, *_pages()]:
        text = path.read_text()
        if "<!-- generated:" in text or path.parent.name == "reference" and "mkdocs-click" in text:
            continue
        problems += [f"{path.relative_to(ROOT)}: {p}" for p in _hand_written_copies(text, names)]
    assert not problems, "\n".join(problems)


def test_the_copy_check_finds_a_hand_written_spec_table():
    names = _generated_names()
    table = "| field | default |\n|---|---|\n| `[supervisor] name` | - |\n| `heartbeat_interval_s` | 1 |\n| `orphan_grace_s` | 30 |\n"
    assert _hand_written_copies(table, names)
    metrics_table = "| metric | type |\n|---|---|\n" + "".join(
        f"| `{n}` | x |\n" for n in ("supervisor_workers", "supervisor_recovery_seconds", "supervisor_worker_restarts_total")
    )
    assert _hand_written_copies(metrics_table, names)
    assert not _hand_written_copies("| a | b |\n|---|---|\n| `x` | y |\n", names)


# -- the README -------------------------------------------------------------------------------------


def test_the_readme_is_short_and_opens_with_the_two_commands_ci_runs():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150: the rest belongs in docs/)"
    lang, first_block, _ = _blocks(text)[0]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert lang == "bash" and len(commands) == 2, commands
    assert commands[0] == "make setup && .venv/bin/supervisor start examples/rlhf/rlhf.toml"
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] == "make test" and re.search(r"^make test$", ci, re.MULTILINE), "the README's test command is not what CI runs"
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_the_getting_started_page_runs_watches_and_stops_in_five_commands_each_with_its_output():
    text = (DOCS / "getting-started.md").read_text()
    main_part = text.split("\n## Kill a worker")[0]
    blocks = _blocks(main_part)
    commands = [i for i, (lang, _, _) in enumerate(blocks) if lang == "bash"]
    assert len(commands) <= 5
    for i in commands:
        assert i + 1 < len(blocks) and blocks[i + 1][0] == "" and blocks[i + 1][1].strip(), f"command {blocks[i][1]!r} is shown without its output"


# -- in a browser -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _served(directory: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


# Each element's box on the page, and whether its content fits in it (no overflow).
_BOXES = """els => els.map(e => { const r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, fits: e.scrollWidth <= e.clientWidth + 1}; })"""


def test_the_built_site_renders_in_chromium_with_navigation_references_and_search(site):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Chromium is missing: `make tools` installs Debian's package"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with _served(site) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            failed: list[str] = []
            page.on("requestfailed", lambda request: failed.append(request.url))

            page.goto(f"{base}/")
            assert page.title().startswith("ray-supervisor")
            nav = page.locator("nav.md-nav--primary a.md-nav__link")
            assert nav.count() >= 30, nav.count()
            assert page.locator("nav.md-nav--primary").get_by_text("Getting started").first.is_visible()
            page.screenshot(path=str(SCREENSHOTS / "front.png"), full_page=False)

            page.goto(f"{base}/reference/spec/")
            assert page.locator("h1").first.inner_text().replace("¶", "").strip() == "Spec"
            assert page.locator("table td code", has_text="heartbeat_interval_s").count() == 1
            assert page.locator(".md-nav__link--active").count() >= 1  # the page is marked in the navigation
            page.screenshot(path=str(SCREENSHOTS / "spec-reference.png"), full_page=False)

            page.goto(f"{base}/reference/cli/")
            for command in ("start", "status", "stop", "doctor"):
                assert page.locator("h2, h3", has_text=f"supervisor {command}").count() >= 1, command

            page.set_viewport_size({"width": 1280, "height": 3200})  # the whole figure in view: no header over it
            page.goto(f"{base}/architecture/")
            figure = page.locator(".layer-stack")
            assert figure.locator(".ls-row:not(.ls-head)").count() == len(_references().layer_graph()) + 1
            texts = [box for box in figure.locator(".ls-layer").evaluate_all(_BOXES) if box["width"]]
            marks = figure.locator(".ls-start, .ls-import").evaluate_all(_BOXES)
            assert marks and all(box["fits"] for box in texts), "a band's text overflows its cell"
            crossing = [m for m in marks for t in texts if m["left"] < t["right"] and t["left"] < m["right"] and m["top"] < t["bottom"] and t["top"] < m["bottom"]]
            assert not crossing, f"a lane crosses a band's text: {crossing[:2]}"
            figure.screenshot(path=str(SCREENSHOTS / "architecture.png"))
            recovery = page.locator("table", has=page.locator("td", has_text="a failure is seen"))
            assert recovery.locator("tbody tr").count() >= 8
            recovery.screenshot(path=str(SCREENSHOTS / "architecture-recovery.png"))
            page.set_viewport_size({"width": 1280, "height": 900})

            page.goto(f"{base}/?q=standby")
            page.wait_for_selector(".md-search-result__item", timeout=90_000)
            assert page.locator(".md-search-result__item").count() >= 3
            assert "matching" in page.locator(".md-search-result__meta").inner_text()
            page.screenshot(path=str(SCREENSHOTS / "search.png"), full_page=False)
            assert not failed, f"requests that failed (the site must work offline): {failed}"
        finally:
            browser.close()
    for name in ("front", "spec-reference", "architecture", "architecture-recovery", "search"):
        assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000
