"""The batch container exchanged between the driver and worker groups.

Data model
----------
A :class:`DataProto` holds one batch of samples in three parts:

* ``batch``: a :class:`tensordict.TensorDict` of tensors that share leading batch
  dimension(s), or ``None`` when the batch carries no tensors;
* ``non_tensor_batch``: ``dict[str, np.ndarray]`` of per-sample Python data
  (strings, dicts, ragged lists, usually ``dtype=object``). Every array is as long
  as the batch;
* ``meta_info``: a plain ``dict`` of batch-level values. Row operations never slice
  it; the pieces they produce share it.

Row operations (indexing, ``chunk``, ``split``, ``repeat``, ``concat``, ...) act on
``batch`` and ``non_tensor_batch`` together, so row ``i`` of every column always
describes the same sample. The single controller chunks a DataProto across the ranks
of a worker group and concatenates what the ranks return. :class:`DataProtoFuture`
defers that concatenation while the results are still in the Ray object store.

The API follows ``verl.protocol``, so verl code ports by changing the import prefix.
Misuse raises :class:`DataProtoError`: a ``SupervisorError`` and a ``ValueError``,
and also an ``AssertionError`` because verl reported the same conditions with ``assert``.

Owns: the batch protocol, one module per concern: the error and settings (:mod:`.protocol_config`),
the container (:mod:`.data`, its key and row operations in :mod:`.ops`, deep equality in
:mod:`.equality`), futures and batch chunking (:mod:`.futures`), the free functions (:mod:`.helpers`),
serialization (:mod:`.serialization`) and TensorDict batches (:mod:`.tensordict_batches`). This
package is where its names are found (see ``__module__`` below). Importing it imports torch and
tensordict, so what must stay light (which families dispatch knows, putting objects into the object
store) lives in :mod:`supervisor.core.group`.

May import: ``errors`` (checked against the import graph by ``tests/test_layers.py``). Never
``worker`` or ``group`` of core: both sides of a call use DataProto.
"""

from __future__ import annotations

# The names the fields of DataProto, DataProtoItem and DataProtoFuture are annotated with:
# typing.get_type_hints resolves a class's annotations in the module its __module__ names (below).
from collections.abc import Callable  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np  # noqa: F401
import ray  # noqa: F401
from tensordict import TensorDict  # noqa: F401

from .data import DataProto, DataProtoItem
from .futures import BatchData, DataProtoFuture, _take_chunk, _then, concat_batches
from .helpers import (
    all_gather_data_proto,
    collate_fn,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)
from .protocol_config import DataProtoConfig, DataProtoError
from .serialization import (
    deserialize_single_tensor,
    deserialize_tensordict,
    receiving_views,
    serialize_single_tensor,
    serialize_tensordict,
)

__all__ = [
    "BatchData",
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoFuture",
    "DataProtoItem",
    "all_gather_data_proto",
    "receiving_views",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "unpad_dataproto",
]

# The code lives in this package's modules by concern; this module is where it is found (trio's
# fixup_module_metadata does the same). Pickle names classes and functions by module and qualified
# name: DataProtos and DataProtoFutures (with their collect and dispatch functions) travel through Ray
# and DataProto.save_to_disk files, so they keep naming this module. Their pickles read the same as
# before the split and stay readable whatever moves behind it, and unpickling a DataProtoFuture still
# imports this module, which is what the decorator's _materialize_futures looks for.
for _obj in (
    BatchData, DataProto, DataProtoConfig, DataProtoError, DataProtoFuture, DataProtoItem, all_gather_data_proto,
    collate_fn, concat_batches, deserialize_single_tensor, deserialize_tensordict, fold_batch_dim,
    pad_dataproto_to_divisor, receiving_views, serialize_single_tensor, serialize_tensordict, unfold_batch_dim,
    union_numpy_dict, union_tensor_dict, unpad_dataproto, _take_chunk, _then,
):  # fmt: skip
    _obj.__module__ = __name__
del _obj
