"""Code written for verl's single controller runs unchanged with ``verl.`` → ``supervisor.compat.verl.``.

What is checked:

* signatures of the verl API a program touches (constructors, ``from_detached``, ``register``...): pinned
  to verl's here (runs everywhere), and compared with verl's own source, unpacked at ``$VERL_SRC``
  (``make test`` fetches verl's source distribution into ``.venv/verl_src`` first; a bare ``pytest``
  without it skips the comparison and says how to get it);
* every name verl exports from the mirrored modules is importable from the compat path, except the
  ones listed below;
* verl-style programs on a real two-node cluster: dispatch/execute modes with DataProto auto padding,
  colocation with ``create_colocated_worker_cls`` + ``spawn``, ``from_detached`` and
  ``split_resource_pool``. The worker classes (``tests/verl_style_workers.py``) import only from
  ``supervisor.compat.verl``.

Not provided (verl exports them; the compat layer deliberately does not):

* ``verl``: ``__version__`` (this is not verl; ``supervisor.__version__`` is ours).
* ``verl.single_controller.base.worker_group``: ``check_workers_alive`` and
  ``WorkerGroup.start_worker_aliveness_check``: they abort the driver (SIGABRT) when a worker dies; the
  supervisor watches workers and replaces them instead.
* ``verl.utils.ray_utils``: ``ray_noset_visible_devices``, ``get_event_loop``, ``auto_await`` (only
  ``parallel_put``, which verl's single controller uses, is mirrored).

Mirrored besides verl's single controller and protocol: ``verl.utils.tensordict_utils`` (all of it) and
``verl.utils.ray_utils.parallel_put``, which verl's modules and tests import. verl's own CPU tests run
unmodified against the compat layer with ``make conformance`` (``tests/conformance/``).

Incompatibilities found by this module and fixed (each keeps a regression test below): the
``single_controller`` package re-exports ``base``; ``ray.base`` exports ``Worker``;
``split_resource_pool(resource_pool=..., split_size=...)``; ``RayResourcePool`` derives from
``base.ResourcePool`` and ``SubRayResourcePool`` from ``RayResourcePool``; ``merge_resource_pool``
returns ``type(rp1)``.

Signature deviations that do not break callers are listed in ``SIGNATURE_DEVIATIONS``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
from pathlib import Path
from typing import Any

import pytest
import ray

from supervisor.compat.verl.single_controller.base import ResourcePool
from supervisor.compat.verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    register,
)
from supervisor.compat.verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    SubRayResourcePool,
    create_colocated_worker_cls,
)
from supervisor.compat.verl.single_controller.ray.base import merge_resource_pool, split_resource_pool

VERL_SRC = Path(os.environ.get("VERL_SRC", Path(__file__).resolve().parent.parent / ".venv" / "verl_src")) / "verl"
COMPAT = "supervisor.compat."

# -- the verl surface -------------------------------------------------------------------------------

# Importable names per verl module (what verl programs import). Checked without verl being present.
VERL_EXPORTS: dict[str, list[str]] = {
    "verl": ["DataProto"],
    "verl.protocol": [
        "DataProto",
        "DataProtoFuture",
        "DataProtoItem",
        "DataProtoConfig",
        "pad_dataproto_to_divisor",
        "unpad_dataproto",
        "union_tensor_dict",
        "union_numpy_dict",
        "collate_fn",
        "fold_batch_dim",
        "unfold_batch_dim",
        "serialize_single_tensor",
        "serialize_tensordict",
        "deserialize_single_tensor",
        "deserialize_tensordict",
        "BatchData",
        "all_gather_data_proto",
        "_padding_size_key",
    ],
    "verl.single_controller.base": ["Worker", "WorkerGroup", "ClassWithInitArgs", "ResourcePool"],
    "verl.single_controller.base.worker": ["Worker", "WorkerHelper", "DistRankInfo", "DistGlobalInfo"],
    "verl.single_controller.base.worker_group": ["WorkerGroup", "ClassWithInitArgs", "ResourcePool"],
    "verl.single_controller.base.decorator": [
        "Dispatch",
        "Execute",
        "register",
        "register_dispatch_mode",
        "update_dispatch_mode",
        "make_nd_compute_dataproto_dispatch_fn",
        "MAGIC_ATTR",
        "DISPATCH_MODE_FN_REGISTRY",
        "get_predefined_dispatch_fn",
        "get_predefined_execute_fn",
        "collect_all_to_all",
        "dispatch_one_to_all",
        "dispatch_all_to_all",
        "dispatch_dp_compute",
        "collect_dp_compute",
        "dispatch_dp_compute_data_proto",
        "dispatch_dp_compute_data_proto_with_func",
        "collect_dp_compute_data_proto",
        "dispatch_nd_compute",
        "collect_nd_compute",
        "dispatch_nd_compute_dataproto",
        "collect_nd_compute_dataproto",
        "dispatch_lazy_compute_data_proto",
        "collect_lazy_compute_data_proto",
        "dummy_direct_rollout_call",
        "init_predefined_dispatch_mode",
        "init_predefined_execute_mode",
        "_check_dispatch_mode",
    ],
    "verl.single_controller.ray": [
        "RayClassWithInitArgs",
        "RayResourcePool",
        "SubRayResourcePool",
        "RayWorkerGroup",
        "ResourcePoolManager",
        "create_colocated_worker_cls",
        "create_colocated_worker_cls_fused",
    ],
    "verl.single_controller.ray.base": [
        "RayClassWithInitArgs",
        "RayResourcePool",
        "RayWorkerGroup",
        "ResourcePoolManager",
        "SubRayResourcePool",
        "create_colocated_worker_cls",
        "create_colocated_worker_cls_fused",
        "create_colocated_worker_raw_cls",
        "split_resource_pool",
        "merge_resource_pool",
        "extract_pg_from_exist",
        "func_generator",
        "get_master_addr_port",
        "get_random_string",
        "sort_placement_group_by_node_ip",
    ],
    # helpers verl's own modules (and tests) import
    "verl.utils.ray_utils": ["parallel_put"],
    "verl.utils.tensordict_utils": [
        "assign_non_tensor",
        "assign_non_tensor_data",
        "assign_non_tensor_stack",
        "assert_tensordict_eq",
        "chunk_tensordict",
        "concat_nested_tensors",
        "concat_tensordict",
        "contiguous",
        "get",
        "get_keys",
        "get_non_tensor_data",
        "get_tensordict",
        "index_select_tensor_dict",
        "list_of_dict_to_tensordict",
        "make_iterator",
        "nested_tensor_from_tensor_list",
        "pad_to_divisor",
        "pop",
        "pop_keys",
        "union_tensor_dict",
        "unpad",
    ],
}

# Exported by verl, deliberately not provided (see the module docstring).
NOT_PROVIDED: dict[str, set[str]] = {
    "verl": {"__version__"},
    "verl.single_controller.base.worker_group": {"check_workers_alive"},
    "verl.utils.ray_utils": {"ray_noset_visible_devices", "get_event_loop", "auto_await"},
}
NOT_PROVIDED_METHODS = {
    "WorkerGroup.start_worker_aliveness_check",
}

# Exported by verl, missing here, and used by verl code (none at present).
KNOWN_MISSING: dict[str, set[str]] = {}

# verl signatures we do not match, with why callers are not affected.
SIGNATURE_DEVIATIONS = {
    "RayResourcePool.get_placement_groups": "defaults None mean the pool's STRICT_PACK / any device; adds timeout_s",
    "SubRayResourcePool.__init__": "only built by split_resource_pool; takes parent/name_prefix instead of **kwargs",
    "WorkerGroup.__init__": "verl's base class is abstract (resource_pool, **kwargs); ours is the concrete group",
    "RayClassWithInitArgs.__call__": "verl's creates the actor in a bundle (internal to RayWorkerGroup); ours builds it locally",
}
KNOWN_INCOMPATIBLE_SIGNATURES: dict[str, str] = {}

VERL_MODULE_FILES = {
    "verl": "__init__.py",
    "verl.protocol": "protocol.py",
    "verl.single_controller": "single_controller/__init__.py",
    "verl.single_controller.base": "single_controller/base/__init__.py",
    "verl.single_controller.base.decorator": "single_controller/base/decorator.py",
    "verl.single_controller.base.worker": "single_controller/base/worker.py",
    "verl.single_controller.base.worker_group": "single_controller/base/worker_group.py",
    "verl.single_controller.ray": "single_controller/ray/__init__.py",
    "verl.single_controller.ray.base": "single_controller/ray/base.py",
    "verl.utils.ray_utils": "utils/ray_utils.py",
    "verl.utils.tensordict_utils": "utils/tensordict_utils.py",
}

# -- signatures -------------------------------------------------------------------------------------

REQUIRED = "<required>"
Param = tuple[str, str, str]  # (name, kind, default source)


def _p(name: str, default: str = REQUIRED) -> Param:
    return (name, "pos", default)


VAR_ARGS: Param = ("args", "*", REQUIRED)
VAR_KWARGS: Param = ("kwargs", "**", REQUIRED)


def _compat(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(COMPAT + module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# (compat module, qualname, verl file, verl qualname, verl's parameters without self/cls).
SIGNATURE_CASES = [
    (
        "verl.single_controller.ray.base",
        "RayResourcePool",
        "single_controller/ray/base.py",
        "RayResourcePool.__init__",
        [
            _p("process_on_nodes", "None"),
            _p("use_gpu", "True"),
            _p("name_prefix", "None"),
            _p("max_colocate_count", "10"),
            _p("detached", "False"),
            _p("accelerator_type", "None"),
        ],
    ),
    (
        "verl.single_controller.ray.base",
        "RayWorkerGroup",
        "single_controller/ray/base.py",
        "RayWorkerGroup.__init__",
        [
            _p("resource_pool", "None"),
            _p("ray_cls_with_init", "None"),
            _p("bin_pack", "True"),
            _p("name_prefix", "None"),
            _p("detached", "False"),
            _p("worker_names", "None"),
            _p("worker_handles", "None"),
            _p("ray_wait_register_center_timeout", "300"),
            VAR_KWARGS,
        ],
    ),
    (
        "verl.single_controller.ray.base",
        "RayWorkerGroup.from_detached",
        "single_controller/ray/base.py",
        "RayWorkerGroup.from_detached",
        [
            _p("name_prefix", "None"),
            _p("worker_names", "None"),
            _p("worker_handles", "None"),
            _p("ray_cls_with_init", "None"),
            VAR_KWARGS,
        ],
    ),
    (
        "verl.single_controller.ray.base",
        "RayWorkerGroup.spawn",
        "single_controller/ray/base.py",
        "RayWorkerGroup.spawn",
        [_p("self"), _p("prefix_set")],
    ),
    (
        "verl.single_controller.ray.base",
        "RayClassWithInitArgs",
        "single_controller/ray/base.py",
        "RayClassWithInitArgs.__init__",
        [_p("cls"), VAR_ARGS, VAR_KWARGS],
    ),
    (
        "verl.single_controller.base",
        "ResourcePool",
        "single_controller/base/worker_group.py",
        "ResourcePool.__init__",
        [_p("process_on_nodes", "None"), _p("max_colocate_count", "10"), _p("n_gpus_per_node", "8")],
    ),
    (
        "verl.single_controller.base",
        "ClassWithInitArgs",
        "single_controller/base/worker_group.py",
        "ClassWithInitArgs.__init__",
        [_p("cls"), VAR_ARGS, VAR_KWARGS],
    ),
    (
        "verl.single_controller.base",
        "Worker",
        "single_controller/base/worker.py",
        "Worker.__init__",
        [_p("cuda_visible_devices", "None")],
    ),
    (
        "verl.single_controller.ray.base",
        "create_colocated_worker_cls",
        "single_controller/ray/base.py",
        "create_colocated_worker_cls",
        [_p("class_dict")],
    ),
    (
        "verl.single_controller.ray.base",
        "merge_resource_pool",
        "single_controller/ray/base.py",
        "merge_resource_pool",
        [_p("rp1"), _p("rp2")],
    ),
    pytest.param(
        "verl.single_controller.ray.base",
        "split_resource_pool",
        "single_controller/ray/base.py",
        "split_resource_pool",
        [_p("resource_pool"), _p("split_size")],
        id="split_resource_pool",
    ),
    (
        "verl.single_controller.base.decorator",
        "register",
        "single_controller/base/decorator.py",
        "register",
        [
            _p("dispatch_mode", "Dispatch.ALL_TO_ALL"),
            _p("execute_mode", "Execute.ALL"),
            _p("blocking", "True"),
            _p("materialize_futures", "True"),
        ],
    ),
    (
        "verl.single_controller.base.decorator",
        "register_dispatch_mode",
        "single_controller/base/decorator.py",
        "register_dispatch_mode",
        [_p("dispatch_mode_name"), _p("dispatch_fn"), _p("collect_fn")],
    ),
    (
        "verl.single_controller.base.decorator",
        "update_dispatch_mode",
        "single_controller/base/decorator.py",
        "update_dispatch_mode",
        [_p("dispatch_mode"), _p("dispatch_fn"), _p("collect_fn")],
    ),
    (
        "verl.single_controller.base.decorator",
        "make_nd_compute_dataproto_dispatch_fn",
        "single_controller/base/decorator.py",
        "make_nd_compute_dataproto_dispatch_fn",
        [_p("mesh_name")],
    ),
    (
        "verl.protocol",
        "DataProto.from_dict",
        "protocol.py",
        "DataProto.from_dict",
        [
            _p("tensors", "None"),
            _p("non_tensors", "None"),
            _p("meta_info", "None"),
            _p("num_batch_dims", "1"),
            _p("auto_padding", "False"),
        ],
    ),
    (
        "verl.protocol",
        "pad_dataproto_to_divisor",
        "protocol.py",
        "pad_dataproto_to_divisor",
        [_p("data"), _p("size_divisor")],
    ),
    ("verl.protocol", "unpad_dataproto", "protocol.py", "unpad_dataproto", [_p("data"), _p("pad_size")]),
]

_KIND = {
    inspect.Parameter.POSITIONAL_ONLY: "pos",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
    inspect.Parameter.VAR_POSITIONAL: "*",
    inspect.Parameter.KEYWORD_ONLY: "kw",
    inspect.Parameter.VAR_KEYWORD: "**",
}


def _render_default(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return REQUIRED
    if isinstance(value, Dispatch | Execute):
        return str(value)  # "Dispatch.ALL_TO_ALL", as written in verl's source
    return repr(value)


RAY_TRACE_PARAM = "_ray_trace_ctx"


def our_params(obj: Any) -> list[Param]:
    """Parameters as a caller sees them (no self for classes and bound classmethods)."""
    sig = inspect.signature(obj)
    # ray.remote on a class rewrites the signatures of its methods in place, adding a keyword-only
    # _ray_trace_ctx (Ray's tracing hook): what a caller sees depends on whether an earlier test made
    # the class an actor, so Ray's parameter is not ours to compare.
    params = [p for p in sig.parameters.values() if p.name != RAY_TRACE_PARAM]
    return [(p.name, _KIND[p.kind], _render_default(p.default)) for p in params]


def _verl_tree(relpath: str) -> ast.Module:
    path = VERL_SRC / relpath
    if not path.is_file():
        pytest.skip(f"verl source not found at {path} (`make verl-src` fetches it; or set VERL_SRC to a checkout)")
    return ast.parse(path.read_text())


def _verl_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    out[f"{node.name}.{sub.name}"] = sub
    return out


def verl_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Param]:
    """Parameters of a function in verl's source, defaults as source text."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [
        (p.arg, "pos", REQUIRED if d is None else ast.unparse(d))
        for p, d in zip(positional, defaults, strict=True)
    ]
    if a.vararg:
        out.append((a.vararg.arg, "*", REQUIRED))
    for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append((p.arg, "kw", REQUIRED if d is None else ast.unparse(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, "**", REQUIRED))
    return out


def _strip_implicit(
    qualname: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, params: list[Param]
) -> list[Param]:
    # Calling a class or a classmethod does not pass self/cls; instance methods are compared with self.
    decorators = {ast.unparse(d) for d in fn.decorator_list}
    if qualname.endswith(".__init__") or "classmethod" in decorators:
        return params[1:]
    return params


@pytest.mark.parametrize(("module", "qualname", "verl_file", "verl_qualname", "expected"), SIGNATURE_CASES)
def test_signature_pinned_to_verl(module, qualname, verl_file, verl_qualname, expected):
    """Runs without verl: our compat signatures equal verl's, as written down here."""
    assert our_params(_compat(module, qualname)) == expected


@pytest.mark.parametrize(("module", "qualname", "verl_file", "verl_qualname", "expected"), SIGNATURE_CASES)
def test_signature_matches_verl_source(module, qualname, verl_file, verl_qualname, expected):
    """Against verl's source (skipped without it): also keeps the pinned expectations above honest."""
    fn = _verl_functions(_verl_tree(verl_file))[verl_qualname]
    from_source = _strip_implicit(verl_qualname, fn, verl_params(fn))
    assert from_source == expected, "verl changed: update the pinned expectation"
    assert our_params(_compat(module, qualname)) == from_source


def test_every_verl_function_is_provided_with_its_signature_or_documented():
    """Drift check over the mirrored modules (skipped without verl's source).

    Every public function and method verl defines is either provided with verl's exact parameters,
    or listed as not provided / as a deviation; and nothing listed is stale.
    """
    problems: list[str] = []
    seen_deviations: set[str] = set()
    for verl_module, relpath in VERL_MODULE_FILES.items():
        for qualname, fn in _verl_functions(_verl_tree(relpath)).items():
            parts = qualname.split(".")
            if any(p.startswith("_") and p not in ("__init__", "__call__") for p in parts):
                continue
            if parts[0] in NOT_PROVIDED.get(verl_module, set()) or qualname in NOT_PROVIDED_METHODS:
                continue
            obj: Any = importlib.import_module(COMPAT + verl_module)
            try:
                for part in parts:
                    obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
            except AttributeError:
                problems.append(f"{verl_module}.{qualname}: missing")
                continue
            if isinstance(obj, property):
                continue
            if isinstance(obj, classmethod | staticmethod):
                obj = obj.__func__
            if isinstance(obj, ray.remote_function.RemoteFunction):  # verl's is @ray.remote too
                obj = obj._function
            if our_params(obj) == verl_params(fn):
                continue
            if qualname in SIGNATURE_DEVIATIONS or qualname in KNOWN_INCOMPATIBLE_SIGNATURES:
                seen_deviations.add(qualname)
                continue
            problems.append(f"{verl_module}.{qualname}: verl {verl_params(fn)} vs ours {our_params(obj)}")
    stale = (set(SIGNATURE_DEVIATIONS) | set(KNOWN_INCOMPATIBLE_SIGNATURES)) - seen_deviations
    assert not stale, f"listed as deviating but now matching verl (remove from the lists): {sorted(stale)}"
    assert not problems, "\n".join(problems)


# -- exports ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("verl_module", sorted(VERL_EXPORTS))
def test_verl_exports_importable_from_compat_path(verl_module):
    module = importlib.import_module(COMPAT + verl_module)
    missing = [name for name in VERL_EXPORTS[verl_module] if not hasattr(module, name)]
    assert not missing, f"{COMPAT}{verl_module} lacks {missing}"


def test_compat_modules_expose_the_same_objects():
    import supervisor.compat.verl as top
    import supervisor.compat.verl.protocol as protocol
    import supervisor.compat.verl.single_controller.base as base
    import supervisor.compat.verl.single_controller.base.decorator as decorator
    import supervisor.compat.verl.single_controller.ray as ray_pkg
    import supervisor.compat.verl.single_controller.ray.base as ray_base

    assert top.DataProto is protocol.DataProto
    for name in VERL_EXPORTS["verl.single_controller.ray"]:
        assert getattr(ray_pkg, name) is getattr(ray_base, name), name
    assert decorator.MAGIC_ATTR == "attrs_3141562937"  # verl's value: decorated methods interoperate
    assert issubclass(ray_pkg.RayWorkerGroup, base.WorkerGroup)
    assert issubclass(ray_pkg.RayClassWithInitArgs, base.ClassWithInitArgs)
    assert protocol.DataProtoConfig.auto_padding_key == "_verl_auto_padding"
    # Dispatch/Execute members verl programs use
    for member in (
        "RANK_ZERO",
        "ONE_TO_ALL",
        "ALL_TO_ALL",
        "DP_COMPUTE",
        "DP_COMPUTE_PROTO",
        "DP_COMPUTE_PROTO_WITH_FUNC",
        "DP_COMPUTE_METRIC",
        "DIRECT_ROLLOUT_METHOD",
    ):
        assert isinstance(getattr(decorator.Dispatch, member), decorator.Dispatch), member
    assert {m.name for m in decorator.Execute.members()} >= {"ALL", "RANK_ZERO"}


def test_not_provided_names_are_really_absent():
    """Keeps the module docstring honest without verl: a name that appears must leave the list."""
    for verl_module, names in NOT_PROVIDED.items():
        module = importlib.import_module(COMPAT + verl_module)
        present = sorted(n for n in names if hasattr(module, n))
        assert not present, f"{COMPAT}{verl_module} now provides {present}: remove them from NOT_PROVIDED"


def _verl_public_names(verl_module: str, trees: dict[str, ast.Module]) -> set[str]:
    """``__all__`` plus top-level public classes, functions and UPPER_CASE constants (verl source)."""
    tree = trees[verl_module]
    names: set[str] = set()
    for node in tree.body:
        if isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        ) and not node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if not isinstance(target, ast.Name):
                    continue
                if target.id == "__all__":
                    if isinstance(node.value, ast.Attribute):  # __all__ = base.__all__
                        names |= _verl_public_names(f"{verl_module}.{ast.unparse(node.value.value)}", trees)
                    else:
                        names |= set(ast.literal_eval(node.value))
                elif target.id.isupper():
                    names.add(target.id)
    return names


