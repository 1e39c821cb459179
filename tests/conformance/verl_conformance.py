"""pytest plugin for ``make conformance``: verl 0.9's own CPU tests, unmodified, against the compat layer.

Loaded with ``-p verl_conformance`` (``tests/conformance/pytest.ini``). ``VERL_SRC`` is verl's unpacked
source distribution; its test files are collected from there, never copied. ``sitecustomize.py`` next to
this file has already aliased ``verl`` to ``supervisor.compat.verl`` in this process (PYTHONPATH holds
this directory); this plugin checks that it did, re-installs the hook first on ``sys.meta_path``, and
prepares the environment Ray's local cluster (started by the tests' own ``ray.init``) hands its workers:

* ``PYTHONPATH`` keeps this directory (so workers alias ``verl`` too) and gains ``VERL_SRC``, so that a
  worker that has to import a test module (``tests.single_controller...``: Ray pickles a class or
  function by reference when it is reachable by its module and name) finds it, and its ``verl`` imports
  are the compat ones;
* every Ray address stays on loopback: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and a ``ray.init()``
  without an address starts a new local cluster (``address="local"``: it never joins another cluster
  running on the machine) on ``_node_ip_address="127.0.0.1"``, without a dashboard unless it asks.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.pop("RAY_ADDRESS", None)  # the tests start their own local clusters

import verl_alias  # noqa: E402

HERE = Path(__file__).resolve().parent


def _verl_src() -> Path:
    value = os.environ.get("VERL_SRC")
    if not value or not (Path(value) / "tests" / "__init__.py").is_file():
        raise SystemExit(f"VERL_SRC={value!r} is not verl's unpacked source distribution (make verl-src)")
    return Path(value).resolve()


def _loopback_init(init):
    @functools.wraps(init)
    def wrapper(*args, **kwargs):
        if not args and kwargs.get("address") is None:
            # verl's tests mean a fresh local cluster (ray.init(num_cpus=100)); without address="local",
            # Ray would join any cluster already running on this machine (someone else's).
            kwargs["address"] = "local"
            kwargs.setdefault("_node_ip_address", "127.0.0.1")
            kwargs.setdefault("include_dashboard", False)
        return init(*args, **kwargs)

    wrapper.__conformance_loopback__ = True
    return wrapper


def pytest_configure(config) -> None:
    verl_src = _verl_src()
    verl_alias.install()
    paths = [str(HERE), str(verl_src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))

    import ray

    if not getattr(ray.init, "__conformance_loopback__", False):
        ray.init = _loopback_init(ray.init)

    import tensordict

    expected = os.environ.get("EXPECT_TENSORDICT")
    if expected and tensordict.__version__ != expected:
        raise SystemExit(f"tensordict {tensordict.__version__} imported ({tensordict.__file__}), EXPECT_TENSORDICT={expected}")

    import verl

    if verl.__name__ != verl_alias.TARGET:
        raise SystemExit(f"verl resolves to {verl.__name__} ({verl.__file__}), not {verl_alias.TARGET}")


def pytest_report_header(config) -> list[str]:
    import tensordict
    import torch
    import verl

    return [
        f"verl -> {verl.__name__} ({Path(verl.__file__).parent}); tests from VERL_SRC={_verl_src()}",
        f"torch {torch.__version__}, tensordict {tensordict.__version__} ({Path(tensordict.__file__).parent})",
        f"python {sys.version.split()[0]}",
    ]
