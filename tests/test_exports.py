"""The curated public surface: everything in ``__all__`` exists, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import supervisor


def test_all_names_resolve():
    for name in supervisor.__all__:
        assert getattr(supervisor, name) is not None, name


def test_importing_the_worker_side_does_not_import_torch():
    code = (
        "import sys; import supervisor, supervisor.core.worker, supervisor.compat.verl.single_controller.base; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dataproto_loads_lazily():
    from supervisor.core.protocol import DataProto

    assert supervisor.DataProto is DataProto