def test_verl_exports_match_compat_modulo_documented_gaps():
    """Against verl's source (skipped without it): missing names == not provided + known gaps."""
    trees = {m: _verl_tree(f) for m, f in VERL_MODULE_FILES.items()}
    for verl_module in VERL_MODULE_FILES:
        module = importlib.import_module(COMPAT + verl_module)
        exported = _verl_public_names(verl_module, trees)
        missing = {n for n in exported if not hasattr(module, n)}
        documented = NOT_PROVIDED.get(verl_module, set()) | KNOWN_MISSING.get(verl_module, set())
        assert missing == documented, (
            f"{verl_module}: missing {sorted(missing)}, documented {sorted(documented)}"
        )
    assert set(VERL_EXPORTS["verl.single_controller.base"]) == _verl_public_names(
        "verl.single_controller.base", trees
    )
    ray_all = _verl_public_names("verl.single_controller.ray", trees)
    assert (
        set(VERL_EXPORTS["verl.single_controller.ray"])
        == ray_all - NOT_PROVIDED.get("verl.single_controller.ray", set())
    )


def test_single_controller_package_reexports_base():
    # verl/utils/checkpoint/checkpoint_handler.py: from verl.single_controller import WorkerGroup
    from supervisor.compat.verl.single_controller import ClassWithInitArgs, ResourcePool, Worker, WorkerGroup  # noqa: F401


