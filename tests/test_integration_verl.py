"""Supervised groups of the INSTALLED verl's own classes (issue 17 item 3), on a real two-node cluster.

Runs only where verl is installed (the second environment); elsewhere every test is skipped with a
reason saying how to run them. The workers are ``examples/verl/workers.py``, written against real
verl only: ``verl.single_controller.base.Worker``, verl's ``register(Dispatch...)``, verl's DataProto.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VERL_INSTALLED = importlib.util.find_spec("verl") is not None
HOW_TO_RUN = "verl is not installed here: `make test-verl` runs this in the second environment (.venv-verl, verl 0.9.1 installed)"
pytestmark = [pytest.mark.verl, pytest.mark.skipif(not VERL_INSTALLED, reason=HOW_TO_RUN)]

# The cluster's worker processes import examples.verl.workers from the repository root.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)

RECOVERY_TIMEOUT_S = 120.0


# -- helpers ----------------------------------------------------------------------------------------
def _supervision():
    from supervisor.supervision.config import SupervisionConfig

    return SupervisionConfig(probe_period_s=1.0, probe_timeout_s=20.0)


def _seed_group(name, process_on_nodes, worker="SeedWorker", **kwargs):
    import ray
    from verl.single_controller.ray import base as verl_base

    from examples.verl import workers
    from supervisor.integrations.verl import SupervisedRayWorkerGroup
    from supervisor.integrations.verl.originals import verl_original

    # verl's own RayResourcePool and RayClassWithInitArgs, whatever a patch did to the module names.
    pool_cls = verl_original("RayResourcePool")
    pool = pool_cls(process_on_nodes=process_on_nodes, use_gpu=True, max_colocate_count=1, name_prefix=f"{name}-pool")
    cia = verl_base.RayClassWithInitArgs(ray.remote(getattr(workers, worker)))
    group = SupervisedRayWorkerGroup(
        resource_pool=pool, ray_cls_with_init=cia, name_prefix=name, supervision=kwargs.pop("supervision", _supervision()), **kwargs
    )
    return group, pool


def _teardown(group, pool):
    group.teardown()
    library = getattr(pool, "_supervisor_library_pool", None)
    if library is not None:
        library.teardown()


def _wait_recovered(group, restarts_of, timeout_s=RECOVERY_TIMEOUT_S):
    """Wait until each rank in ``restarts_of`` has at least that many restarts and every rank runs."""
    from supervisor.supervision.states import WorkerState

    deadline = time.monotonic() + timeout_s
    while True:
        ranks = group.supervisor.ranks()
        if all(ranks[r].restarts >= n for r, n in restarts_of.items()) and all(s.state is WorkerState.RUNNING for s in ranks):
            return ranks
        if time.monotonic() > deadline:
            raise AssertionError(f"not recovered after {timeout_s:.0f}s: {ranks}")
        time.sleep(0.2)


def _batch(n, **meta):
    import torch
    from verl import DataProto

    idx = torch.arange(n)
    return DataProto.from_dict(tensors={"x": idx.float() + 1, "idx": idx}, meta_info=meta)


def _check_every_row_once(out, n):
    import torch

    order = torch.argsort(out.batch["idx"])
    assert out.batch["idx"][order].tolist() == list(range(n))  # every row, exactly once
    assert torch.equal(out.batch["x"][order], (torch.arange(n).float() + 1) * 2)


def _bundle_of(group, rank):
    import ray

    bundle = group.group.rank_bundles[rank]
    pg = group.group._pgs[bundle.pg_index]
    return bundle, pg.id.hex(), ray.util.placement_group_table(pg)["bundles_to_node_id"][bundle.bundle_index]


def _one_line(exc_info):
    text = str(exc_info.value)
    assert text and "\n" not in text, text
    return text


# -- a shared group of independent replicas -------------------------------------------------------
@pytest.fixture(scope="module")
def seed(ray_cluster):
    group, pool = _seed_group("seedwg", [1, 1])
    try:
        group.init_model()
        yield group
    finally:
        _teardown(group, pool)


def test_verl_classes_run_unchanged_and_independent_replicas_are_one_for_one(seed):
    from supervisor.supervision.restart_policy import RestartStrategy

    assert seed.world_size == 2
    assert seed.restart_strategy is RestartStrategy.ONE_FOR_ONE  # no rank joined a process group
    infos = seed.model_info()
    assert [i["rank"] for i in infos] == [0, 1]
    assert len({i["node_id"] for i in infos}) == 2  # one rank per node, as process_on_nodes said
    out = seed.compute(_batch(8))
    _check_every_row_once(out, 8)
    assert sorted(set(out.batch["rank"].tolist())) == [0, 1]
    assert seed.echo(["a", "b"]) == ["a", "b"]  # ALL_TO_ALL: one entry per rank
    assert seed.rank_zero_pid() == infos[0]["pid"]  # verl's Execute.RANK_ZERO


def test_odd_batches_are_padded_through_our_dispatch(seed):
    from verl import DataProto

    batch = _batch(7)
    padded = DataProto.from_dict(tensors=dict(batch.batch.items()), meta_info={}, auto_padding=True)
    out = seed.compute(padded)
    assert len(padded) == 7  # the caller's DataProto is not padded behind its back
    _check_every_row_once(out, 7)


def test_non_blocking_calls_give_verls_future_which_feeds_the_next_call(seed):
    from verl.protocol import DataProto, DataProtoFuture

    future = seed.compute_later(_batch(8))
    assert isinstance(future, DataProtoFuture)
    again = seed.compute(future)  # each rank resolves its own chunk of the future (verl's register does)
    assert isinstance(again, DataProto)
    order = again.batch["idx"].argsort()
    assert again.batch["x"][order].tolist() == [(i + 1) * 4.0 for i in range(8)]
    _check_every_row_once(future.get(), 8)


def test_rank_killed_between_calls_is_replaced_into_its_bundle_with_verl_env(seed):
    from supervisor.observability.metrics import REGISTRY

    def died_total():
        return REGISTRY.get_sample_value("supervisor_worker_restarts_total", {"group": "seedwg", "reason": "died"}) or 0.0

    before = {i["rank"]: i for i in seed.model_info()}
    bundle, pg_id, node = _bundle_of(seed, 1)
    restarts, died = seed.supervisor.ranks()[1].restarts, died_total()
    os.kill(before[1]["pid"], signal.SIGKILL)
    _wait_recovered(seed, {1: restarts + 1})
    assert died_total() == died + 1  # the group's metrics, as for our own groups
    assert [p.drifted for p in seed.supervisor.drift()] == [False, False]  # back on its bundle's node
    assert REGISTRY.get_sample_value("supervisor_placement_drift_workers", {"group": "seedwg"}) == 0
    after = {i["rank"]: i for i in seed.model_info()}
    assert after[1]["pid"] != before[1]["pid"] and after[0]["pid"] == before[0]["pid"]
    assert _bundle_of(seed, 1) == (bundle, pg_id, node)  # same placement group, bundle and node
    assert after[1]["node_id"] == node
    env = after[1]["env"]
    master = before[0]["env"]
    assert env == {
        "WORLD_SIZE": "2",
        "RANK": "1",
        "WG_PREFIX": "seedwg",
        "WG_BACKEND": "ray",
        "RAY_LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": master["MASTER_ADDR"],
        "MASTER_PORT": master["MASTER_PORT"],
    }
    assert after[1]["inits"] == 1  # the program's init_model was re-run on the replacement
    _check_every_row_once(seed.compute(_batch(6)), 6)
    assert REGISTRY.get_sample_value("supervisor_dispatch_duration_seconds_count", {"group": "seedwg", "method": "compute"}) >= 1


def test_rank_killed_inside_dp_compute_proto_call_returns_every_item_once(seed):
    before = {i["rank"]: i for i in seed.model_info()}
    restarts = [s.restarts for s in seed.supervisor.ranks()]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(seed.compute, _batch(10, sleep_s=4.0, sleep_rank=1))
        time.sleep(1.5)  # rank 1 is inside compute now
        assert not future.done()
        os.kill(before[1]["pid"], signal.SIGKILL)
        out = future.result(timeout=RECOVERY_TIMEOUT_S)
    _check_every_row_once(out, 10)
    ranks = _wait_recovered(seed, {1: restarts[1] + 1})
    assert ranks[0].restarts == restarts[0]  # one_for_one: rank 0 untouched
    after = {i["rank"]: i for i in seed.model_info()}
    assert after[0]["pid"] == before[0]["pid"] and after[1]["pid"] != before[1]["pid"]


def test_unknown_method_is_a_one_line_error(seed):
    from supervisor.errors import UnknownMethodError

    with pytest.raises(UnknownMethodError) as exc:
        seed.no_such_method()
    assert "no_such_method" in _one_line(exc) and "compute" in str(exc.value)
    with pytest.raises(UnknownMethodError) as exc:
        seed.execute_all("no_such_method")
    assert "SeedWorker has no method 'no_such_method'" in _one_line(exc)


# -- torch.distributed ranks ---------------------------------------------------------------------
def test_torch_distributed_ranks_default_to_one_for_all_and_rebuild_together(ray_cluster):
    from supervisor.supervision.restart_policy import RestartStrategy

    group, pool = _seed_group("distwg", [2], worker="DistSeedWorker")
    try:
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ALL  # seen on the started ranks
        group.init_model()
        assert group.all_reduce_rank() == [3.0, 3.0]
        before = {i["rank"]: i for i in group.model_info()}
        assert all(i["dist_initialized"] for i in before.values())
        os.kill(before[1]["pid"], signal.SIGKILL)
        _wait_recovered(group, {1: 1})
        after = {i["rank"]: i for i in group.model_info()}
        assert all(after[r]["pid"] != before[r]["pid"] for r in (0, 1))  # both rebuilt
        assert group.all_reduce_rank() == [3.0, 3.0]  # the new process group works
        assert after[1]["env"]["MASTER_PORT"] == after[0]["env"]["MASTER_PORT"]
    finally:
        _teardown(group, pool)


def test_ranks_that_form_a_process_group_in_init_model_switch_to_one_for_all(ray_cluster):
    from supervisor.supervision.restart_policy import RestartStrategy

    group, pool = _seed_group("latewg", [2], worker="LateDistSeedWorker")
    try:
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ONE  # nothing joined a group yet
        group.init_model()
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ALL  # seen again after the init
        before = {i["rank"]: i for i in group.model_info()}
        os.kill(before[1]["pid"], signal.SIGKILL)
        _wait_recovered(group, {1: 1})
        after = {i["rank"]: i for i in group.model_info()}
        assert all(after[r]["pid"] != before[r]["pid"] for r in (0, 1))
        assert [after[r]["inits"] for r in (0, 1)] == [1, 1]  # the armed init_model formed the new group
        assert group.all_reduce_rank() == [3.0, 3.0]
    finally:
        _teardown(group, pool)


def test_a_process_group_formed_in_init_model_is_seen_when_the_strategy_is_given(ray_cluster):
    """restart_strategy="one_for_all" given, ranks joining gloo in init_model (verl's actor workers): a
    new rank 0 must still hand every rank its rendezvous, so the rebuilt group forms again."""
    from supervisor.supervision.restart_policy import RestartStrategy

    group, pool = _seed_group("latefixed", [2], worker="LateDistSeedWorker", restart_strategy="one_for_all")
    try:
        assert not group.supervisor.config.rejoin_new_rank_zero  # nothing joined a group yet
        group.init_model()
        assert group.supervisor.config.rejoin_new_rank_zero and group.restart_strategy is RestartStrategy.ONE_FOR_ALL
        before = {i["rank"]: i for i in group.model_info()}
        os.kill(before[0]["pid"], signal.SIGKILL)
        _wait_recovered(group, {0: 1})
        after = {i["rank"]: i for i in group.model_info()}
        assert all(after[r]["pid"] != before[r]["pid"] for r in (0, 1))
        assert after[1]["env"]["MASTER_PORT"] == after[0]["env"]["MASTER_PORT"] != before[0]["env"]["MASTER_PORT"]
        assert group.all_reduce_rank() == [3.0, 3.0]
    finally:
        _teardown(group, pool)


def test_strategy_keyword_overrides_the_runtime_default(ray_cluster):
    from supervisor.supervision.restart_policy import RestartStrategy

    group, pool = _seed_group("kwwg", [1], restart_strategy="one_for_all")
    try:
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ALL
    finally:
        _teardown(group, pool)


# -- dispatch modes registered with verl at run time ----------------------------------------------
def test_verl_modes_are_read_as_ours_unless_verl_serves_them_with_other_functions():
    from verl.single_controller.base import decorator as vd

    from supervisor.core.worker.dispatch_modes import Dispatch, Execute
    from supervisor.errors import ConfigError
    from supervisor.integrations.verl.modes import read_verl_method_spec

    def method(self, data):
        return data

    spec = read_verl_method_spec(vd.register(dispatch_mode=vd.Dispatch.DP_COMPUTE_PROTO, execute_mode=vd.Execute.RANK_ZERO)(method))
    assert spec.dispatch_mode is Dispatch.DP_COMPUTE_PROTO and spec.execute_mode is Execute.RANK_ZERO  # our dispatch
    seen = []
    vd.register_dispatch_mode("SUPERVISOR_TEST_LATE", lambda wg, *a, **k: (seen.append(a) or (a, k)), lambda wg, o: o)
    mode = vd.Dispatch["SUPERVISOR_TEST_LATE"]  # verl's register_dispatch_mode returns nothing
    try:
        late = read_verl_method_spec(vd.register(dispatch_mode=mode)(method))
        assert isinstance(late.dispatch_mode, dict)  # verl's registered functions, run by our binding
        late.dispatch_mode["dispatch_fn"](None, 1)
        assert seen == [(1,)]
        vd.DISPATCH_MODE_FN_REGISTRY.pop(mode)
        with pytest.raises(ConfigError) as exc:
            read_verl_method_spec(vd.register(dispatch_mode=mode)(method))
        assert "SUPERVISOR_TEST_LATE" in _one_line(exc)
    finally:
        vd.DISPATCH_MODE_FN_REGISTRY.pop(mode, None)
        vd.Dispatch.remove("SUPERVISOR_TEST_LATE")
    assert read_verl_method_spec(method) is None


def test_a_dispatch_mode_registered_dynamically_in_verl_is_honoured(ray_cluster):
    import ray
    import verl_dynamic_workers
    from verl.single_controller.ray import base as verl_base

    from supervisor.integrations.verl import SupervisedRayWorkerGroup
    from supervisor.integrations.verl.originals import verl_original

    pool_cls = verl_original("RayResourcePool")
    pool = pool_cls(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix="pairs-pool")
    group = SupervisedRayWorkerGroup(
        resource_pool=pool, ray_cls_with_init=verl_base.RayClassWithInitArgs(ray.remote(verl_dynamic_workers.PairWorker)),
        name_prefix="pairs", use_gpu=False,
    )  # fmt: skip
    try:
        assert group.weigh(5) == 0 * 5 + 1 * 5  # verl's dispatch_fn gave each rank (rank, 5); its collect_fn summed
    finally:
        _teardown(group, pool)


# -- the host contract ----------------------------------------------------------------------------
def _recording_host(name):
    from supervisor.fencing import UNFENCED
    from supervisor.integrations.verl.host import GroupSettings
    from supervisor.observability.hooks import ObservingHooks

    class RecordingHooks(ObservingHooks):
        """The library's real hooks (metrics, logs), remembering replacements and removals."""

        def __init__(self):
            self.replaced, self.removed = [], []

        def on_worker_replaced(self, group, rank, reason):
            super().on_worker_replaced(group, rank, reason)
            self.replaced.append((group, rank, reason))

        def on_group_removed(self, group):
            super().on_group_removed(group)
            self.removed.append(group)

    @dataclasses.dataclass
    class RecordingHost:
        """A real GroupHost: the unfenced fence, real hooks, the record as a dict."""

        name: str
        fence: object = UNFENCED
        hooks: object = dataclasses.field(default_factory=RecordingHooks)
        registered: dict = dataclasses.field(default_factory=dict)
        unregistered: list = dataclasses.field(default_factory=list)
        pools: list = dataclasses.field(default_factory=list)
        changed: list = dataclasses.field(default_factory=list)  # groups whose state was written through

        @property
        def record(self):  # the record sink: its writes, remembered
            return self

        def write_through(self, group):
            self.changed.append(group)

        def pool_name(self, requested):
            name = requested if requested not in self.pools else f"{requested}-{len(self.pools)}"
            self.pools.append(name)
            return name

        strategies: dict = dataclasses.field(default_factory=dict)  # group -> the spec's explicit strategy

        def settings(self, group, pool=""):
            config = _supervision()
            name = group if group in self.strategies else pool  # the group's own table, else its pool's
            if name in self.strategies:
                config = dataclasses.replace(config, restart=dataclasses.replace(config.restart, strategy=self.strategies[name]))
            return GroupSettings(config=config, strategy_set=name in self.strategies)

        def register(self, hosted):
            assert hosted.name not in self.registered
            self.registered[hosted.name] = hosted

        def unregister(self, name):
            self.unregistered.append(name)
            self.registered.pop(name, None)

        closed: bool = False

        def close(self):
            self.closed = True

    return RecordingHost(name)


def test_a_hosted_group_is_named_owned_and_recorded_by_its_host(ray_cluster, no_leaks):
    from supervisor.daemon.ownership import find_owned, namespace_of, pool_prefix_of
    from supervisor.integrations.verl.host import set_host_factory

    host = _recording_host("verlhost")
    set_host_factory(lambda: host)
    group = pool = None
    try:
        group, pool = _seed_group("hosted", [1, 1])
        hosted = host.registered["hosted"]
        assert hosted.group is group.group and hosted.supervisor is group.supervisor
        assert hosted.pool == "hosted-pool" and hosted.worker_class == "examples.verl.workers:SeedWorker"
        library = pool._supervisor_library_pool
        assert library.name_prefix == pool_prefix_of("verlhost", "hosted-pool") and library.detached
        assert group.group.namespace == namespace_of("verlhost") and group.group.detached
        owned = find_owned("verlhost")
        assert sorted(owned.actors) == sorted(group.worker_names) and len(owned.placement_groups) == 2
        group.init_model()
        pid = group.model_info()[0]["pid"]
        os.kill(pid, signal.SIGKILL)  # rank 0: a new rendezvous for everyone
        _wait_recovered(group, {0: 1})
        assert ("hosted", 0, "died") in host.hooks.replaced
        assert "hosted" in host.changed  # the init to re-run was armed: the record's supervision changed
        _check_every_row_once(group.compute(_batch(4)), 4)
        group.teardown()
        assert host.unregistered == ["hosted"] and host.hooks.removed == ["hosted"]
        library.teardown()
        deadline = time.monotonic() + 15
        while find_owned("verlhost") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not find_owned("verlhost")
    finally:
        set_host_factory(None)
        if group is not None:
            _teardown(group, pool)


def test_a_hosts_explicit_strategy_wins(ray_cluster, no_leaks):
    from supervisor.integrations.verl.host import set_host_factory
    from supervisor.supervision.restart_policy import RestartStrategy

    host = _recording_host("verlhost2")
    host.strategies["explicit"] = RestartStrategy.ONE_FOR_ALL
    set_host_factory(lambda: host)
    try:
        group, pool = _seed_group("explicit", [1], restart_strategy="one_for_one")
        try:
            assert group.restart_strategy is RestartStrategy.ONE_FOR_ALL  # the operator's spec over the code
        finally:
            _teardown(group, pool)
    finally:
        set_host_factory(None)


# -- teardown and bad input leave nothing behind ---------------------------------------------------
def test_teardown_leaves_no_placement_group_or_actor(ray_cluster, no_leaks):
    group, pool = _seed_group("gone", [1, 1])
    group.init_model()
    _teardown(group, pool)
    group.teardown()  # idempotent


def _colocated_roles():
    """Two roles as verl's trainer colocates them: one WorkerDict actor per bundle holding both."""
    import ray
    from verl.single_controller.ray import base as verl_base

    from examples.verl import workers

    roles = {
        "ref": verl_base.RayClassWithInitArgs(ray.remote(workers.RoleWorker), role="ref", scale=3.0),
        "actor": verl_base.RayClassWithInitArgs(ray.remote(workers.RoleWorker), role="actor", scale=2.0),
    }
    return roles, verl_base.create_colocated_worker_cls(roles)


def _check_scaled(out, n, scale):
    import torch

    order = torch.argsort(out.batch["idx"])
    assert out.batch["idx"][order].tolist() == list(range(n))
    assert torch.equal(out.batch["x"][order], (torch.arange(n).float() + 1) * scale)


def _check_every_role_serves(actor, ref):
    _check_scaled(actor.compute(_batch(8)), 8, 2.0)
    _check_scaled(ref.compute(_batch(8)), 8, 3.0)
    # verl's make_nd_compute_dataproto_dispatch_fn("train"): one mesh name, laid out per role.
    on_actor = actor.compute_on_mesh(_batch(8))
    _check_scaled(on_actor, 8, 2.0)
    assert sorted(set(on_actor.batch["rank"].tolist())) == [0, 1]  # two dp ranks
    on_ref = ref.compute_on_mesh(_batch(8))
    _check_scaled(on_ref, 8, 3.0)
    assert set(on_ref.batch["rank"].tolist()) == {0}  # one dp rank, rank 0's output kept


def _kill_rank_1_and_check_every_role_is_set_up_again(group, actor, ref, setup):
    """Every role serves; rank 1 SIGKILLed is replaced with every role's setup replayed in order, rank 0
    untouched, and every role serves again through the role views. Returns the ranks' info after."""
    _check_every_role_serves(actor, ref)
    before = {i["rank"]: i for i in actor.process_info()}
    assert [before[r]["inits"] for r in (0, 1)] == [setup] * 2
    os.kill(before[1]["pid"], signal.SIGKILL)
    _wait_recovered(group, {1: 1})
    after = {i["rank"]: i for i in ref.process_info()}
    assert after[1]["pid"] != before[1]["pid"] and after[1]["inits"] == setup  # every role, in order
    assert after[0] == before[0]  # one_for_one: rank 0 untouched, not set up again
    assert ref.workers is group.workers  # the role groups call the replacement
    _check_every_role_serves(actor, ref)
    return after


def test_colocated_roles_are_supervised_and_a_replacement_replays_every_roles_setup_in_order(ray_cluster, no_leaks):
    """verl's trainer: create_colocated_worker_cls, one group with no name_prefix, spawn, then each
    role set up (ref: init_model; actor as verl's critic: reset, set_loss_fn). A replaced actor serves
    every role again, each setup call re-run in the program's order; the role groups see the
    replacement because they are views of one group. verl's mesh dispatch runs per role."""
    from supervisor.errors import ConfigError
    from supervisor.integrations.verl import SupervisedRayResourcePool, SupervisedRayWorkerGroup
    from supervisor.integrations.verl.roles import SupervisedRoleGroup
    from supervisor.supervision.restart_policy import RestartStrategy

    roles, colocated = _colocated_roles()
    pool = SupervisedRayResourcePool(process_on_nodes=[1, 1], use_gpu=True, max_colocate_count=1, name_prefix="global_pool")
    group = SupervisedRayWorkerGroup(resource_pool=pool, ray_cls_with_init=colocated, supervision=_supervision())
    try:
        assert isinstance(group, SupervisedRayWorkerGroup) and group.restart_strategy is RestartStrategy.ONE_FOR_ONE
        spawned = group.spawn(prefix_set=roles.keys())
        ref, actor = spawned["ref"], spawned["actor"]
        assert isinstance(ref, SupervisedRoleGroup) and ref.world_size == actor.world_size == 2
        with pytest.raises(RuntimeError, match="not set up in this process"):
            actor.compute(_batch(4))
        ref.init_model()
        actor.reset()
        actor.set_loss_fn(abs)
        setup = ["ref.init_model", "actor.reset", "actor.set_loss_fn:abs"]

        after = _kill_rank_1_and_check_every_role_is_set_up_again(group, actor, ref, setup)

        # A new rank 0 of independent replicas: the others keep serving, not set up twice.
        os.kill(after[0]["pid"], signal.SIGKILL)
        _wait_recovered(group, {0: 1})
        again = {i["rank"]: i for i in actor.process_info()}
        assert again[0]["pid"] != after[0]["pid"] and again[0]["inits"] == setup
        assert again[1] == after[1]
        _check_every_role_serves(actor, ref)
        with pytest.raises(ConfigError) as exc:
            group.spawn(prefix_set=["critic"])
        assert "no role 'critic'" in _one_line(exc) and "actor, ref" in str(exc.value)
    finally:
        group.teardown()
        pool.teardown()


def test_colocated_roles_under_a_host_are_recorded_with_their_classes_and_take_the_pools_settings(ray_cluster, no_leaks):
    from supervisor.integrations.verl import SupervisedRayResourcePool, SupervisedRayWorkerGroup
    from supervisor.integrations.verl.host import set_host_factory
    from supervisor.supervision.restart_policy import RestartStrategy

    host = _recording_host("colohost")
    host.strategies["global_pool"] = RestartStrategy.ONE_FOR_ALL  # a [run.groups.global_pool] table
    set_host_factory(lambda: host)
    group = None
    pool = SupervisedRayResourcePool(process_on_nodes=[1], use_gpu=True, max_colocate_count=1, name_prefix="global_pool")
    try:
        roles, colocated = _colocated_roles()
        group = SupervisedRayWorkerGroup(resource_pool=pool, ray_cls_with_init=colocated)
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ALL
        (hosted,) = host.registered.values()
        assert hosted.name == group.name_prefix and len(group.name_prefix) == 6  # verl's random name
        assert hosted.worker_class == (
            "verl.single_controller.ray.base:WorkerDict[ref=examples.verl.workers:RoleWorker, actor=examples.verl.workers:RoleWorker]"
        )
    finally:
        set_host_factory(None)
        if group is not None:
            group.teardown()
        pool.teardown()


def test_fused_roles_are_supervised_and_a_replacement_replays_every_roles_setup_in_order(ray_cluster, no_leaks):
    """create_colocated_worker_cls_fused: every role hosted by one FusedWorker actor per bundle and
    reached through `_fuw_execute`; verl's fuse/spawn give deep copies of the group, here views of the
    one supervised group. A replaced actor serves every role again, each setup call re-run in the
    program's order (through `_fuw_execute` too); verl's mesh dispatch runs per role."""
    from verl.single_controller.ray import base as verl_base

    from supervisor.integrations.verl import SupervisedRayResourcePool, SupervisedRayWorkerGroup
    from supervisor.integrations.verl.roles import SupervisedRoleGroup
    from supervisor.integrations.verl.supervised_group import _worker_class_label
    from supervisor.supervision.restart_policy import RestartStrategy

    roles, _ = _colocated_roles()
    pool = SupervisedRayResourcePool(process_on_nodes=[1, 1], use_gpu=True, max_colocate_count=1, name_prefix="fused-pool")
    group = SupervisedRayWorkerGroup(
        resource_pool=pool, ray_cls_with_init=verl_base.create_colocated_worker_cls_fused(roles), name_prefix="fused",
        supervision=_supervision(),
    )  # fmt: skip
    try:
        assert isinstance(group, SupervisedRayWorkerGroup) and group.fused_worker_used
        assert group.restart_strategy is RestartStrategy.ONE_FOR_ONE
        label = _worker_class_label(group.group.cls_with_init.original_cls)
        assert ":FusedWorker[" in label and "ref=examples.verl.workers:RoleWorker" in label, label  # the record's
        group.fuse(prefix_set={"actor", "ref"})  # verl's: the roles as attributes
        ref, actor = group.ref, group.actor
        assert isinstance(ref, SupervisedRoleGroup) and ref.world_size == actor.world_size == 2
        ref.init_model()
        actor.reset()
        actor.set_loss_fn(abs)
        setup = ["ref.init_model", "actor.reset", "actor.set_loss_fn:abs"]

        _kill_rank_1_and_check_every_role_is_set_up_again(group, actor, ref, setup)
        assert group.spawn(prefix_set=["ref"])["ref"].workers is group.workers  # a new view: the live actors
    finally:
        group.teardown()
        pool.teardown()


def test_impossible_resources_are_a_one_line_error_and_leave_nothing(ray_cluster, no_leaks):
    from supervisor.placement.resource_wait import InfeasibleResourcesError

    with pytest.raises(InfeasibleResourcesError) as exc:
        _seed_group("huge", [64])
    assert "GPU" in _one_line(exc)


def test_an_unknown_init_method_is_a_one_line_error_and_leaves_nothing(ray_cluster, no_leaks):
    from supervisor.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        _seed_group("badinit", [1], init_method="no_such_init")
    assert "no_such_init" in _one_line(exc)


# -- the patch -------------------------------------------------------------------------------------
def _run_python(code, ray_cluster):
    env = dict(os.environ, RAY_ADDRESS=ray_cluster.address)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_patch_install_before_verl_is_imported(ray_cluster):
    out = _run_python(
        """
        import sys
        from supervisor.integrations.verl import patch
        patch.install()
        patch.install()  # idempotent
        assert "verl" not in sys.modules and "torch" not in sys.modules  # nothing imported until verl is
        import ray
        from verl.single_controller.ray import RayResourcePool, RayWorkerGroup, ResourcePoolManager
        import verl.single_controller.ray.base as base
        from supervisor.integrations.verl import SupervisedRayResourcePool, SupervisedRayWorkerGroup
        assert RayWorkerGroup is SupervisedRayWorkerGroup and base.RayWorkerGroup is SupervisedRayWorkerGroup
        assert RayResourcePool is SupervisedRayResourcePool and base.RayResourcePool is SupervisedRayResourcePool
        assert issubclass(SupervisedRayResourcePool, base._supervisor_original_RayResourcePool)
        ray.init(log_to_driver=False)
        manager = ResourcePoolManager(resource_pool_spec={"global_pool": [1, 1]}, mapping={})
        manager.create_resource_pool()
        built = manager.resource_pool_dict["global_pool"]
        assert type(built) is SupervisedRayResourcePool, type(built)
        print("patched", type(built).__name__)
        """,
        ray_cluster,
    )
    assert "patched SupervisedRayResourcePool" in out


def test_the_seed_job_runs_unmodified_on_supervised_groups_after_install(ray_cluster):
    out = _run_python(
        """
        import runpy, sys
        from supervisor.integrations.verl import patch
        patch.install()  # what supervisor run's sitecustomize does
        sys.argv = ["seed_job.py", "--steps", "3", "--nodes", "2", "--per-node", "1", "--name", "seedjob"]
        try:
            runpy.run_path("examples/verl/seed_job.py", run_name="__main__")
        except SystemExit as exit:
            assert exit.code == 0, exit.code
        """,
        ray_cluster,
    )
    assert "supervisor.integrations.verl.supervised_group.SupervisedRayWorkerGroup, world_size=2" in out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("step ")] == ["step 1", "step 2", "step 3"]
    assert "complete=False" not in out and out.rstrip().endswith("done")


