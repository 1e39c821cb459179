"""The cluster KV store against real Ray: one single-node cluster (2 CPUs) for the module, one shared
store in the Ray namespace ``supervisor.kvtest``; every test uses its own KV namespaces. The actor's
logic (waiting, diagnosis) is also exercised directly on an event loop, without Ray."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from supervisor.daemon.kv import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_KEYS,
    DEFAULT_MAX_VALUE_BYTES,
    KV_ACTOR_NAME,
    KVLimitError,
    KVLimits,
    KVStore,
    KVStoreNotFoundError,
    KVTimeoutError,
    _KVActor,
    _nearest,
    _quoted,
    _ranked,
)
from supervisor.errors import ClusterUnavailableError, ConfigError, SupervisorError
from supervisor.observability import metrics

SUPERVISOR = "kvtest"
ACTOR_NS = f"supervisor.{SUPERVISOR}"
SURVIVOR_NS = "supervisor.kvsurvivor"
TEARDOWN_NS = "supervisor.kvteardown"
LIMITS_NS = "supervisor.kvlimits"
TEST_ACTOR_NAMESPACES = {ACTOR_NS, SURVIVOR_NS, TEARDOWN_NS, LIMITS_NS}
# The machine may be busy with other test runs: bounds on waits are loose, lower bounds exact.
SLACK_S = 20.0


def _named_actors_in(namespaces: set[str]) -> list[tuple[str, str]]:
    import ray

    return sorted(
        (a["namespace"], a["name"]) for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") in namespaces
    )


@pytest.fixture(scope="module")
def cluster(one_node_cluster):
    import ray

    yield one_node_cluster
    for namespace, name in _named_actors_in(TEST_ACTOR_NAMESPACES):  # before the cluster goes
        try:
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
        except ValueError:
            pass


@pytest.fixture(scope="module")
def store(cluster):
    return KVStore.create_or_attach(SUPERVISOR)


@pytest.fixture
def wakeups(monkeypatch):
    """Stands in for ``metrics.KV_WAIT_WAKEUPS`` (to be defined in supervisor/observability/metrics.py); records incs."""

    class _Counter:
        def __init__(self) -> None:
            self.value = 0.0

        def inc(self, amount: float = 1.0) -> None:
            self.value += amount

    counter = _Counter()
    monkeypatch.setattr(metrics, "KV_WAIT_WAKEUPS", counter, raising=False)
    return counter


def _kv_wait_count() -> float:
    return metrics.REGISTRY.get_sample_value("supervisor_kv_wait_seconds_count") or 0.0


def _put_later(store: KVStore, key: str, value: object, namespace: str, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        store.put(key, value, namespace=namespace)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- remote helpers (module level: workers import this module by name, tests/ is on PYTHONPATH) ----------


def _put_after(actor_namespace: str, key: str, value: object, namespace: str, delay_s: float) -> float:
    store = KVStore.attach(actor_namespace)  # attach by name, as a worker would
    time.sleep(delay_s)
    store.put(key, value, namespace=namespace)
    return time.time()


def _write_keys(actor_namespace: str, namespace: str, writer: int, count: int) -> int:
    store = KVStore.attach(actor_namespace)
    for i in range(count):
        store.put(f"w{writer}/k{i:03d}", (writer, i), namespace=namespace)
    return count


def _read_all(store: KVStore, namespace: str, keys: list[str], timeout_s: float) -> dict:
    return store.wait(keys, timeout_s=timeout_s, namespace=namespace)  # `store` arrived pickled


class _Writer:
    def put_after(self, store: KVStore, key: str, value: object, namespace: str, delay_s: float) -> float:
        time.sleep(delay_s)
        store.put(key, value, namespace=namespace)
        return time.time()


# -- without Ray ---------------------------------------------------------------------------------------


def test_errors_are_picklable_one_line_and_typed():
    exc = KVTimeoutError("kv get 'a' in namespace 'b' timed out after 1s: nobody has written to namespace 'b'")
    assert isinstance(exc, SupervisorError) and isinstance(exc, TimeoutError)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is KVTimeoutError and str(back) == str(exc)
    missing = pickle.loads(pickle.dumps(KVStoreNotFoundError("no KV store in Ray namespace 'x'")))
    assert isinstance(missing, LookupError) and str(missing) == "no KV store in Ray namespace 'x'"


def test_limits_are_validated_and_their_error_pickles():
    assert KVLimits() == KVLimits(DEFAULT_MAX_KEYS, DEFAULT_MAX_BYTES, DEFAULT_MAX_VALUE_BYTES)
    for bad in ({"max_keys": 0}, {"max_bytes": -1}, {"max_value_bytes": 1.5}, {"max_keys": True}):
        with pytest.raises(ConfigError, match=f"KVLimits.{next(iter(bad))} must be a positive integer"):
            KVLimits(**bad)
    back = pickle.loads(pickle.dumps(KVLimitError("kv namespace 'ns' is full: 3 keys")))
    assert type(back) is KVLimitError and isinstance(back, SupervisorError)
    assert str(back) == "kv namespace 'ns' is full: 3 keys"


def test_actor_accounts_keys_and_bytes_per_namespace():
    async def scenario() -> None:
        kv = _KVActor("unit", KVLimits(max_keys=3, max_bytes=100, max_value_bytes=40))
        assert await kv.put("ns", "a", b"x" * 10) is None
        assert await kv.put("ns", "b", b"x" * 20) is None
        usage = (await kv.info())["usage"]
        assert usage == {"ns": {"keys": 2, "bytes": 11 + 21}}

        # Too large a value is refused whatever room is left, and changes nothing.
        refusal = await kv.put("other", "big", b"x" * 41)
        assert refusal == (
            "kv value of 'big' in namespace 'other' is too large: 41 B (limit 40 B per value); "
            "share large data through the Ray object store or raise KVLimits.max_value_bytes"
        )
        assert (await kv.peek("other", "big")) == (False, None) and "other" not in (await kv.info())["usage"]

        # Bytes (values plus keys): c brings the namespace to 72; growing a by 29 would pass 100.
        assert await kv.put("ns", "c", b"x" * 39) is None  # 72 used, 3 keys
        refusal = await kv.put("ns", "a", b"x" * 39)  # overwrite: grows by 29, to 101
        assert refusal == (
            "kv namespace 'ns' is full: 72 B used (limit 100 B per namespace) and 'a' needs 29 B more; "
            "delete keys or raise KVLimits.max_bytes"
        )
        assert await kv.peek("ns", "a") == (True, b"x" * 10)  # the refused overwrite left the old value
        assert await kv.put("ns", "a", b"x" * 38) is None  # grows by 28: exactly 100 fits
        assert (await kv.info())["usage"]["ns"] == {"keys": 3, "bytes": 100}
        assert await kv.put("ns", "a", b"") is None  # shrinking always fits
        assert (await kv.info())["usage"]["ns"] == {"keys": 3, "bytes": 62}

        # Keys: the namespace is full for a new key, not for an overwrite, and not for other namespaces.
        refusal = await kv.put("ns", "d", b"")
        assert refusal == (
            "kv namespace 'ns' is full: 3 keys (limit 3 keys per namespace); delete keys or raise KVLimits.max_keys"
        )
        assert await kv.put("ns", "c", b"y") is None and await kv.put("elsewhere", "d", b"") is None

        # Deletes free keys and bytes; an emptied namespace holds nothing.
        assert await kv.delete("ns", "c")
        assert (await kv.info())["usage"]["ns"] == {"keys": 2, "bytes": 1 + 21}
        assert await kv.put("ns", "d", b"x" * 40) is None
        for key in ("a", "b", "d"):
            assert await kv.delete("ns", key)
        info = await kv.info()
        assert info["usage"] == {"elsewhere": {"keys": 1, "bytes": 1}} and info["bytes"] == 1
        assert info["limits"] == {"max_keys": 3, "max_bytes": 100, "max_value_bytes": 40}

    asyncio.run(scenario())


def test_client_validates_before_touching_ray():
    store = KVStore(ACTOR_NS)
    with pytest.raises(ConfigError):
        store.put("", 1)
    with pytest.raises(ConfigError):
        store.get("k", namespace="")
    with pytest.raises(ConfigError):
        store.get("k", timeout_s=-1)
    with pytest.raises(ConfigError):
        store.wait(["a", 3])  # type: ignore[list-item]
    assert pickle.loads(pickle.dumps(store)).actor_namespace == ACTOR_NS


def test_client_without_ray_says_so():
    import ray

    if ray.is_initialized():
        pytest.skip("a cluster of this module is already connected")
    with pytest.raises(ClusterUnavailableError, match="ray.init"):
        KVStore.attach(ACTOR_NS)


def test_nearest_and_quoted():
    keys = ["master_address", "master_port", "world_size", "rank"]
    assert _nearest("master_addr", keys, 5)[:2] == ["master_address", "master_port"]
    assert "world_size" not in _nearest("master_addr", keys, 3)
    assert _nearest("master_addr", keys, 5) == ["master_address", "master_port"]
    assert _ranked("rollout", ["default", "zeta", "rolout"]) == ["rolout", "default", "zeta"]
    assert _quoted(["a", "b", "c"], 2) == "'a', 'b' (+1 more)"


def test_actor_logic_on_an_event_loop():
    async def scenario() -> None:
        kv = _KVActor("unit")
        # Many readers of one key share one event; one put wakes them all.
        readers = [asyncio.create_task(kv.wait("ns", ["k"], 30.0)) for _ in range(20)]
        await asyncio.sleep(0.05)
        assert (await kv.info())["waiters"] == 20
        await kv.put("ns", "k", b"v")
        results = await asyncio.gather(*readers)
        assert all(found == {"k": b"v"} and woke == 1 and diag is None for found, woke, diag in results)
        assert (await kv.info())["waiting_keys"] == 0  # no slot left behind

        # Timeouts: never-written namespace, then near keys, then the exact key in another namespace.
        _, _, diag = await kv.wait("rollout", ["master_addr"], 0.01)
        assert diag == "nobody has written to namespace 'rollout'; namespaces with keys: 'ns'"
        for key in ("master_address", "master_port", "world_size"):
            await kv.put("rollout", key, b"x")
        _, _, diag = await kv.wait("rollout", ["master_addr"], 0.01)
        assert diag == "namespace 'rollout' has 3 key(s); nearest: 'master_address', 'master_port'"
        _, _, diag = await kv.wait("rollout", ["k"], 0.0)
        assert diag == "namespace 'rollout' has 3 key(s); none is near; 'k' found in namespace(s) 'ns'"
        assert (await kv.info())["waiting_keys"] == 0  # timed-out readers leave no slot either

        # Emptied namespace is told apart from a never-written one.
        assert await kv.delete("ns", "k") and not await kv.delete("ns", "k")
        _, _, diag = await kv.wait("ns", ["k"], 0.0)
        assert diag == "namespace 'ns' has no keys (all were deleted)"
        assert await kv.namespaces() == ["rollout"]

        # A put followed at once by a delete: the woken reader looks again and keeps waiting.
        reader = asyncio.create_task(kv.wait("ns", ["k"], 30.0))
        await asyncio.sleep(0.01)
        await kv.put("ns", "k", b"1")
        await kv.delete("ns", "k")
        await asyncio.sleep(0.01)
        await kv.put("ns", "k", b"2")
        found, woke, _ = await reader
        assert found == {"k": b"2"} and woke >= 1

    asyncio.run(scenario())


# -- against the cluster ---------------------------------------------------------------------------------


def test_store_is_a_detached_zero_cpu_actor_on_the_head(store):
    import ray
    from ray._private import state

    actor_id = store._actor()._actor_id.hex()
    info = state.actors()[actor_id]
    assert info["Name"] == KV_ACTOR_NAME and info["IsDetached"] is True
    assert (ACTOR_NS, KV_ACTOR_NAME) in _named_actors_in({ACTOR_NS})
    # It holds no CPU: all of the node's CPUs stay available (resource reports lag: poll).
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2.0
    head = next(n for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
    assert info["Address"]["NodeID"] == head["NodeID"]
    assert store.info()["supervisor"] == SUPERVISOR
    # A second create_or_attach (a restarted daemon) gets the same actor, and its data.
    store.put("seen", 1, namespace="attach")
    again = KVStore.create_or_attach(SUPERVISOR)
    assert again._actor()._actor_id == store._actor()._actor_id
    assert again.get("seen", timeout_s=0, namespace="attach") == 1


def test_blocking_get_released_by_put_from_another_thread(store, wakeups):
    before = _kv_wait_count()
    _put_later(store, "leader", "10.0.0.1", "thread", delay_s=1.0)
    start = time.monotonic()
    assert store.get("leader", timeout_s=60, namespace="thread") == "10.0.0.1"
    waited = time.monotonic() - start
    assert 1.0 <= waited < 1.0 + SLACK_S
    assert _kv_wait_count() == before + 1
    assert wakeups.value >= 1  # the put woke the reader in the actor


def test_blocking_get_released_by_put_from_a_task_and_an_actor(store):
    import ray

    # A task attaches by name.
    ref = ray.remote(num_cpus=0)(_put_after).remote(ACTOR_NS, "port", 29500, "task", 1.5)
    start = time.monotonic()
    assert store.get("port", timeout_s=120, namespace="task") == 29500
    got_at, waited = time.time(), time.monotonic() - start
    put_at = ray.get(ref, timeout=60)
    assert waited >= 1.5
    assert got_at - put_at < 5.0  # released by the put itself, not by a later poll

    # An actor receives a pickled client.
    writer = ray.remote(num_cpus=0)(_Writer).remote()
    try:
        ref = writer.put_after.remote(store, "port", 29501, "actor", 1.5)
        start = time.monotonic()
        assert store.get("port", timeout_s=120, namespace="actor") == 29501
        got_at, waited = time.time(), time.monotonic() - start
        put_at = ray.get(ref, timeout=60)
        assert waited >= 1.5 and got_at - put_at < 5.0
    finally:
        ray.kill(writer)


def test_timeout_in_a_namespace_never_written(store):
    store.put("coordinator", "a", namespace="rolout")
    before = _kv_wait_count()
    start = time.monotonic()
    with pytest.raises(KVTimeoutError) as info:
        store.get("coordinator", timeout_s=1, namespace="rollout")
    assert 1.0 <= time.monotonic() - start < 1.0 + SLACK_S
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("kv get 'coordinator' in namespace 'rollout' timed out after 1s: ")
    assert "nobody has written to namespace 'rollout'; namespaces with keys: 'rolout'" in message
    assert message.endswith("; 'coordinator' found in namespace(s) 'rolout'")
    assert _kv_wait_count() == before + 1  # timeouts are observed too


def test_timeout_lists_the_nearest_keys(store):
    for key, value in {"master_address": "h", "master_port": 1, "world_size": 2}.items():
        store.put(key, value, namespace="near")
    with pytest.raises(KVTimeoutError) as info:
        store.get("master_addr", timeout_s=0.5, namespace="near")
    assert str(info.value) == (
        "kv get 'master_addr' in namespace 'near' timed out after 0.5s: "
        "namespace 'near' has 3 key(s); nearest: 'master_address', 'master_port'"
    )
    with pytest.raises(KVTimeoutError) as info:
        store.wait(["world_size", "rank", "master_addr"], timeout_s=0.5, namespace="near")
    assert str(info.value).startswith(
        "kv wait for 3 key(s) in namespace 'near' timed out after 0.5s: 2 missing: 'rank', 'master_addr'; "
        "namespace 'near' has 3 key(s); nearest: 'master_address', 'master_port'"
    )


def test_concurrent_writers_and_readers_lose_nothing(store):
    import ray

    writers, per_writer, namespace = 8, 50, "concurrent"
    expected = {f"w{w}/k{i:03d}": (w, i) for w in range(writers) for i in range(per_writer)}
    # Readers first, so they really wait; all tasks take no CPU, or readers could starve the writers.
    readers = [
        ray.remote(num_cpus=0)(_read_all).remote(store, namespace, list(expected), 240.0) for _ in range(8)
    ]
    written = [ray.remote(num_cpus=0)(_write_keys).remote(ACTOR_NS, namespace, w, per_writer) for w in range(writers)]
    assert ray.get(written, timeout=300) == [per_writer] * writers
    for result in ray.get(readers, timeout=300):
        assert result == expected
    assert store.keys(namespace) == sorted(expected)
    assert store.keys(namespace, prefix="w3/") == sorted(k for k in expected if k.startswith("w3/"))
    assert store.info()["waiters"] == 0


def test_many_readers_of_one_key_wait_concurrently(store):
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(store.get("go", timeout_s=120, namespace="crowd")), daemon=True)
        for _ in range(40)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while store.info()["waiters"] < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.info()["waiters"] == 40  # all blocked inside the actor at once
    store.put("go", "now", namespace="crowd")
    for thread in threads:
        thread.join(timeout=60)
    assert results == ["now"] * 40


def test_namespaces_are_isolated_and_delete_makes_gets_block_again(store):
    store.put("k", "in-a", namespace="iso-a")
    store.put("k", "in-b", namespace="iso-b")
    assert store.get("k", namespace="iso-a") == "in-a" and store.get("k", namespace="iso-b") == "in-b"
    assert {"iso-a", "iso-b"} <= set(store.namespaces())

    assert store.delete("k", namespace="iso-a") is True
    assert store.delete("k", namespace="iso-a") is False
    assert not store.contains("k", namespace="iso-a") and store.contains("k", namespace="iso-b")
    assert store.get_nowait("k", "absent", namespace="iso-a") == "absent"
    assert "iso-a" not in store.namespaces()
    with pytest.raises(KVTimeoutError, match="namespace 'iso-a' has no keys"):
        store.get("k", timeout_s=0.3, namespace="iso-a")

    _put_later(store, "k", "again", "iso-a", delay_s=1.0)
    start = time.monotonic()
    assert store.get("k", timeout_s=60, namespace="iso-a") == "again"
    assert time.monotonic() - start >= 1.0


def test_wait_returns_all_values(store, wakeups):
    before = _kv_wait_count()
    store.put("a", 1, namespace="many")
    _put_later(store, "b", [2], "many", delay_s=0.5)
    _put_later(store, "c", {"three": 3}, "many", delay_s=1.0)
    assert store.wait(["c", "a", "b", "a"], timeout_s=60, namespace="many") == {"c": {"three": 3}, "a": 1, "b": [2]}
    assert store.wait([], timeout_s=0, namespace="many") == {}
    assert _kv_wait_count() == before + 2
    assert wakeups.value >= 1  # "c" is awaited first; by its put "b" is there


def test_long_polls_are_renewed(store, wakeups, monkeypatch):
    import supervisor.daemon.kv as kv

    monkeypatch.setattr(kv, "_LONG_POLL_S", 0.2)
    _put_later(store, "late", "value", "renew", delay_s=1.5)
    assert store.get("late", namespace="renew") == "value"  # no timeout: renewed until the put
    assert wakeups.value >= 5  # renewals plus the put's wakeup
    start = time.monotonic()
    with pytest.raises(KVTimeoutError, match=r"timed out after 0\.7s: namespace 'renew' has 1 key"):
        store.get("never", timeout_s=0.7, namespace="renew")
    assert time.monotonic() - start >= 0.7
    assert store.info()["waiting_keys"] == 0


def test_puts_past_a_limit_raise_and_write_nothing(cluster):
    import ray.cloudpickle as cloudpickle

    limits = KVLimits(max_keys=4, max_bytes=4096, max_value_bytes=2048)
    store = KVStore.create_or_attach("kvlimits", limits=limits)
    assert store.actor_namespace == LIMITS_NS
    assert store.info()["limits"] == {"max_keys": 4, "max_bytes": 4096, "max_value_bytes": 2048}

    def entry(key: str, value: object) -> int:
        return len(key) + len(cloudpickle.dumps(value))

    with pytest.raises(KVLimitError) as info:
        store.put("blob", b"x" * 4000, namespace="big")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("kv value of 'blob' in namespace 'big' is too large: 3.")
    assert "(limit 2 KiB per value)" in message
    assert not store.contains("blob", namespace="big") and "big" not in store.namespaces()

    for i in range(4):
        store.put(f"k{i}", i, namespace="few")
    with pytest.raises(KVLimitError) as info:
        store.put("k4", 4, namespace="few")
    assert str(info.value) == (
        "kv namespace 'few' is full: 4 keys (limit 4 keys per namespace); delete keys or raise KVLimits.max_keys"
    )
    store.put("k0", "overwritten", namespace="few")  # an overwrite adds no key
    assert store.delete("k1", namespace="few")
    store.put("k4", 4, namespace="few")  # the delete made room
    expected = sum(entry(k, v) for k, v in {"k0": "overwritten", "k2": 2, "k3": 3, "k4": 4}.items())
    assert store.info()["usage"]["few"] == {"keys": 4, "bytes": expected}

    # Bytes: two 1.9 KiB values fit 4 KiB, a third does not; overwriting one with a small value makes room.
    payload = b"y" * 1900
    store.put("a", payload, namespace="heavy")
    store.put("b", payload, namespace="heavy")
    full = r"^kv namespace 'heavy' is full: 3\.\d+ KiB used \(limit 4 KiB per namespace\) and 'c' needs "
    with pytest.raises(KVLimitError, match=full):
        store.put("c", payload, namespace="heavy")
    assert not store.contains("c", namespace="heavy")
    store.put("a", b"", namespace="heavy")
    store.put("c", payload, namespace="heavy")
    assert store.info()["usage"]["heavy"]["bytes"] == entry("a", b"") + 2 * entry("b", payload)
    assert store.info()["bytes"] == sum(u["bytes"] for u in store.info()["usage"].values())

    # Attaching with other limits keeps the actor's own.
    again = KVStore.create_or_attach("kvlimits", limits=KVLimits(max_keys=1))
    assert again.info()["limits"]["max_keys"] == 4


def test_the_shared_store_has_the_default_limits(store):
    assert store.info()["limits"] == {
        "max_keys": DEFAULT_MAX_KEYS, "max_bytes": DEFAULT_MAX_BYTES, "max_value_bytes": DEFAULT_MAX_VALUE_BYTES,
    }  # fmt: skip


def test_store_survives_its_creator(cluster):
    script = textwrap.dedent(
        """
        import os, sys
        import ray
        from supervisor.daemon.kv import KVStore

        ray.init(address=sys.argv[1], log_to_driver=False)
        store = KVStore.create_or_attach("kvsurvivor", sys.argv[2])
        store.put("answer", {"value": 42}, namespace="handover")
        os._exit(0)  # no goodbye, as a crashed daemon
        """
    )
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run(
        [sys.executable, "-c", script, cluster.address, SURVIVOR_NS], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    store = KVStore.attach(SURVIVOR_NS)
    assert store.get("answer", timeout_s=30, namespace="handover") == {"value": 42}
    assert store.info()["supervisor"] == "kvsurvivor"


def test_attach_to_a_missing_store_names_the_namespace(cluster):
    with pytest.raises(KVStoreNotFoundError) as info:
        KVStore.attach("supervisor.nobody")
    message = str(info.value)
    assert "\n" not in message and "'supervisor.nobody'" in message


def test_teardown_leaves_nothing_named(cluster):
    import ray

    store = KVStore.create_or_attach("kvteardown")
    assert store.actor_namespace == TEARDOWN_NS
    store.put("k", "v")
    assert _named_actors_in({TEARDOWN_NS}) == [(TEARDOWN_NS, KV_ACTOR_NAME)]

    ray.kill(ray.get_actor(KV_ACTOR_NAME, namespace=TEARDOWN_NS), no_restart=True)
    deadline = time.monotonic() + 30
    while _named_actors_in({TEARDOWN_NS}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _named_actors_in({TEARDOWN_NS}) == []
    with pytest.raises(KVStoreNotFoundError, match="is gone"):
        store.get("k", timeout_s=5)  # an old client says the store is gone
    with pytest.raises(KVStoreNotFoundError, match="'supervisor.kvteardown'"):
        KVStore.attach(TEARDOWN_NS)

    # The module's shared stores go the same way: nothing named is left in their namespaces.
    for namespace, name in _named_actors_in(TEST_ACTOR_NAMESPACES):
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    deadline = time.monotonic() + 30
    while _named_actors_in(TEST_ACTOR_NAMESPACES) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _named_actors_in(TEST_ACTOR_NAMESPACES) == []