def test_ray_base_exports_worker():
    from supervisor.compat.verl.single_controller.ray.base import Worker  # noqa: F401


def test_ray_resource_pool_is_a_base_resource_pool():
    # verl: class RayResourcePool(ResourcePool), with ResourcePool from verl.single_controller.base
    assert issubclass(RayResourcePool, ResourcePool)


def test_sub_ray_resource_pool_is_a_ray_resource_pool():
    # verl: class SubRayResourcePool(RayResourcePool); split pools pass isinstance(p, RayResourcePool)
    assert issubclass(SubRayResourcePool, RayResourcePool)


def test_split_resource_pool_accepts_verl_keywords():
    # verl's tests/single_controller/test_split_resource_pool.py calls it with keywords
    inspect.signature(split_resource_pool).bind(resource_pool=object(), split_size=2)


# -- verl-style programs on the cluster -------------------------------------------------------------


def _kill(*groups: Any) -> None:
    for group in groups:
        if group is not None:
            group.kill()  # not verl API: verl relies on the job ending; here the module's cluster is shared


def test_verl_style_program_end_to_end(ray_cluster, no_leaks, monkeypatch):
    import numpy as np
    import torch
    from verl_style_workers import VerlStyleWorker

    from supervisor.compat.verl import DataProto
    from supervisor.compat.verl.protocol import DataProtoConfig

    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)  # padding is switched on explicitly below
    ray_cls_with_init = RayClassWithInitArgs(cls=ray.remote(VerlStyleWorker), config={"scale": 3})
    resource_pool = RayResourcePool(process_on_nodes=[2], use_gpu=True, max_colocate_count=1)
    wg = None
    try:
        wg = RayWorkerGroup(
            resource_pool=resource_pool, ray_cls_with_init=ray_cls_with_init, name_prefix="verl_e2e"
        )
        assert wg.world_size == 2
        # verl's naming: f"{name_prefix}{ClassName}_{pg_idx}:{local_rank}"
        assert wg.worker_names == ["verl_e2eVerlStyleWorker_0:0", "verl_e2eVerlStyleWorker_0:1"]
        assert wg.ray_cls_with_init is ray_cls_with_init

        assert wg.init_model() == [None, None]

        # DP_COMPUTE_PROTO: 5 rows on 2 ranks, padded to 6, padding stripped from the result
        out = wg.compute(DataProto.from_dict(tensors={"x": torch.arange(5)}, auto_padding=True))
        assert isinstance(out, DataProto)
        assert out.batch["y"].tolist() == [0, 3, 6, 9, 12]
        assert list(out.non_tensor_batch["rank"]) == [0, 0, 0, 1, 1]
        assert out.meta_info["metrics"] == {"rows": [3, 3]}
        assert out.meta_info["weight"] == 3

        # verl's own padding test: positional dicts, data passed by keyword, in-place worker update
        padded = DataProto.from_dict(
            {"a": torch.zeros(5)},
            {"na": np.array([str(i) for i in range(5)], dtype=object)},
            auto_padding=True,
        )
        out = wg.add_rank(data=padded)
        assert out.batch["a"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
        assert list(out.non_tensor_batch["na"]) == ["0", "1", "2", "3", "4"]

        # process-wide switch, as verl's tests set it
        with pytest.raises(Exception, match="evenly"):
            wg.add_rank(DataProto.from_dict({"a": torch.zeros(3)}))
        DataProtoConfig.auto_padding = True
        try:
            assert wg.add_rank(DataProto.from_single_dict({"a": torch.zeros(3)})).batch["a"].tolist() == [
                0.0,
                0.0,
                1.0,
            ]
        finally:
            DataProtoConfig.auto_padding = False

        # Execute.RANK_ZERO: one result, from rank 0. As in verl, ONE_TO_ALL still expands every argument
        # to a list of world_size copies and rank 0 receives that list (verl's func_generator passes the
        # dispatched args to execute_rank_zero unchanged); ALL_TO_ALL + RANK_ZERO passes them as given.
        assert wg.save_checkpoint("/ckpt/step_1") == {
            "rank": 0,
            "world_size": 2,
            "path": ["/ckpt/step_1", "/ckpt/step_1"],
            "weight": 3,
        }
        assert wg.foo_rank_zero(x=1, y=2) == 6

        # non-blocking modes return ObjectRefs; ALL_TO_ALL splits per-rank lists; custom dispatch dict
        refs = wg.foo_one_to_all(x=1, y=2)
        assert all(isinstance(r, ray.ObjectRef) for r in refs)
        assert ray.get(refs) == [6, 6]
        assert ray.get(wg.foo_all_to_all(x=[1, 2], y=[5, 6])) == [9, 11]
        assert wg.foo_custom(x=[1, 2], y=[5, 6]) == [9, 11]

        # unregistered methods through execute_*; Worker's built-in registered helpers
        assert wg.execute_all_sync("getenv", key="RANK") == ["0", "1"]
        assert ray.get(wg.execute_all_async("getenv", key="WORLD_SIZE")) == ["2", "2"]
        assert wg.execute_all_sync("getenv", key="RAY_LOCAL_WORLD_SIZE") == ["2", "2"]
        assert wg.execute_all_sync("getenv", key="LOCAL_RANK") == ["0", "1"]
        assert wg.execute_all_sync("getenv", key="WG_PREFIX") == ["verl_e2e", "verl_e2e"]
        assert wg.execute_all_sync("getenv", key="WG_BACKEND") == ["ray", "ray"]
        assert wg.execute_rank_zero_sync("getenv", key="RANK") == "0"
        assert wg.master_address == "127.0.0.1"
        assert wg.execute_all_sync("get_master_addr_port") == [(wg.master_address, wg.master_port)] * 2
        devices = wg.execute_all_sync("get_cuda_visible_devices")
        assert len(set(devices)) == 2 and "not set" not in devices, f"each rank must own one GPU: {devices}"
        assert wg.execute_func_rank_zero(lambda a, b: a * b, 6, 7) == 42
    finally:
        _kill(wg)
        resource_pool.teardown()


def test_colocated_workers_the_verl_way(ray_cluster, no_leaks):
    import torch
    from verl_style_workers import Actor, Critic

    from supervisor.compat.verl import DataProto

    data = DataProto.from_dict({"a": torch.zeros(10)})
    actor_cls = RayClassWithInitArgs(cls=Actor)
    critic_cls = RayClassWithInitArgs(cls=Critic, config={"b": 10})
    # three groups share each bundle: the two plain ones and the colocated one
    resource_pool = RayResourcePool(process_on_nodes=[2], use_gpu=True, max_colocate_count=3)
    actor_wg = critic_wg = wg_dict = None
    try:
        actor_wg = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=actor_cls)
        critic_wg = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=critic_cls)
        expected_actor_output = actor_wg.add(data)
        expected_critic_output = critic_wg.sub(data)
        assert expected_actor_output.batch["a"].tolist() == [0.0] * 5 + [1.0] * 5
        assert expected_critic_output.batch["a"].tolist() == [-10.0] * 10

        cls_dict = {"actor": actor_cls, "critic": critic_cls}
        ray_cls_with_init = create_colocated_worker_cls(class_dict=cls_dict)
        wg_dict = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=ray_cls_with_init)
        assert wg_dict.world_size == 2
        assert [n[len(wg_dict.name_prefix) :] for n in wg_dict.worker_names] == [
            "WorkerDict_0:0",
            "WorkerDict_0:1",
        ]

        spawn_wg = wg_dict.spawn(prefix_set={"actor", "critic"})
        assert set(spawn_wg) == {"actor", "critic"}
        colocated_actor_wg, colocated_critic_wg = spawn_wg["actor"], spawn_wg["critic"]
        assert isinstance(colocated_actor_wg, RayWorkerGroup)
        assert colocated_actor_wg.world_size == colocated_critic_wg.world_size == 2
        assert colocated_actor_wg.worker_names == colocated_critic_wg.worker_names == wg_dict.worker_names

        actor_output = colocated_actor_wg.add(data)
        critic_output = colocated_critic_wg.sub(data)  # async method on the colocated actor
        torch.testing.assert_close(expected_actor_output.batch, actor_output.batch, atol=0, rtol=0)
        torch.testing.assert_close(expected_critic_output.batch, critic_output.batch, atol=0, rtol=0)

        # both roles of a rank live in one process, not in the plain groups' processes
        actor_ids = colocated_actor_wg.whoami()
        critic_ids = colocated_critic_wg.whoami()
        assert [(role, rank) for role, rank, _ in actor_ids] == [("actor", 0), ("actor", 1)]
        assert [(role, rank) for role, rank, _ in critic_ids] == [("critic", 0), ("critic", 1)]
        colocated_pids = [pid for _, _, pid in actor_ids]
        assert colocated_pids == [pid for _, _, pid in critic_ids]
        assert len(set(colocated_pids)) == 2
        assert not set(colocated_pids) & {pid for _, _, pid in actor_wg.whoami() + critic_wg.whoami()}

        # the prefixed methods stay on the colocated group; spawning from dict keys works as in verl
        assert wg_dict.actor_add(data).batch["a"].tolist() == [0.0] * 5 + [1.0] * 5
        again = wg_dict.spawn(prefix_set=cls_dict.keys())
        assert again["critic"].sub(data).batch["a"].tolist() == [-10.0] * 10
    finally:
        _kill(actor_wg, critic_wg, wg_dict)
        resource_pool.teardown()


