"""The import hook ``make conformance`` runs verl's tests through (``tests/conformance/``): ``verl`` and
``verl.*`` resolve to ``supervisor.compat.verl`` in any process that has the directory on ``PYTHONPATH``
(``sitecustomize``), even when another ``verl`` is importable. Each case runs in a fresh interpreter, so
the hook never touches this test process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOOK_DIR = REPO / "tests" / "conformance"


def _run(code: str, tmp_path: Path, hook: bool = True) -> subprocess.CompletedProcess[str]:
    # A decoy verl, found on sys.path before anything else: the hook must win over it.
    decoy = tmp_path / "decoy"
    (decoy / "verl" / "utils").mkdir(parents=True, exist_ok=True)
    (decoy / "verl" / "__init__.py").write_text("DECOY = True\n")
    (decoy / "verl" / "utils" / "__init__.py").write_text("")
    (decoy / "verl" / "utils" / "device.py").write_text("DECOY = True\n")
    paths = [str(HOOK_DIR)] if hook else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(decoy), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def test_verl_resolves_to_the_compat_layer_over_another_verl(tmp_path):
    result = _run(
        """
        import verl, verl.protocol
        from verl.single_controller.ray.base import RayWorkerGroup
        from verl.utils import tensordict_utils as tu
        import supervisor.compat.verl.protocol as compat_protocol
        assert verl.__name__ == "supervisor.compat.verl", verl.__name__
        assert verl.protocol is compat_protocol
        assert verl.DataProto is compat_protocol.DataProto
        assert RayWorkerGroup.__module__ == "supervisor.compat.verl.single_controller.ray.base"
        assert tu.__name__ == "supervisor.compat.verl.utils.tensordict_utils"
        print("ok")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_verl_module_the_compat_layer_lacks_fails_instead_of_falling_through(tmp_path):
    result = _run(
        """
        try:
            import verl.utils.device
        except ModuleNotFoundError as exc:
            assert exc.name == "verl.utils.device", exc.name
            print("refused")
        else:
            print("fell through to", verl.utils.device.__file__)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "refused"


def test_without_the_hook_the_other_verl_is_imported(tmp_path):
    # The decoy is real enough to be found: the two cases above are the hook's doing.
    result = _run("import verl; print(verl.DECOY)", tmp_path, hook=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_a_shadowed_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITECUSTOMIZE_RAN = True\n")
    code = "import builtins, verl; print(verl.__name__, getattr(builtins, 'OTHER_SITECUSTOMIZE_RAN', False))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(other), str(REPO)])}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "supervisor.compat.verl True"
