"""The curated public surface: everything in ``__all__`` exists, and importing it stays light."""

from __future__ import annotations

import os
import subprocess
import sys

import supervisor


def test_all_names_resolve():
    for name in supervisor.__all__:
        assert getattr(supervisor, name) is not None, name


def test_importing_the_worker_side_does_not_import_torch():
    code = (
        "import sys; import supervisor, supervisor.core.worker.worker_base, supervisor.compat.verl.single_controller.base; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dataproto_loads_lazily():
    from supervisor.core.protocol import DataProto

    assert supervisor.DataProto is DataProto


def test_the_daemon_and_the_cli_import_neither_torch_nor_tensordict():
    """They run beside any verl environment, and start fast: the data path (DataProto) loads only in
    the processes that move data."""
    modules = [
        "supervisor.cli.commands", "supervisor.cli.status", "supervisor.cli.doctor", "supervisor.daemon.daemon",
        "supervisor.daemon.startup", "supervisor.daemon.fence", "supervisor.daemon.spec", "supervisor.supervision",
        "supervisor.core.group.group", "supervisor.core.group.binding",
    ]  # fmt: skip
    code = f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; print(sorted({{'torch', 'tensordict'}} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tensordict_is_the_one_this_run_expects():
    """`make test-tensordict-range` runs the data tests against other tensordict versions: make sure the
    one under test is the one imported (in the main run, it is at least the floor pyproject.toml sets)."""
    import tensordict

    expected = os.environ.get("EXPECT_TENSORDICT")
    if expected is not None:
        assert tensordict.__version__ == expected
    else:
        assert tuple(int(p) for p in tensordict.__version__.split(".")[:2]) >= (0, 8)
