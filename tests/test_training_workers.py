"""The RLHF example's training workers (examples/rlhf/training.py) on real Ray: two ranks over gloo.

Determinism across groups, replicated vs sharded state, the state_dict / load_state_dict round trip
between processes, the step-order guard, and a re-init on a new rendezvous.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import torch
from clusters import connected_cluster

from examples.rlhf.training import ActorUpdateWorker, CriticWorker
from supervisor import ClassWithInitArgs, InitPolicy, ResourcePool, create_group, init_group

REPO = Path(__file__).resolve().parent.parent
# A failed collective init should fail the test, not be retried rank by rank (a lone retried rank
# waits for peers that already returned).
INIT = InitPolicy(timeout_s=60, attempts=1, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
# A small pad: the state holds a buffer beside the parameters, as a benchmark's 64 MiB one would.
KWARGS = {"in_dim": 8, "hidden": 16, "seed": 3, "data_seed": 5, "pad_mb": 0.25}
CLASSES = [pytest.param(ActorUpdateWorker, id="actor-sharded"), pytest.param(CriticWorker, id="critic-replicated")]


@pytest.fixture(scope="module")
def ray_cluster():
    """One CPU node (room for two 2-rank groups at once); its worker processes import ``examples``
    from the repository root."""
    saved = os.environ.get("PYTHONPATH")
    # Read when the cluster's processes start, which is inside connected_cluster.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), saved or ""] if p)
    try:
        with connected_cluster({"num_cpus": 8, "num_gpus": 0}) as (cluster, _):
            yield cluster
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@contextlib.contextmanager
def training_groups(*classes, **kwargs):
    """One initialised 2-rank CPU group per class (created together, so their actors start in
    parallel); killed, and their pools removed, whatever happens."""
    made = []
    try:
        for cls in classes:
            pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
            made.append([pool, None])
            made[-1][1] = create_group(pool, ClassWithInitArgs(cls, **{**KWARGS, **kwargs}))
        for _, group in made:
            init_group(group, "init_model", policy=INIT)
        yield [group for _, group in made]
    finally:
        for pool, group in made:
            try:
                if group is not None:
                    group.kill()
            finally:
                pool.teardown()


def train(group, steps, first=0):
    """Run ``steps`` steps from ``first``; check every rank reports the new step each time."""
    for step in range(first, first + steps):
        results = group.train_step(step)
        assert [r["step"] for r in results] == [step + 1] * group.world_size
        assert all(isinstance(r["loss"], float) for r in results)


def digests(group):
    return [info["digest"] for info in group.state_info()]


@pytest.mark.parametrize("cls", CLASSES)
def test_same_seed_gives_bit_identical_states_and_the_declared_state_kind(ray_cluster, no_leaks, cls):
    with training_groups(cls, cls) as (a, b):
        fresh = digests(a)
        assert fresh == digests(b)
        train(a, 3)
        train(b, 3)
        info_a, info_b = a.state_info(), b.state_info()
        assert [i["step"] for i in info_a] == [3, 3]
        assert [i["digest"] for i in info_a] == [i["digest"] for i in info_b]  # deterministic, per rank
        assert [i["digest"] for i in info_a] != fresh  # and it did train
        assert all(i["nbytes"] >= 0.25 * 2**20 for i in info_a)  # the pad is part of the state

        states = a.export_state()
        # Data parallel: the model replicas are identical on every rank, whatever the optimizer holds.
        for name, tensor in states[0]["model"].items():
            assert torch.equal(tensor, states[1]["model"][name]), name
        assert states[0]["model"]["pad"].numel() == 0.25 * 2**20 / 4

        if cls.state_kind == "replicated":
            assert info_a[0]["digest"] == info_a[1]["digest"]
            assert info_a[0]["optim_digest"] == info_a[1]["optim_digest"]
        else:
            assert cls.state_kind == "sharded"
            # Each rank holds its own part of the Adam state: different shards, together every parameter.
            assert info_a[0]["optim_digest"] != info_a[1]["optim_digest"]
            held = [len(s["optim"]["state"]) for s in states]
            assert all(n > 0 for n in held) and sum(held) == len(states[0]["model"]) - 1  # every parameter but the pad


@pytest.mark.parametrize("cls", CLASSES)
def test_state_moved_to_a_fresh_group_trains_on_bit_identically(ray_cluster, no_leaks, cls):
    with training_groups(cls, cls) as (a, b):
        train(a, 2)
        states = a.export_state()
        assert [s["step"] for s in states] == [2, 2]
        if cls.state_kind == "sharded":
            # Another rank's shard does not fit: refused, not loaded into the wrong shapes.
            with pytest.raises(ValueError, match="optimizer state"):
                b.import_state(states[::-1])
        loaded = b.import_state(states)  # rank i loads rank i's state
        assert [i["digest"] for i in loaded] == digests(a)
        assert [i["step"] for i in loaded] == [2, 2]

        train(a, 1, first=2)
        train(b, 1, first=2)
        info_a, info_b = a.state_info(), b.state_info()
        assert [i["digest"] for i in info_a] == [i["digest"] for i in info_b]
        assert [i["step"] for i in info_a] == [i["step"] for i in info_b] == [3, 3]
        # What was exported is a copy: training on did not change it.
        assert states[0]["step"] == 2 and [i["digest"] for i in b.import_state(states)] == [i["digest"] for i in loaded]


def test_a_step_out_of_order_is_refused_naming_the_expected_step(ray_cluster, no_leaks):
    with training_groups(CriticWorker) as (group,):
        train(group, 1)
        before = digests(group)
        with pytest.raises(ValueError, match="expected step 1, got 3"):
            group.train_step(3)
        with pytest.raises(ValueError, match="expected step 1, got 0"):  # applied twice
            group.train_step(0)
        assert digests(group) == before  # nothing changed
        train(group, 1, first=1)


@pytest.mark.parametrize("cls", CLASSES)
def test_init_model_again_joins_a_new_rendezvous_and_trains(ray_cluster, no_leaks, cls):
    with training_groups(cls) as (group,):
        fresh = digests(group)
        old = {i["init_rendezvous"] for i in group.state_info()}
        train(group, 2)
        states = group.export_state()

        # What the supervisor does when it replaces rank 0: a new port on rank 0's node, sent to
        # every rank, then init_model everywhere and the trained state restored.
        rdv = group.pick_new_rendezvous()
        assert group.propagate_rendezvous(survivors=[0, 1]) == []
        new = f"{rdv.master_addr}:{rdv.master_port}"
        assert old != {new}
        assert [r["digest"] for r in group.init_model()] == fresh  # rebuilt from scratch
        assert [i["init_rendezvous"] for i in group.state_info()] == [new, new]
        train(group, 1)  # the new process group works

        group.import_state(states)
        train(group, 1, first=2)


@pytest.mark.parametrize(("cls", "module"), [(ActorUpdateWorker, "torch.distributed.optim"), (CriticWorker, "torch.nn.parallel")])
def test_a_standbys_warm_up_imports_what_its_init_would(cls, module):
    """In a fresh process (this one has imported everything already): the standby's ``warm_up``
    leaves the init only the collective and the model to do."""
    import subprocess
    import sys

    code = (
        f"import sys; from examples.rlhf.training import {cls.__name__} as W; "
        f"before = {module!r} in sys.modules; W().warm_up(); W().warm_up(); print(before, {module!r} in sys.modules)"
    )
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]


def test_a_rank_waits_for_rank_zeros_store_listener_and_gives_up_at_its_timeout():
    """``_wait_for_listener``: returns as soon as the port accepts (not after a client's retry
    backoff), and after its timeout when nothing ever listens (the store's connect then says why)."""
    import socket
    import threading
    import time

    from examples.rlhf.training import _wait_for_listener

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    threading.Timer(0.3, lambda: listener.listen(4)).start()
    started = time.monotonic()
    try:
        _wait_for_listener("127.0.0.1", port, timeout_s=10.0)
        assert 0.25 < time.monotonic() - started < 1.0
    finally:
        listener.close()
    started = time.monotonic()
    _wait_for_listener("127.0.0.1", port, timeout_s=0.3)  # closed: nothing listens there now
    assert 0.3 <= time.monotonic() - started < 1.5