def test_patch_install_after_verl_is_imported_replaces_earlier_re_exports(ray_cluster):
    out = _run_python(
        """
        import verl.single_controller.ray as verl_ray
        from verl.single_controller.ray import RayWorkerGroup as early
        import sys, types
        trainer = types.ModuleType("verl.trainer.fake")  # a verl module that re-exported it (as ray_trainer does)
        trainer.RayWorkerGroup = early
        sys.modules["verl.trainer.fake"] = trainer
        from supervisor.integrations.verl import patch, SupervisedRayWorkerGroup
        assert early is not SupervisedRayWorkerGroup
        patch.install()
        assert verl_ray.RayWorkerGroup is SupervisedRayWorkerGroup
        assert trainer.RayWorkerGroup is SupervisedRayWorkerGroup
        patch.install()
        assert verl_ray.RayWorkerGroup is SupervisedRayWorkerGroup
        print("patched late")
        """,
        ray_cluster,
    )
    assert "patched late" in out


# -- trained state is never re-initialised silently ------------------------------------------------
def test_which_verl_roles_hold_trained_state():
    from examples.verl import workers
    from supervisor.integrations.verl.roles import COLOCATED_WORKER, trained_roles

    roles = {"actor_rollout": workers.TrainedRoleWorker, "ref": workers.RoleWorker, "critic": workers.RoleWorker}
    # A trained role's name and an update method: the critic role's class here has none (it trains nothing).
    assert trained_roles(COLOCATED_WORKER, roles, None, {}) == ["actor_rollout"]
    assert trained_roles(COLOCATED_WORKER, None, None, {}) == []  # roles not shown: not judged
    assert trained_roles(None, None, workers.TrainedRoleWorker, {"role": "actor_rollout_ref"}) == ["actor_rollout_ref"]
    assert trained_roles(None, None, workers.TrainedRoleWorker, {"role": "rollout"}) == []
    assert trained_roles(None, None, workers.RoleWorker, {"role": "actor"}) == []