def test_from_detached_reattaches_to_a_detached_group(ray_cluster, no_leaks):
    import torch
    from verl_style_workers import VerlStyleWorker, attach_and_call

    from supervisor.compat.verl import DataProto

    resource_pool = RayResourcePool(
        process_on_nodes=[2], use_gpu=True, max_colocate_count=1, name_prefix="verl_det_pool", detached=True
    )
    wg = None
    try:
        wg = RayWorkerGroup(
            resource_pool=resource_pool,
            ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(VerlStyleWorker), config={"scale": 2}),
            name_prefix="verl_det",
            detached=True,
        )
        wg.init_model()
        pids = wg.execute_all_sync("pid")

        attached = RayWorkerGroup.from_detached(
            worker_names=wg.worker_names,
            ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(VerlStyleWorker), config={"scale": 999}),
        )
        assert type(attached) is RayWorkerGroup
        assert (
            attached.worker_names
            == wg.worker_names
            == ["verl_detVerlStyleWorker_0:0", "verl_detVerlStyleWorker_0:1"]
        )
        assert attached.world_size == 2
        assert attached.execute_all_sync("pid") == pids, "must drive the same actors"
        # state set through the first handle is visible; the attach-time config is not used
        assert attached.save_checkpoint("p") == {"rank": 0, "world_size": 2, "path": ["p", "p"], "weight": 2}
        out = attached.compute(DataProto.from_dict(tensors={"x": torch.arange(3)}, auto_padding=True))
        assert out.batch["y"].tolist() == [0, 2, 4]
        assert attached.foo_custom(x=[1, 2], y=[5, 6]) == [8, 10]

        # verl's remote_call_wg: another process (a Ray task) attaches by name and drives the group
        result = ray.get(ray.remote(num_cpus=0.1)(attach_and_call).remote(wg.worker_names), timeout=60)
        assert result == {
            "worker_names": wg.worker_names,
            "foo_custom": [8, 10],
            "foo_rank_zero": 5,
            "pids": pids,
        }
    finally:
        _kill(wg)
        resource_pool.teardown()


