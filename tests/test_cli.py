"""The ``supervisor`` console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from supervisor import __version__
from supervisor.cli.commands import main


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_info_json_without_cluster():
    result = CliRunner().invoke(main, ["info", "--json"], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ray-supervisor"] == __version__
    assert "cluster_resources" not in data


def test_info_on_dead_address_is_one_clear_line():
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli.commands", "info", "--address", "127.0.0.1:1"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == ["Error: no Ray cluster at 127.0.0.1:1: [Errno 111] Connection refused"]


def test_console_script_is_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "supervisor")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and __version__ in out.stdout


def test_validate_accepts_every_example_spec_and_describes_it():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for spec in sorted([*root.glob("examples/**/*.toml"), *root.glob("examples/**/*.yaml")]):
        run = "[run." in spec.read_text() or spec.name == "run.toml"
        result = CliRunner().invoke(main, ["validate", *(["--run"] if run else []), "--json", str(spec)])
        assert result.exit_code == 0, (spec, result.output)
        described = json.loads(result.output)
        assert described["valid"] and described["spec"] == str(spec)
    result = CliRunner().invoke(main, ["validate", str(root / "examples/rlhf/rlhf.toml")])
    assert result.exit_code == 0 and result.output.strip().endswith("valid (supervisor rlhf-demo: 4 pool(s), 4 group(s), a driver)")


def test_validate_names_every_problem_in_one_line_each_and_exits_2(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[supervisor]\nname = "x"\nheartbeat_interval_s = "soon"\n[pools.p]\nprocess_on_nodes = [1]\n[groups.g]\npool = "q"\nclass = "m:C"\n')
    result = CliRunner().invoke(main, ["validate", "--no-imports", str(spec)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any("supervisor.heartbeat_interval_s" in line for line in lines) and any("groups.g.pool: pool 'q' is not defined" in line for line in lines)
    assert all(line.startswith(f"error: {spec}: ") for line in lines)
    result = CliRunner().invoke(main, ["validate", "--no-imports", "--json", str(spec)])
    out = json.loads(result.output)
    assert result.exit_code == 2 and not out["valid"] and len(out["problems"]) == len(lines)
    missing = CliRunner().invoke(main, ["validate", str(tmp_path / "none.toml")])
    assert missing.exit_code == 2 and "cannot read the spec" in missing.output


def test_tables_are_aligned_like_kubectl_get():
    from supervisor.cli.table import format_table

    text = format_table(("name", "pid", "groups"), [("a", 12, ["x", "y"]), ("longer-name", None, [])])
    assert text.splitlines() == [
        "NAME          PID   GROUPS",
        "a             12    x,y",
        "longer-name   -     -",
    ]


def test_shell_completion_as_the_readme_gives_it():
    exe = os.path.join(os.path.dirname(sys.executable), "supervisor")
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60, env={**os.environ, "_SUPERVISOR_COMPLETE": "bash_source"})
    assert out.returncode == 0 and "_supervisor_completion" in out.stdout, out.stdout + out.stderr
    words = subprocess.run(
        [exe], capture_output=True, text=True, timeout=60,
        env={**os.environ, "_SUPERVISOR_COMPLETE": "bash_complete", "COMP_WORDS": "supervisor va", "COMP_CWORD": "1"},
    )  # fmt: skip
    assert "validate" in words.stdout, words.stdout + words.stderr


def test_a_daemon_process_writes_one_json_stream_with_the_standard_librarys_records():
    program = (
        "import logging\n"
        "from supervisor.observability.log import configure_logging, get_logger\n"
        "configure_logging('INFO', json=True, capture_stdlib=True)\n"
        "get_logger('daemon').info('ours', n=1)\n"
        "logging.getLogger('ray.some_module').warning('from ray %s', 'formatted')\n"
        "logging.getLogger('user.code').info('from the user')\n"
        "logging.getLogger('user.code').debug('below the level')\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    logging.getLogger('supervisor.core.protocol').exception('with a traceback')\n"
        "import warnings\n"
        "warnings.warn('a library warning', FutureWarning)\n"
        # Two threads, one per kind of logger: no line lands inside another.
        "import threading\n"
        "def ours():\n    for i in range(300):\n        get_logger('t').info('thread line', i=i, pad='x' * 200)\n"
        "def theirs():\n    for i in range(300):\n        logging.getLogger('ray.t').warning('stdlib line %d %s', i, 'y' * 200)\n"
        "threads = [threading.Thread(target=ours), threading.Thread(target=theirs)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines()]  # every line is JSON
    by_event = {r["event"]: r for r in records}
    assert sum(r["event"] == "thread line" for r in records) == 300 and sum(r["event"].startswith("stdlib line") for r in records) == 300
    assert any("a library warning" in r["event"] and r["logger"] == "py.warnings" for r in records)
    assert {"ours", "from ray formatted", "from the user", "with a traceback"} <= set(by_event)
    assert "below the level" not in by_event
    assert by_event["ours"]["component"] == "daemon" and by_event["ours"]["n"] == 1
    assert by_event["from ray formatted"]["logger"] == "ray.some_module" and by_event["from ray formatted"]["level"] == "warning"
    assert "ZeroDivisionError" in by_event["with a traceback"]["exception"]
    assert all("timestamp" in r for r in records)



def test_the_level_holds_for_loggers_that_set_their_own():
    program = (
        "import logging\n"
        "from supervisor.observability.log import configure_logging\n"
        "configure_logging('ERROR', json=True, capture_stdlib=True)\n"
        "logging.getLogger('ray').setLevel(logging.INFO)  # as ray.init(logging_level=...) does\n"
        "logging.getLogger('ray.x').warning('below the level')\n"
        "logging.getLogger('ray.x').error('at the level')\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and [json.loads(line)["event"] for line in out.stderr.splitlines()] == ["at the level"], out.stderr


def test_a_watch_ends_at_its_next_update_on_the_first_ctrl_c_and_at_once_on_the_second():
    import os
    import signal

    from supervisor.cli.watch import WatchStop

    before = signal.getsignal(signal.SIGINT)
    with WatchStop() as stop:
        assert not stop.wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # handled between bytecodes: no KeyboardInterrupt here
        assert stop.wait(5.0)
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the second Ctrl-C did not interrupt")  # pragma: no cover
    assert signal.getsignal(signal.SIGINT) is before
