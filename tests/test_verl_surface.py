"""The parts of verl 0.9's surface that verl's own CPU tests (``make conformance``) do not exercise:
``BatchData``, ``all_gather_data_proto``, ``ResourcePoolManager``, the ray.base helpers
(``func_generator``, ``get_master_addr_port``, ``get_random_string``, ``extract_pg_from_exist``) and
the predefined-mode initialisers. Imports only from ``supervisor.compat.verl``, as a ported program would.
"""

from __future__ import annotations

import multiprocessing
import socket
import string

import pytest
import ray
import torch
from tensordict import TensorDict

from supervisor.compat.verl.protocol import (
    BatchData,
    DataProto,
    DataProtoFuture,
    _padding_size_key,
    all_gather_data_proto,
)
from supervisor.compat.verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    init_predefined_dispatch_mode,
    init_predefined_execute_mode,
)
from supervisor.compat.verl.single_controller.base.worker import DistGlobalInfo, DistRankInfo
from supervisor.compat.verl.single_controller.ray import RayResourcePool, ResourcePoolManager
from supervisor.compat.verl.single_controller.ray.base import (
    extract_pg_from_exist,
    func_generator,
    get_master_addr_port,
    get_random_string,
)


def _rows(n: int, start: int = 0) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(start, start + n)}, non_tensors={"s": [f"r{i}" for i in range(start, start + n)]}
    )


# -- BatchData ----------------------------------------------------------------------------------------


def test_batch_data_chunks_and_concatenates_data_protos():
    data = _rows(6)
    pieces = BatchData(data).chunk(chunks=3)
    assert [p.batch["x"].tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5]]
    assert BatchData(list(pieces)).is_concatable()
    merged = BatchData(list(pieces)).concat()
    assert merged.batch["x"].tolist() == list(range(6))
    assert merged.non_tensor_batch["s"].tolist() == [f"r{i}" for i in range(6)]


def test_batch_data_chunks_and_concatenates_tensordicts_with_jagged_columns():
    td = TensorDict(
        {
            "x": torch.arange(4),
            "ids": torch.nested.as_nested_tensor([torch.arange(n) for n in (2, 3, 4, 5)], layout=torch.jagged),
        },
        batch_size=[4],
    )
    pieces = BatchData(td).chunk(chunks=2)
    assert [len(p) for p in pieces] == [2, 2]
    assert [row.tolist() for row in pieces[1]["ids"].unbind()] == [list(range(4)), list(range(5))]
    merged = BatchData(list(pieces)).concat()
    assert merged["x"].tolist() == [0, 1, 2, 3]
    assert [len(row) for row in merged["ids"].unbind()] == [2, 3, 4, 5]


def test_batch_data_refuses_what_it_cannot_handle():
    assert not BatchData([1, 2]).is_chunkable()
    assert not BatchData([]).is_concatable()
    assert not BatchData([1, 2]).is_concatable()
    assert BatchData(_rows(2)).is_chunkable()
    with pytest.raises(ValueError, match="BatchData.concat: there are no parts to concatenate"):
        BatchData([]).concat()


def test_batch_data_turns_object_refs_into_a_future(one_node_cluster):
    refs = [ray.put(_rows(2)), ray.put(_rows(2, start=2))]
    future = BatchData(refs).concat()
    assert isinstance(future, DataProtoFuture)
    assert future.get().batch["x"].tolist() == [0, 1, 2, 3]


# -- all_gather_data_proto ----------------------------------------------------------------------------


def _gather_in_rank(rank: int, world_size: int, init_file: str, results: multiprocessing.Queue) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        data = DataProto.from_dict(
            tensors={"x": torch.full((2, 3), rank)}, non_tensors={"who": [f"{rank}a", f"{rank}b"]}, meta_info={"k": 1}
        )
        assert all_gather_data_proto(data, process_group=None) is None  # in place
        results.put((rank, data.batch["x"][:, 0].tolist(), data.non_tensor_batch["who"].tolist(), data.meta_info))
    finally:
        dist.destroy_process_group()