def test_split_resource_pool_into_worker_groups(ray_cluster, no_leaks):
    import torch
    from verl_style_workers import SplitActor

    from supervisor.compat.verl import DataProto

    # 3 + 3 bundles with one GPU each: the two placement groups cannot share a 4-GPU node
    global_resource_pool = RayResourcePool(process_on_nodes=[3, 3], use_gpu=True, max_colocate_count=1)
    groups: list[Any] = []

    def make_group(pool, worker_id):
        group = RayWorkerGroup(
            resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=SplitActor, worker_id=worker_id)
        )
        groups.append(group)
        return group

    def nodes(group):
        # no DataProto here: actors that never receive one never import torch
        info = group.placement()
        assert [i["rank"] for i in info] == list(range(group.world_size))
        assert {i["world_size"] for i in info} == {group.world_size}
        assert len({i["worker_id"] for i in info}) == 1
        return [i["node_id"] for i in info]

    try:
        global_resource_pool.get_placement_groups(device_name="cuda")

        # even split (verl: split_resource_pool(resource_pool=..., split_size=half); see the known gap)
        left_pool, right_pool = split_resource_pool(global_resource_pool, split_size=3)
        assert isinstance(left_pool, SubRayResourcePool) and isinstance(right_pool, SubRayResourcePool)
        assert (left_pool.world_size, right_pool.world_size) == (3, 3)
        left, right = make_group(left_pool, 0), make_group(right_pool, 100)
        assert (left.world_size, right.world_size) == (3, 3)
        data = DataProto.from_dict({"a": torch.zeros(6)})
        assert left.add(data).batch["a"].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
        assert right.add(data).batch["a"].tolist() == [100.0, 100.0, 101.0, 101.0, 102.0, 102.0]
        left_nodes, right_nodes = nodes(left), nodes(right)
        node_a, node_b = left_nodes[0], right_nodes[0]
        assert left_nodes == [node_a] * 3 and right_nodes == [node_b] * 3 and node_a != node_b
        _kill(left, right)

        # uneven split crossing the node boundary: bundles 0-1 and 2-5 (rank 0 of the second on node A)
        small_pool, cross_pool = split_resource_pool(global_resource_pool, split_size=[2, 4])
        assert (small_pool.world_size, cross_pool.world_size) == (2, 4)
        cross = make_group(cross_pool, 100)
        assert cross.world_size == 4
        assert nodes(cross) == [node_a, node_b, node_b, node_b]
        _kill(cross)

        # splitting a split pool: bundle 2 alone, then bundles 3-5; all sub-pools used at once
        single_pool, triple_pool = split_resource_pool(cross_pool, split_size=[1, 3])
        small, single, triple = (
            make_group(small_pool, 0),
            make_group(single_pool, 200),
            make_group(triple_pool, 300),
        )
        assert (small.world_size, single.world_size, triple.world_size) == (2, 1, 3)
        assert nodes(small) == [node_a, node_a]
        assert nodes(single) == [node_a]
        assert nodes(triple) == [node_b] * 3
        assert triple.add(DataProto.from_dict({"a": torch.zeros(3)})).batch["a"].tolist() == [
            300.0,
            301.0,
            302.0,
        ]
    finally:
        _kill(*groups)
        global_resource_pool.teardown()


