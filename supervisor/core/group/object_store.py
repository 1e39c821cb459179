"""Putting many objects into Ray's object store at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["parallel_put"]

_MAX_THREADS = 16


def parallel_put(data_list: list[Any], max_workers: int | None = None) -> list[Any]:
    """``ray.put`` each item from a thread pool (serialization of large items overlaps); the object refs
    come back in the order of ``data_list``.

    Args:
        data_list: the objects; must not be empty.
        max_workers: threads; default ``min(len(data_list), 16)``.

    Raises:
        AssertionError: ``data_list`` is empty (verl's contract).
    """
    import ray

    assert len(data_list) > 0, "data_list must not be empty"
    threads = max_workers if max_workers is not None else min(len(data_list), _MAX_THREADS)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(ray.put, data_list))
