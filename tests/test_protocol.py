"""Tests for supervisor.core.protocol: DataProto, its helpers and DataProtoFuture."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, NonTensorStack, TensorDict

from supervisor.core.protocol import (
    DataProto,
    DataProtoConfig,
    DataProtoError,
    DataProtoFuture,
    DataProtoItem,
    collate_fn,
    pad_dataproto_to_divisor,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)
from supervisor.errors import SupervisorError

PROPERTY = settings(max_examples=40, deadline=None)


@pytest.fixture(autouse=True, scope="module")
def _no_global_padding():
    """Run with auto padding off globally, whatever the environment says."""
    saved = os.environ.pop("VERL_AUTO_PADDING", None)
    DataProtoConfig.auto_padding = False
    yield
    DataProtoConfig.auto_padding = False
    if saved is not None:
        os.environ["VERL_AUTO_PADDING"] = saved


@pytest.fixture
def global_padding():
    DataProtoConfig.auto_padding = True
    yield
    DataProtoConfig.auto_padding = False


def object_array(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def make_data(n: int = 6, meta_info: dict | None = None, auto_padding: bool = False) -> DataProto:
    """Rows whose contents reveal their original position: ids[i] == i."""
    return DataProto.from_dict(
        tensors={
            "obs": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
            "ids": torch.arange(n),
        },
        non_tensors={
            "labels": object_array([f"s{i}" for i in range(n)]),
            "score": np.arange(n, dtype=np.int64) * 10,
        },
        meta_info={"temperature": 0.7} if meta_info is None else meta_info,
        auto_padding=auto_padding,
    )


def assert_same(actual: DataProto, expected: DataProto, check_meta: bool = True) -> None:
    assert len(actual) == len(expected)
    if expected.batch is None:
        assert actual.batch is None
    else:
        assert actual.batch is not None
        assert sorted(actual.batch.keys()) == sorted(expected.batch.keys())
        assert list(actual.batch.batch_size) == list(expected.batch.batch_size)
        for key in expected.batch.keys():
            assert torch.equal(actual.batch[key], expected.batch[key]), key
    assert sorted(actual.non_tensor_batch) == sorted(expected.non_tensor_batch)
    for key, array in expected.non_tensor_batch.items():
        assert actual.non_tensor_batch[key].dtype == array.dtype, key
        assert actual.non_tensor_batch[key].tolist() == array.tolist(), key
    if check_meta:
        assert actual.meta_info == expected.meta_info


@st.composite
def data_protos(draw, min_len: int = 0, max_len: int = 16) -> DataProto:
    n = draw(st.integers(min_len, max_len))
    seed = draw(st.integers(0, 2**16))
    texts = draw(st.lists(st.text(max_size=6), min_size=n, max_size=n))
    generator = torch.Generator().manual_seed(seed)
    return DataProto.from_dict(
        tensors={"obs": torch.randn(n, 3, generator=generator), "ids": torch.arange(n)},
        non_tensors={"labels": object_array(texts), "score": np.arange(n, dtype=np.int64) * 10},
        meta_info={"temperature": 0.7, "seed": seed},
    )


# ---------------------------------------------------------------- property tests


@PROPERTY
@given(chunks=st.integers(1, 6), per_chunk=st.integers(0, 5), seed=st.integers(0, 1000))
def test_chunk_then_concat_is_identity_for_divisible_lengths(chunks, per_chunk, seed):
    n = chunks * per_chunk
    data = make_data(n, meta_info={"seed": seed})
    pieces = data.chunk(chunks)
    assert [len(p) for p in pieces] == [per_chunk] * chunks
    assert_same(DataProto.concat(pieces), data)


@PROPERTY
@given(data=data_protos(), chunks=st.integers(1, 6))
def test_pad_chunk_concat_unpad_is_identity(data, chunks):
    padded, pad_size = pad_dataproto_to_divisor(data, chunks)
    assert pad_size == (-len(data)) % chunks
    assert len(padded) % chunks == 0
    restored = unpad_dataproto(DataProto.concat(padded.chunk(chunks)), pad_size)
    assert_same(restored, data)


@PROPERTY
@given(data=data_protos(), chunks=st.integers(1, 6))
def test_uneven_chunk_with_padding_enabled_concats_back(data, chunks):
    data.meta_info[DataProtoConfig.auto_padding_key] = True
    pieces = data.chunk(chunks)
    n = len(data)
    step = -(-n // chunks)
    expected = [max(0, min(step, n - i * step)) for i in range(chunks)]
    assert [len(p) for p in pieces] == expected
    assert_same(DataProto.concat(pieces), data)


@PROPERTY
@given(data=data_protos())
def test_select_pop_union_keep_length(data):
    n = len(data)
    original_ids = data.batch["ids"].clone()
    original_scores = data.non_tensor_batch["score"].copy()

    selected = data.select(batch_keys=["obs"], non_tensor_batch_keys=["labels"])
    assert len(selected) == n
    assert list(selected.batch.keys()) == ["obs"]
    assert list(selected.non_tensor_batch) == ["labels"]

    popped = data.pop(batch_keys=["ids"], non_tensor_batch_keys=["score"])
    assert len(popped) == n and len(data) == n
    assert "ids" not in data.batch.keys() and "score" not in data.non_tensor_batch

    data.union(popped)
    assert len(data) == n
    assert torch.equal(data.batch["ids"], original_ids)
    assert data.non_tensor_batch["score"].tolist() == original_scores.tolist()


@PROPERTY
@given(data=data_protos())
def test_pickle_round_trip(data):
    for item in (data, *data.chunk(1), data[: len(data) // 2]):
        assert_same(pickle.loads(pickle.dumps(item)), item)


@PROPERTY
@given(data=data_protos(max_len=8), repeat_times=st.integers(0, 4), interleave=st.booleans())
def test_repeat_lengths_and_order(data, repeat_times, interleave):
    n = len(data)
    out = data.repeat(repeat_times=repeat_times, interleave=interleave)
    assert len(out) == n * repeat_times
    ids = torch.arange(n)
    expected_ids = ids.repeat_interleave(repeat_times) if interleave else ids.repeat(repeat_times)
    assert out.batch["ids"].tolist() == expected_ids.tolist()
    assert torch.equal(out.batch["obs"], data.batch["obs"][expected_ids])
    assert out.non_tensor_batch["labels"].tolist() == [
        data.non_tensor_batch["labels"][i] for i in expected_ids
    ]
    assert out.meta_info is data.meta_info


@PROPERTY
@given(data=data_protos(min_len=1), split_size=st.integers(1, 8))
def test_split_then_concat_is_identity(data, split_size):
    pieces = data.split(split_size)
    n = len(data)
    assert [len(p) for p in pieces] == [min(split_size, n - i) for i in range(0, n, split_size)]
    assert_same(DataProto.concat(pieces), data)


# ------------------------------------------------------------------- construction


def test_from_dict_builds_all_three_parts():
    meta = {"step": 3}
    data = DataProto.from_dict(
        tensors={"obs": torch.ones(3, 2)}, non_tensors={"labels": ["a", "b", "c"]}, meta_info=meta
    )
    assert len(data) == 3
    assert list(data.batch.batch_size) == [3]
    assert data.non_tensor_batch["labels"].dtype == object
    assert data.non_tensor_batch["labels"].tolist() == ["a", "b", "c"]
    assert data.meta_info == {"step": 3}
    assert DataProtoConfig.auto_padding_key not in meta


def test_from_dict_auto_padding_marks_meta_info():
    data = DataProto.from_dict(tensors={"obs": torch.ones(3)}, auto_padding=True)
    assert data.meta_info == {"_verl_auto_padding": True}
    assert DataProtoConfig.auto_padding_key == "_verl_auto_padding"
    assert data.is_padding_enabled() is True
    assert make_data(3).is_padding_enabled() is False


def test_from_dict_rejects_two_batch_dims_as_verl_0_9_does():
    with pytest.raises(AssertionError, match=r"exactly 1 batch dimension .* got batch_size=\[2, 3\]"):
        DataProto.from_dict(tensors={"x": torch.zeros(2, 3, 4)}, num_batch_dims=2)


def test_from_dict_rejects_tensors_with_different_batch_sizes():
    with pytest.raises(
        ValueError, match=r"tensors\['b'\] has batch shape \[4\] but tensors\['a'\] has \[3\]"
    ):
        DataProto.from_dict(tensors={"a": torch.zeros(3), "b": torch.zeros(4)})


def test_from_dict_rejects_non_tensors_with_two_batch_dims():
    with pytest.raises(ValueError, match="num_batch_dims must be 1"):
        DataProto.from_dict(tensors={"x": torch.zeros(2, 2)}, non_tensors={"a": ["p", "q"]}, num_batch_dims=2)


def test_construction_rejects_non_tensor_length_mismatch():
    with pytest.raises(
        ValueError, match=r"non_tensor_batch\['labels'\] has length 3 but the batch size is 4"
    ) as info:
        DataProto.from_dict(tensors={"obs": torch.zeros(4)}, non_tensors={"labels": ["a", "b", "c"]})
    # verl raised AssertionError here; ported code catching that still works.
    assert isinstance(info.value, AssertionError)
    assert isinstance(info.value, SupervisorError)


def test_construction_rejects_mismatched_columns_without_batch():
    with pytest.raises(
        ValueError, match=r"non_tensor_batch\['b'\] has length 2 but non_tensor_batch\['a'\] is 3"
    ):
        DataProto(non_tensor_batch={"a": np.arange(3), "b": np.arange(2)})


def test_check_consistency_rejects_non_array_column():
    data = make_data(2)
    data.non_tensor_batch["bad"] = ["x", "y"]
    with pytest.raises(ValueError, match=r"non_tensor_batch\['bad'\] must be a numpy array, got list"):
        data.check_consistency()


def test_check_consistency_rejects_two_batch_dims_with_non_tensors():
    with pytest.raises(ValueError, match=r"exactly 1 batch dimension .* got batch_size=\[2, 3\]"):
        DataProto(
            batch=TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3]),
            non_tensor_batch={"a": np.arange(2)},
        )


def test_from_single_dict_splits_tensors_and_arrays():
    data = DataProto.from_single_dict(
        {"obs": torch.arange(2), "labels": np.array(["a", "b"], dtype=object)},
        meta_info={"k": 1},
        auto_padding=True,
    )
    assert list(data.batch.keys()) == ["obs"]
    assert data.non_tensor_batch["labels"].tolist() == ["a", "b"]
    assert data.meta_info == {"k": 1, "_verl_auto_padding": True}
    with pytest.raises(ValueError, match="key 'labels' must be a torch.Tensor or np.ndarray, got list"):
        DataProto.from_single_dict({"labels": ["a"]})


def test_len_for_each_layout():
    assert len(make_data(5)) == 5
    assert len(DataProto(non_tensor_batch={"a": np.arange(7)})) == 7
    assert len(DataProto()) == 0


def test_none_parts_are_normalised_to_empty_dicts():
    data = DataProto(batch=None, non_tensor_batch=None, meta_info=None)
    assert data.non_tensor_batch == {} and data.meta_info == {}


def test_config_auto_padding_accepts_only_bool_and_reads_env(monkeypatch):
    with pytest.raises(TypeError, match="auto_padding must be a bool, got int"):
        DataProtoConfig.auto_padding = 1
    assert DataProtoConfig.auto_padding is False
    monkeypatch.setenv("VERL_AUTO_PADDING", "TRUE")
    assert DataProtoConfig.auto_padding is True
    assert make_data(3).is_padding_enabled() is True
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    assert DataProtoConfig.auto_padding is True
    monkeypatch.setenv("VERL_AUTO_PADDING", "no")
    assert DataProtoConfig.auto_padding is False


# ------------------------------------------------------------------------ indexing


def test_getitem_int_returns_item():
    data = make_data(4)
    item = data[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["ids"].item() == 2
    assert item.batch["obs"].tolist() == [6.0, 7.0, 8.0]
    assert item.non_tensor_batch == {"labels": "s2", "score": 20}
    assert item.meta_info is data.meta_info
    assert data[-1].batch["ids"].item() == 3
    assert data[np.int64(1)].non_tensor_batch["labels"] == "s1"
    assert data[torch.tensor(3)].non_tensor_batch["labels"] == "s3"


def test_getitem_int_out_of_range():
    with pytest.raises(IndexError, match="index 4 is out of range for a DataProto of length 4"):
        make_data(4)[4]


def test_getitem_slice():
    data = make_data(6)
    part = data[1:5:2]
    assert isinstance(part, DataProto)
    assert part.batch["ids"].tolist() == [1, 3]
    assert part.non_tensor_batch["labels"].tolist() == ["s1", "s3"]
    assert part.meta_info is data.meta_info
    assert data.slice(4).batch["ids"].tolist() == [4, 5]
    assert data.slice(None, 2).non_tensor_batch["score"].tolist() == [0, 10]


@pytest.mark.parametrize(
    "index",
    [
        [4, 0, 4],
        np.array([4, 0, 4]),
        torch.tensor([4, 0, 4]),
        np.array([4, 0, 4], dtype=np.int32),
    ],
    ids=["list", "ndarray", "tensor", "int32"],
)
def test_getitem_integer_arrays(index):
    part = make_data(6)[index]
    assert part.batch["ids"].tolist() == [4, 0, 4]
    assert part.non_tensor_batch["labels"].tolist() == ["s4", "s0", "s4"]
    assert part.non_tensor_batch["score"].tolist() == [40, 0, 40]


@pytest.mark.parametrize(
    "mask",
    [
        [True, False, True, False],
        np.array([True, False, True, False]),
        torch.tensor([True, False, True, False]),
    ],
    ids=["list", "ndarray", "tensor"],
)
def test_getitem_boolean_masks(mask):
    part = make_data(4)[mask]
    assert part.batch["ids"].tolist() == [0, 2]
    assert list(part.batch.batch_size) == [2]
    assert part.non_tensor_batch["labels"].tolist() == ["s0", "s2"]


def test_getitem_empty_list_gives_empty_dataproto():
    part = make_data(3)[[]]
    assert len(part) == 0
    assert part.non_tensor_batch["labels"].tolist() == []


@pytest.mark.parametrize("index", [1.5, "a", (0, 1), None])
def test_getitem_rejects_other_types(index):
    with pytest.raises(TypeError, match=type(index).__name__):
        make_data(3)[index]


def test_select_idxs_rejects_wrong_mask_length_and_float_indices():
    with pytest.raises(ValueError, match=r"boolean mask has shape \(2,\) but the DataProto has length 3"):
        make_data(3).select_idxs([True, False])
    with pytest.raises(TypeError, match="integers or booleans"):
        make_data(3).select_idxs(np.array([0.5]))


def test_select_idxs_without_tensor_batch():
    data = DataProto(non_tensor_batch={"a": np.array(["x", "y", "z"], dtype=object)})
    assert data.select_idxs([2, 0]).non_tensor_batch["a"].tolist() == ["z", "x"]
    assert data.select_idxs([2, 0]).batch is None


# -------------------------------------------------------------------- key operations


def test_select_picks_keys_and_shares_tensors():
    data = make_data(3, meta_info={"a": 1, "b": [1, 2]})
    sub = data.select(batch_keys=["ids"], non_tensor_batch_keys=["labels"], meta_info_keys=["b"])
    assert list(sub.batch.keys()) == ["ids"]
    assert list(sub.non_tensor_batch) == ["labels"]
    assert sub.meta_info == {"b": [1, 2]}
    sub.batch["ids"][0] = 99
    assert data.batch["ids"][0].item() == 99
    whole = data.select()
    assert whole.batch is data.batch and whole.meta_info is data.meta_info


def test_select_string_key_means_one_key():
    assert list(make_data(2).select(batch_keys="obs").batch.keys()) == ["obs"]


def test_select_deepcopy_detaches_non_tensor_and_meta():
    data = make_data(2, meta_info={"cfg": {"lr": 1.0}})
    copied = data.select(deepcopy=True)
    copied.non_tensor_batch["labels"][0] = "changed"
    copied.meta_info["cfg"]["lr"] = 2.0
    assert data.non_tensor_batch["labels"][0] == "s0"
    assert data.meta_info["cfg"]["lr"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_keys": ["obs", "nope"]}, r"unknown batch key\(s\) \['nope'\]; available: \['obs', 'ids'\]"),
        (
            {"non_tensor_batch_keys": ["nope"]},
            r"unknown non_tensor_batch key\(s\) \['nope'\]; available: \['labels', 'score'\]",
        ),
        (
            {"meta_info_keys": ["nope"]},
            r"unknown meta_info key\(s\) \['nope'\]; available: \['temperature'\]",
        ),
    ],
)
def test_select_unknown_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_data(2).select(**kwargs)


def test_pop_removes_and_returns():
    data = make_data(3, meta_info={"a": 1, "b": 2})
    popped = data.pop(batch_keys=["obs"], non_tensor_batch_keys=["labels"], meta_info_keys=["a"])
    assert list(popped.batch.keys()) == ["obs"]
    assert popped.batch["obs"][2].tolist() == [6.0, 7.0, 8.0]
    assert popped.non_tensor_batch["labels"].tolist() == ["s0", "s1", "s2"]
    assert popped.meta_info == {"a": 1}
    assert list(data.batch.keys()) == ["ids"]
    assert list(data.non_tensor_batch) == ["score"]
    assert data.meta_info == {"b": 2}


def test_pop_non_tensor_only_gives_batchless_result():
    data = make_data(3)
    popped = data.pop(non_tensor_batch_keys=["score"])
    assert popped.batch is None and len(popped) == 3


def test_pop_unknown_key_removes_nothing():
    data = make_data(2)
    with pytest.raises(
        ValueError, match=r"unknown batch key\(s\) \['missing'\]; available: \['obs', 'ids'\]"
    ):
        data.pop(batch_keys=["obs", "missing"])
    assert sorted(data.batch.keys()) == ["ids", "obs"]
    with pytest.raises(ValueError, match=r"unknown non_tensor_batch key\(s\) \['missing'\]"):
        data.pop(non_tensor_batch_keys=["missing"])


def test_rename_single_and_list_and_swap():
    data = make_data(2)
    assert data.rename("obs", "observation") is data
    assert sorted(data.batch.keys()) == ["ids", "observation"]
    data.rename(["ids", "observation"], ["observation", "ids"])
    assert data.batch["observation"].tolist() == [0, 1]
    assert data.batch["ids"].shape == (2, 3)


def test_rename_errors():
    data = make_data(2)
    with pytest.raises(ValueError, match=r"unknown batch key\(s\) \['nope'\]; available: \['obs', 'ids'\]"):
        data.rename("nope", "x")
    with pytest.raises(ValueError, match="differ in length: 2 vs 1"):
        data.rename(["obs", "ids"], ["x"])
    with pytest.raises(ValueError, match="collide"):
        data.rename("obs", "ids")
    with pytest.raises(TypeError, match="old_keys must be a str or a list of str, got int"):
        data.rename(3, "x")


def test_union_merges_all_parts():
    left = make_data(3, meta_info={"a": 1})
    right = DataProto.from_dict(
        tensors={"ids": torch.arange(3), "extra": torch.ones(3)},
        non_tensors={"labels": object_array(["s0", "s1", "s2"]), "more": np.array([7, 8, 9])},
        meta_info={"a": 1, "b": 2},
    )
    batch_before = left.batch
    assert left.union(right) is left
    assert left.batch is batch_before
    assert sorted(left.batch.keys()) == ["extra", "ids", "obs"]
    assert left.non_tensor_batch["more"].tolist() == [7, 8, 9]
    assert left.meta_info == {"a": 1, "b": 2}


def test_union_into_batchless_dataproto():
    left = DataProto(non_tensor_batch={"a": np.arange(2)})
    left.union(DataProto.from_dict(tensors={"x": torch.tensor([5, 6])}))
    assert left.batch["x"].tolist() == [5, 6]


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (
            DataProto.from_dict(tensors={"ids": torch.tensor([0, 1, 5])}),
            "batch key 'ids' holds different values",
        ),
        (
            DataProto.from_dict(non_tensors={"labels": ["s0", "x", "s2"]}),
            "non_tensor_batch key 'labels' holds different values",
        ),
        (DataProto(meta_info={"temperature": 1.0}), "meta_info key 'temperature' holds different values"),
        (DataProto.from_dict(tensors={"new": torch.zeros(2)}), "lengths 3 and 2"),
    ],
    ids=["tensor", "non_tensor", "meta", "length"],
)
def test_union_conflicts_raise_and_leave_self_unchanged(other, message):
    data = make_data(3)
    with pytest.raises(ValueError, match=message):
        data.union(other)
    assert sorted(data.batch.keys()) == ["ids", "obs"]
    assert data.meta_info == {"temperature": 0.7}


def test_union_compares_tensor_meta_values():
    data = DataProto(meta_info={"w": torch.ones(2), "cfg": {"n": [1, 2]}})
    data.union(DataProto(meta_info={"w": torch.ones(2), "cfg": {"n": [1, 2]}}))
    assert sorted(data.meta_info) == ["cfg", "w"]
    with pytest.raises(ValueError, match="meta_info key 'w'"):
        data.union(DataProto(meta_info={"w": [1.0, 1.0]}))
    with pytest.raises(ValueError, match="meta_info key 'cfg'"):
        data.union(DataProto(meta_info={"cfg": {"n": [1, 3]}}))


def test_union_tensor_dict_treats_nan_as_equal_and_rejects_conflicts():
    left = TensorDict({"x": torch.tensor([1.0, float("nan")])}, batch_size=[2])
    right = TensorDict({"x": torch.tensor([1.0, float("nan")]), "y": torch.ones(2)}, batch_size=[2])
    assert union_tensor_dict(left, right) is left
    assert sorted(left.keys()) == ["x", "y"]
    bad = TensorDict({"x": torch.tensor([1.0, 2.0]), "z": torch.ones(2)}, batch_size=[2])
    with pytest.raises(ValueError, match="batch key 'x'"):
        union_tensor_dict(left, bad)
    assert "z" not in left.keys()
    with pytest.raises(ValueError, match=r"batch sizes \[2\] and \[3\]"):
        union_tensor_dict(left, TensorDict({}, batch_size=[3]))


def test_union_numpy_dict_deep_compares_object_arrays():
    left = {"a": object_array([{"k": [1, 2]}, float("nan")])}
    right = {"a": object_array([{"k": [1, 2]}, float("nan")]), "b": np.arange(2)}
    assert union_numpy_dict(left, right) is left
    assert sorted(left) == ["a", "b"]
    with pytest.raises(ValueError, match="`a` in tensor_dict1 and tensor_dict2 are not the same object"):
        union_numpy_dict(left, {"a": object_array([{"k": [1, 3]}, float("nan")])})


# -------------------------------------------------------------------- row operations


def test_chunk_uneven_without_padding_explains_how_to_pad():
    with pytest.raises(ValueError) as info:
        make_data(5).chunk(2)
    message = str(info.value)
    assert "length 5 into 2 equal chunks" in message
    assert "pad_dataproto_to_divisor(data, 2)" in message
    assert "DataProto.from_dict(..., auto_padding=True)" in message
    assert isinstance(info.value, DataProtoError)


def test_chunk_even_shares_meta_info():
    data = make_data(6)
    pieces = data.chunk(3)
    assert [p.batch["ids"].tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5]]
    assert [p.non_tensor_batch["labels"].tolist() for p in pieces] == [
        ["s0", "s1"],
        ["s2", "s3"],
        ["s4", "s5"],
    ]
    assert all(p.meta_info is data.meta_info for p in pieces)


def test_chunk_uneven_with_auto_padding_follows_torch_sizes():
    data = make_data(5, auto_padding=True)
    assert [p.batch["ids"].tolist() for p in data.chunk(3)] == [[0, 1], [2, 3], [4]]
    # torch.chunk would return only two pieces here; one piece per rank is kept.
    assert [len(p) for p in make_data(2, auto_padding=True).chunk(3)] == [1, 1, 0]


def test_chunk_uneven_with_global_padding(global_padding):
    assert [len(p) for p in make_data(7).chunk(4)] == [2, 2, 2, 1]


def test_chunk_rejects_non_positive():
    with pytest.raises(ValueError, match="chunks must be a positive int, got 0"):
        make_data(2).chunk(0)


def test_chunk_without_tensor_batch():
    data = DataProto(non_tensor_batch={"a": np.arange(4)})
    assert [p.non_tensor_batch["a"].tolist() for p in data.chunk(2)] == [[0, 1], [2, 3]]


def test_split_pieces():
    assert [p.batch["ids"].tolist() for p in make_data(5).split(2)] == [[0, 1], [2, 3], [4]]
    assert make_data(0).split(3) == []
    with pytest.raises(ValueError, match="split_size must be a positive int"):
        make_data(2).split(0)


def test_concat_joins_rows():
    merged = DataProto.concat([make_data(2), make_data(3)])
    assert merged.batch["ids"].tolist() == [0, 1, 0, 1, 2]
    assert merged.non_tensor_batch["labels"].tolist() == ["s0", "s1", "s0", "s1", "s2"]
    assert merged.non_tensor_batch["score"].dtype == np.int64
    assert merged.meta_info == {"temperature": 0.7}


def test_concat_gathers_metrics_lists_of_dicts():
    parts = [
        make_data(1, meta_info={"metrics": [{"loss": 0.5, "acc": 0.9}], "flag": True}),
        make_data(1, meta_info={"metrics": [{"loss": 0.6, "acc": 0.8}], "flag": True}),
        make_data(1, meta_info={"metrics": [{"loss": 0.7, "acc": 0.7}], "flag": True}),
    ]
    merged = DataProto.concat(parts)
    assert merged.meta_info == {"flag": True, "metrics": {"loss": [0.5, 0.6, 0.7], "acc": [0.9, 0.8, 0.7]}}


def test_concat_gathers_metrics_dicts_and_skips_missing():
    parts = [
        make_data(1, meta_info={"step": 1}),
        make_data(1, meta_info={"metrics": {"loss": 0.6}, "step": 1}),
        make_data(1, meta_info={"metrics": None, "step": 1}),
        make_data(1, meta_info={"metrics": {"loss": 0.55}, "step": 1, "other": "x"}),
    ]
    merged = DataProto.concat(parts)
    assert merged.meta_info == {"step": 1, "other": "x", "metrics": {"loss": [0.6, 0.55]}}


def test_concat_without_metrics_adds_no_metrics_key():
    assert "metrics" not in DataProto.concat([make_data(1), make_data(1)]).meta_info


def test_concat_conflicting_meta_info():
    with pytest.raises(ValueError, match="Conflicting values for meta_info key 'temperature': 0.7 vs 1.0"):
        DataProto.concat([make_data(1), make_data(1, meta_info={"temperature": 1.0})])


def test_concat_errors():
    with pytest.raises(ValueError, match="empty list"):
        DataProto.concat([])
    with pytest.raises(ValueError, match=r"parts \[1\] have batch=None"):
        DataProto.concat(
            [make_data(1), DataProto(non_tensor_batch={"labels": np.array(["x"]), "score": np.array([1])})]
        )
    with pytest.raises(ValueError, match=r"part 1 has batch keys \['ids'\], part 0 has \['ids', 'obs'\]"):
        DataProto.concat([make_data(1), make_data(1).select(batch_keys=["ids"])])
    with pytest.raises(ValueError, match=r"part 1 has non_tensor_batch keys \['labels'\]"):
        DataProto.concat([make_data(1), make_data(1).select(non_tensor_batch_keys=["labels"])])


def test_reorder_in_place():
    data = make_data(4)
    assert data.reorder(torch.tensor([3, 1, 0, 2])) is None
    assert data.batch["ids"].tolist() == [3, 1, 0, 2]
    assert data.non_tensor_batch["labels"].tolist() == ["s3", "s1", "s0", "s2"]
    data.reorder(np.array([1, 0, 2, 3]))
    assert data.batch["ids"].tolist() == [1, 3, 0, 2]


def test_repeat_examples():
    data = make_data(2)
    assert data.repeat(3).batch["ids"].tolist() == [0, 0, 0, 1, 1, 1]
    assert data.repeat(2, interleave=False).non_tensor_batch["labels"].tolist() == ["s0", "s1", "s0", "s1"]
    with pytest.raises(ValueError, match="repeat_times must be >= 0, got -1"):
        data.repeat(-1)


@pytest.mark.parametrize(
    "counts",
    [[2, 0, 1], (2, 0, 1), torch.tensor([2, 0, 1]), np.array([2, 0, 1])],
    ids=["list", "tuple", "tensor", "ndarray"],
)
def test_sample_level_repeat_per_row(counts):
    out = make_data(3).sample_level_repeat(counts)
    assert out.batch["ids"].tolist() == [0, 0, 2]
    assert out.non_tensor_batch["labels"].tolist() == ["s0", "s0", "s2"]


def test_sample_level_repeat_int_and_errors():
    assert make_data(2).sample_level_repeat(2).batch["ids"].tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"one count per row \(3\), got shape \(2,\)"):
        make_data(3).sample_level_repeat([1, 2])
    with pytest.raises(ValueError, match="must be >= 0"):
        make_data(2).sample_level_repeat([1, -1])


def test_padding_in_place():
    data = make_data(3, meta_info={"metrics": {"loss": 1.0}})
    assert data.padding(2) is None
    assert data.batch["ids"].tolist() == [0, 1, 2, 2, 2]
    assert data.non_tensor_batch["labels"].tolist() == ["s0", "s1", "s2", "s2", "s2"]
    assert data.meta_info == {"metrics": {"loss": 1.0}}
    data.padding(1, padding_candidate="first")
    assert data.batch["ids"].tolist() == [0, 1, 2, 2, 2, 0]
    data.padding(0)
    assert len(data) == 6


def test_padding_errors():
    with pytest.raises(ValueError, match="padding_candidate must be 'first' or 'last', got 'middle'"):
        make_data(2).padding(1, "middle")
    with pytest.raises(ValueError, match="no row to repeat"):
        make_data(0).padding(1)


def test_pad_and_unpad():
    data = make_data(5, meta_info={"metrics": {"loss": 1.0}})
    padded, pad_size = pad_dataproto_to_divisor(data, 4)
    assert pad_size == 3
    assert padded.batch["ids"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert padded.non_tensor_batch["labels"].tolist()[5:] == ["s0", "s1", "s2"]
    # Padding must not gather the metrics once per padding part.
    assert padded.meta_info == {"metrics": {"loss": 1.0}}
    assert_same(unpad_dataproto(padded, pad_size), data)


def test_pad_shorter_than_divisor_repeats_the_data():
    padded, pad_size = pad_dataproto_to_divisor(make_data(2), 5)
    assert pad_size == 3
    assert padded.batch["ids"].tolist() == [0, 1, 0, 1, 0]


def test_pad_when_already_divisible_returns_same_object():
    data = make_data(4)
    padded, pad_size = pad_dataproto_to_divisor(data, 2)
    assert padded is data and pad_size == 0
    assert unpad_dataproto(data, 0) is data


def test_pad_errors():
    with pytest.raises(TypeError, match="data must be a DataProto, got dict"):
        pad_dataproto_to_divisor({}, 2)
    with pytest.raises(ValueError, match="size_divisor must be a positive int, got 0"):
        pad_dataproto_to_divisor(make_data(2), 0)
    with pytest.raises(ValueError, match=r"pad_size must be in \[0, 2\], got 3"):
        unpad_dataproto(make_data(2), 3)


def test_make_iterator_sequential_order_and_epochs():
    data = make_data(6, meta_info={"k": "v"})
    batches = list(data.make_iterator(mini_batch_size=2, epochs=2))
    assert [b.batch["ids"].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5]] * 2
    assert [b.non_tensor_batch["labels"].tolist() for b in batches[:1]] == [["s0", "s1"]]
    assert all(b.meta_info is data.meta_info for b in batches)
    assert batches[0].non_tensor_batch["score"].dtype == np.int64


def test_make_iterator_shuffle_is_deterministic_with_seed():
    data = make_data(16)

    def order(seed):
        it = data.make_iterator(4, epochs=2, seed=seed, dataloader_kwargs={"shuffle": True})
        return [b.batch["ids"].tolist() for b in it]

    first = order(7)
    assert first == order(7)
    assert first != order(8)
    assert len(first) == 8
    epoch1 = sum(first[:4], [])
    epoch2 = sum(first[4:], [])
    assert sorted(epoch1) == list(range(16)) and sorted(epoch2) == list(range(16))
    assert epoch1 != list(range(16))
    assert epoch1 != epoch2
    # Rows stay aligned across parts while shuffled.
    for batch in data.make_iterator(4, epochs=1, seed=7, dataloader_kwargs={"shuffle": True}):
        assert batch.non_tensor_batch["labels"].tolist() == [f"s{i}" for i in batch.batch["ids"].tolist()]


def test_make_iterator_requires_divisible_length():
    with pytest.raises(ValueError, match="length 5 is not divisible by mini_batch_size 2"):
        make_data(5).make_iterator(2, epochs=1)


# ---------------------------------------------------------------- conversion & I/O


def test_to_device_returns_self():
    data = make_data(2)
    assert data.to("cpu") is data
    assert data.batch.device == torch.device("cpu")
    assert data.batch["obs"].device.type == "cpu"


def test_to_tensordict_and_back_with_nested_values():
    data = DataProto.from_dict(
        tensors={"obs": torch.arange(4)},
        non_tensors={
            "labels": ["a", "b", "c", "d"],
            "turn_scores": object_array([[], [0.5], [0.8, 0.9], [0.7]]),
            "info": [{"acc": 1.0}, {"acc": 0.5}, {"acc": 1.0}, {"acc": 0.0}],
            "prompt": object_array([[{"role": "user"}]] * 4),
        },
        meta_info={"experiment": "x", "cfg": {"n": 2}},
    )
    td = data.to_tensordict()
    assert isinstance(td, TensorDict)
    assert td["obs"].tolist() == [0, 1, 2, 3]
    assert list(td["labels"]) == ["a", "b", "c", "d"]
    assert td["experiment"] == "x"
    assert isinstance(td.get("info"), NonTensorStack)
    assert isinstance(td.get("cfg"), NonTensorData)

    back = DataProto.from_tensordict(td)
    assert back.batch["obs"].tolist() == [0, 1, 2, 3]
    assert back.meta_info == {"experiment": "x", "cfg": {"n": 2}}
    assert back.non_tensor_batch["prompt"].shape == (4,)
    for key, column in data.non_tensor_batch.items():
        assert back.non_tensor_batch[key].tolist() == column.tolist(), key


def test_to_tensordict_round_trip_without_batch_and_empty():
    data = DataProto(non_tensor_batch={"a": np.array([1, 2, 3])}, meta_info={"m": 1})
    back = DataProto.from_tensordict(data.to_tensordict())
    assert back.batch is None
    assert back.non_tensor_batch["a"].tolist() == [1, 2, 3]
    assert back.non_tensor_batch["a"].dtype == np.int64
    assert back.meta_info == {"m": 1}
    empty = DataProto.from_tensordict(DataProto().to_tensordict())
    assert len(empty) == 0 and empty.batch is None


def test_from_tensordict_merges_given_meta_info():
    td = TensorDict({"x": torch.zeros(2), "name": NonTensorData("n")}, batch_size=[2])
    data = DataProto.from_tensordict(td, meta_info={"k": 1})
    assert data.meta_info == {"k": 1, "name": "n"}
    with pytest.raises(TypeError, match="tensor_dict must be a TensorDict, got dict"):
        DataProto.from_tensordict({"x": torch.zeros(2)})


def test_to_tensordict_rejects_duplicate_keys():
    data = make_data(2, meta_info={"labels": "clash"})
    with pytest.raises(ValueError, match="key 'labels' appears in more than one"):
        data.to_tensordict()


def test_pickle_batchless_and_object_strings():
    data = DataProto(
        non_tensor_batch={
            "text": object_array(["héllo", "", "x" * 50]),
            "d": object_array([{"a": 1}, None, [2]]),
        },
        meta_info={"m": np.arange(3)},
    )
    back = pickle.loads(pickle.dumps(data))
    assert back.batch is None
    assert back.non_tensor_batch["text"].tolist() == ["héllo", "", "x" * 50]
    assert back.non_tensor_batch["d"].tolist() == [{"a": 1}, None, [2]]
    assert back.meta_info["m"].tolist() == [0, 1, 2]


def test_pickle_keeps_nested_tensordict_and_requires_grad():
    weights = torch.ones(2, 2, requires_grad=True)
    batch = TensorDict(
        {"w": weights, "sub": TensorDict({"y": torch.arange(2)}, batch_size=[2])}, batch_size=[2]
    )
    back = pickle.loads(pickle.dumps(DataProto(batch=batch)))
    assert back.batch["sub", "y"].tolist() == [0, 1]
    assert back.batch["w"].requires_grad is True
    assert back.batch["w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_protocol_5_ships_a_chunks_rows_out_of_band_and_the_reader_gets_writable_tensors():
    big = DataProto.from_dict(tensors={"ids": torch.arange(80_000, dtype=torch.int64).reshape(1000, 80), "half": torch.ones(1000, 2, dtype=torch.bfloat16)})
    piece = big.chunk(10)[3]
    buffers = []
    payload = pickle.dumps(piece, protocol=5, buffer_callback=buffers.append)
    assert [b.raw().nbytes for b in buffers] == [100 * 80 * 8]  # ids: exactly the chunk's rows; bfloat16 travels in band
    assert len(payload) < 10_000
    readonly = [memoryview(bytes(b.raw())) for b in buffers]  # what Ray's object store hands back: read-only memory
    back = pickle.loads(payload, buffers=readonly)
    assert back.batch["ids"].equal(piece.batch["ids"]) and back.batch["half"].dtype == torch.bfloat16
    back.batch["ids"] += 1  # writable: its own copy, not the shared (read-only) buffer
    assert back.batch["ids"][0, 0].item() == piece.batch["ids"][0, 0].item() + 1


def test_pickled_chunk_does_not_carry_parent_storage():
    big = DataProto.from_dict(tensors={"x": torch.zeros(1000, 100)})
    piece = big.chunk(10)[3]
    assert len(pickle.dumps(piece)) * 5 < len(pickle.dumps(big))
    assert pickle.loads(pickle.dumps(piece)).batch["x"].shape == (100, 100)


def test_save_and_load(tmp_path):
    data = make_data(3, meta_info={"metrics": {"loss": [1.0]}})
    path = tmp_path / "data.pkl"
    data.save_to_disk(path)
    assert_same(DataProto.load_from_disk(path), data)
    other = tmp_path / "other.pkl"
    other.write_bytes(pickle.dumps({"not": "a dataproto"}))
    with pytest.raises(TypeError, match="holds a dict, not a DataProto"):
        DataProto.load_from_disk(other)


def test_collate_fn_stacks_items():
    data = make_data(3)
    out = collate_fn([data[2], data[0]])
    assert out.batch["ids"].tolist() == [2, 0]
    assert out.non_tensor_batch["labels"].tolist() == ["s2", "s0"]
    assert out.non_tensor_batch["labels"].dtype == object
    assert out.non_tensor_batch["score"].dtype == np.int64
    assert out.meta_info == {}
    with pytest.raises(ValueError, match="at least one DataProtoItem"):
        collate_fn([])


def test_collate_fn_keeps_typed_string_and_2d_columns():
    data = DataProto(
        non_tensor_batch={"name": np.array(["a", "bbb"]), "pair": np.arange(4).reshape(2, 2)},
    )
    out = collate_fn([data[1], data[0]])
    assert out.batch is None
    assert out.non_tensor_batch["name"].dtype == np.dtype("<U3")
    assert out.non_tensor_batch["name"].tolist() == ["bbb", "a"]
    assert out.non_tensor_batch["pair"].tolist() == [[2, 3], [0, 1]]


def test_get_data_info():
    data = DataProto.from_dict(
        tensors={"obs": torch.zeros(2, 3)},
        non_tensors={"labels": ["a", "b"]},
        meta_info={"lr": 0.1, "tags": ["x", "y"], "cfg": {"n": 1}, "pair": (1, "a")},
    )
    assert data.get_data_info() == "\n".join(
        [
            "batch",
            "  obs: (2, 3) (torch.float32) cpu",
            "non_tensor_batch",
            "  labels: ndarray(2,) (object)",
            "meta_info",
            "  lr: float",
            "  tags: list[str]",
            "  cfg: dict[str: int]",
            "  pair: tuple(int, str)",
        ]
    )
    assert DataProto().get_data_info() == "batch\nnon_tensor_batch\nmeta_info"


def test_print_size(capsys):
    data = DataProto.from_dict(
        tensors={"x": torch.zeros(256, dtype=torch.float32)}, non_tensors={"a": np.zeros(256)}
    )
    data.print_size(prefix="step 1")
    tensor_gb = 256 * 4 / 1024**3
    array_gb = 256 * 8 / 1024**3
    assert capsys.readouterr().out == (
        f"step 1, Size of tensordict: {tensor_gb} GB, size of non_tensor_batch: {array_gb} GB\n"
    )


# --------------------------------------------------------------------------- futures


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # address="local" starts a private cluster even if another one is running on this machine.
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    yield ray
    ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    else:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved


def test_dataproto_future_concat_chunk_get(local_ray):
    ray = local_ray
    parts = [make_data(2, meta_info={"metrics": {"loss": float(i)}}) for i in range(3)]
    refs = [ray.put(p) for p in parts]

    future = DataProtoFuture.concat(refs)
    whole = future.get()
    assert whole.batch["ids"].tolist() == [0, 1, 0, 1, 0, 1]
    assert whole.meta_info == {"metrics": {"loss": [0.0, 1.0, 2.0]}}

    pieces = future.chunk(3)
    assert [p.get().batch["ids"].tolist() for p in pieces] == [[0, 1], [0, 1], [0, 1]]
    assert pieces[1].get().non_tensor_batch["labels"].tolist() == ["s0", "s1"]

    # A chunk of a chunk resolves to the sub-chunk, not to a chunk of the whole.
    sub = pieces[2].chunk(2)
    assert [s.get().batch["ids"].tolist() for s in sub] == [[0], [1]]

    # Futures travel to a worker process and resolve there.
    @ray.remote
    def resolve(f: DataProtoFuture) -> list[int]:
        return f.get().batch["ids"].tolist()

    assert ray.get(resolve.remote(pickle.loads(pickle.dumps(pieces[0])))) == [0, 1]
    assert ray.get(resolve.remote(future)) == [0, 1, 0, 1, 0, 1]