def test_a_trained_verl_role_fails_its_group_in_one_line_instead_of_a_silent_re_initialisation(ray_cluster, no_leaks):
    """verl's actor roles hold FSDP shards no snapshot keeps. Before any update a lost rank costs
    nothing (the init recreates the initial state); after one, a lost rank fails the group with one line
    naming the rank, how much training was lost and what would have saved it."""
    import ray
    from verl.single_controller.ray import base as verl_base

    from examples.verl import workers
    from supervisor.errors import GroupFailedError
    from supervisor.integrations.verl import SupervisedRayResourcePool, SupervisedRayWorkerGroup

    roles = {
        "ref": verl_base.RayClassWithInitArgs(ray.remote(workers.RoleWorker), role="ref", scale=3.0),
        "actor_rollout": verl_base.RayClassWithInitArgs(ray.remote(workers.TrainedRoleWorker), role="actor_rollout", scale=2.0),
    }
    pool = SupervisedRayResourcePool(process_on_nodes=[1, 1], use_gpu=True, max_colocate_count=1, name_prefix="trained_pool")
    group = SupervisedRayWorkerGroup(resource_pool=pool, ray_cls_with_init=verl_base.create_colocated_worker_cls(roles), supervision=_supervision())
    try:
        spawned = group.spawn(prefix_set=roles.keys())
        ref, actor = spawned["ref"], spawned["actor_rollout"]
        ref.init_model()
        actor.init_model()
        os.kill(actor.process_info()[1]["pid"], signal.SIGKILL)  # untrained: replaced, nothing lost
        _wait_recovered(group, {1: 1})
        assert actor.update_actor() == [1, 1] and actor.update_actor() == [2, 2]
        os.kill(actor.process_info()[1]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while group.supervisor.state.value != "failed":
            assert time.monotonic() < deadline, "the group did not fail"
            time.sleep(0.1)
        message = str(group.supervisor.failure)
        assert "\n" not in message, message
        for part in ("rank(s) [1]", "after 2 update call(s)", "actor_rollout", "trainer.save_freq", "resume_mode=auto"):
            assert part in message, message
        with pytest.raises(GroupFailedError):
            actor.update_actor()
    finally:
        group.teardown()
        pool.teardown()