def test_all_gather_data_proto_gathers_rows_in_rank_order(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_gather_in_rank, args=(r, 2, str(tmp_path / "init"), results)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rank, xs, who, meta in got:
        assert xs == [0, 0, 1, 1], rank
        assert who == ["0a", "0b", "1a", "1b"], rank
        assert meta == {"k": 1}


# -- ResourcePoolManager ------------------------------------------------------------------------------


def test_resource_pool_manager_maps_roles_to_pools_and_counts_gpus(one_node_cluster):
    manager = ResourcePoolManager(resource_pool_spec={"global_pool": [2, 2], "rm": [1]}, mapping={"actor": "global_pool", "rm": "rm"})
    assert manager.max_colocate_count == 3
    assert manager.get_n_gpus() == 5
    # The one-node test cluster has no GPUs: the pools are built, then the check refuses the spec.
    with pytest.raises(ValueError, match="the resource pool spec needs 5 GPUs, the cluster has 0 available"):
        manager.create_resource_pool()
    pool = manager.get_resource_pool("actor")
    assert isinstance(pool, RayResourcePool)
    assert pool.store == [2, 2]
    assert pool.use_gpu
    assert pool.max_colocate_count == 3
    assert manager.get_resource_pool("rm").store == [1]
    with pytest.raises(KeyError):
        manager.get_resource_pool("critic")


# -- ray.base helpers ---------------------------------------------------------------------------------


class _FakeGroup:
    world_size = 2


def test_func_generator_runs_the_dispatch_execute_collect_pipeline():
    calls = []

    def dispatch_fn(group, *args, **kwargs):
        calls.append(("dispatch", group, args, kwargs))
        return (list(args) * 2,), {_padding_size_key: 1}

    def execute_fn(method_name, *args, **kwargs):
        calls.append(("execute", method_name, args, kwargs))
        return ["r0", "r1", "pad"]

    def collect_fn(group, output):
        return output

    group = _FakeGroup()
    method = func_generator(group, "generate", dispatch_fn, collect_fn, execute_fn, blocking=False)
    assert method.__name__ == "generate"
    assert method("p") == ["r0", "r1"]  # the padding dispatch reported is stripped
    assert calls[0] == ("dispatch", group, ("p",), {})
    assert calls[1] == ("execute", "generate", (["p", "p"],), {})  # the padding key is not passed on


def test_func_generator_waits_when_blocking(one_node_cluster):
    method = func_generator(
        _FakeGroup(),
        "m",
        lambda group, *a, **k: (a, k),
        lambda group, output: [o * 10 for o in output],
        lambda name, *a, **k: [ray.put(1), ray.put(2)],
        blocking=True,
    )
    assert method() == [10, 20]


def test_get_master_addr_port_takes_the_first_free_port_of_a_range(one_node_cluster):
    with socket.socket() as busy:
        busy.bind(("", 0))
        taken = busy.getsockname()[1]
        addr, port = ray.get(get_master_addr_port.remote(master_port_range=[taken, taken + 50]))
    assert addr == "127.0.0.1"
    assert isinstance(port, str) and taken < int(port) < taken + 50
    addr, port = ray.get(get_master_addr_port.remote())
    assert int(port) > 0


def test_get_master_addr_port_fails_on_a_range_without_a_free_port(one_node_cluster):
    with socket.socket() as busy:
        busy.bind(("", 0))
        taken = busy.getsockname()[1]
        with pytest.raises(RuntimeError, match="no port of .* is free on this node"):
            ray.get(get_master_addr_port.remote(master_port_range=[taken, taken + 1]))


def test_get_random_string():
    value = get_random_string(12)
    assert len(value) == 12 and set(value) <= set(string.ascii_letters + string.digits)
    assert get_random_string(12) != value  # 62**12 values


class _FakePg:
    def __init__(self, name: str, bundle_count: int) -> None:
        self.name, self.bundle_count = name, bundle_count


class _FakePool:
    def __init__(self, store: list[int], pgs: list[_FakePg] | None = None) -> None:
        self.store, self._pgs = store, pgs or []

    def get_placement_groups(self) -> list[_FakePg]:
        return self._pgs


def test_extract_pg_from_exist_gives_each_entry_a_large_enough_group_in_store_order():
    pools = {
        "actor": _FakePool([4, 2], [_FakePg("a4", 4), _FakePg("a2", 2)]),
        "critic": _FakePool([8], [_FakePg("c8", 8)]),
        "other": _FakePool([16], [_FakePg("o16", 16)]),
    }
    picked = extract_pg_from_exist(pools, ["actor", "critic"], _FakePool([2, 8, 4]))
    assert [pg.name for pg in picked] == ["a2", "c8", "a4"]
    with pytest.raises(AssertionError, match="entry 0 needs 3 bundles, the largest placement group left has 2"):
        extract_pg_from_exist(pools, ["actor"], _FakePool([3, 3]))
    with pytest.raises(AssertionError, match=r"2 placement groups needed, the pools of \['critic'\] have 1"):
        extract_pg_from_exist(pools, ["critic"], _FakePool([1, 1]))


# -- small data -------------------------------------------------------------------------------------


def test_predefined_modes_initialise_idempotently():
    before = (Dispatch.DP_COMPUTE_PROTO, Execute.RANK_ZERO)
    init_predefined_dispatch_mode()
    init_predefined_execute_mode()
    assert (Dispatch.DP_COMPUTE_PROTO, Execute.RANK_ZERO) == before
    assert {m.name for m in Execute.members()} >= {"ALL", "RANK_ZERO"}


def test_dist_infos_are_plain_records():
    assert DistRankInfo(tp_rank=0, dp_rank=1, pp_rank=0, cp_rank=0).dp_rank == 1
    assert DistGlobalInfo(tp_size=2, dp_size=4, pp_size=1, cp_size=1) == DistGlobalInfo(2, 4, 1, 1)