def test_merge_resource_pool_the_verl_way(ray_cluster, no_leaks):
    import torch
    from verl_style_workers import SplitActor

    from supervisor.compat.verl import DataProto

    rp1 = RayResourcePool(process_on_nodes=[1], use_gpu=True, max_colocate_count=1)
    rp2 = RayResourcePool(process_on_nodes=[1], use_gpu=True, max_colocate_count=1)
    group = None
    try:
        merged = merge_resource_pool(rp1, rp2)
        assert merged.world_size == 2 and merged.store == [1, 1]
        group = RayWorkerGroup(
            resource_pool=merged, ray_cls_with_init=RayClassWithInitArgs(cls=SplitActor, worker_id=7)
        )
        assert group.add(DataProto.from_dict({"a": torch.zeros(2)})).batch["a"].tolist() == [7.0, 8.0]
    finally:
        _kill(group)
        rp1.teardown()
        rp2.teardown()


def test_merge_resource_pool_returns_a_ray_resource_pool(ray_cluster, no_leaks):
    # verl: merged = type(rp1)(...), so merging two RayResourcePools gives a RayResourcePool
    rp1 = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    rp2 = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    try:
        assert isinstance(merge_resource_pool(rp1, rp2), RayResourcePool)
    finally:
        rp1.teardown()
        rp2.teardown()


def test_base_resource_pool_is_verl_shaped():
    pool = ResourcePool(process_on_nodes=[2, 3])
    assert (pool.world_size, pool.store, pool()) == (5, [2, 3], [2, 3])
    assert pool.local_world_size_list() == [2, 2, 3, 3, 3]
    assert pool.local_rank_list() == [0, 1, 0, 1, 2]
    assert (pool.max_colocate_count, pool.n_gpus_per_node) == (10, 8)
    pool.add_node(1)
    assert pool.store == [2, 3, 1]


def test_register_stores_verl_attrs():
    from supervisor.compat.verl.single_controller.base.decorator import MAGIC_ATTR

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, execute_mode=Execute.RANK_ZERO, blocking=False)
    def method(self, data):
        return data

    assert getattr(method, MAGIC_ATTR) == {
        "dispatch_mode": Dispatch.DP_COMPUTE_PROTO,
        "execute_mode": Execute.RANK_ZERO,
        "blocking": False,
    }
    assert method(None, 5) == 5
