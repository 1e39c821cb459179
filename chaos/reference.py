"""The fault-free reference of the trained groups' state: what every rank holds after ``n`` steps of
a run that nothing interrupted, computed for real by the example's own training classes.

A chaos run's trained state must equal it bit for bit (:func:`chaos.invariants.check_state_intact`).
It is not written down: a digest recorded once would pass a run that is wrong in the same way as the
code that recorded it, and would break on any change of torch. Instead one local process per rank of
each trained group (``python -m chaos.reference``, gloo over 127.0.0.1, no Ray) builds the worker
class with the spec's kwargs, joins its collective and trains as far as asked, reporting the state
digest at the steps asked. Training is deterministic bit for bit (seeded weights and data, fixed world
size, gloo on CPU, one thread), so this is the state a fault-free run of the job holds at those steps.

The processes live for the chaos invocation (started with the first scenario, so importing torch
overlaps with it) and only ever train forward: a later scenario that ran more steps costs only the
steps in between. Answers are cached per (group, step).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["GroupRecipe", "ReferenceRun", "reference_run"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSWER_TIMEOUT_S = (
    300.0  # torch's import and the first init on a loaded 2-core machine, then thousands of tiny steps
)


@dataclass(frozen=True)
class GroupRecipe:
    """What determines a trained group's state: its worker class, kwargs and world size."""

    name: str
    cls: str  # "module:Class", as in the spec
    kwargs: tuple[tuple[str, Any], ...]  # sorted items: hashable, so a recipe keys the cache
    world_size: int

    @classmethod
    def of(cls, name: str, class_path: str, kwargs: Mapping[str, Any], world_size: int) -> GroupRecipe:
        return cls(name, class_path, tuple(sorted(kwargs.items())), world_size)


class ReferenceRun:
    """Fault-free training of ``recipes``, one local process per rank, driven forward on demand."""

    def __init__(self, recipes: Iterable[GroupRecipe]) -> None:
        self.recipes = tuple(recipes)
        self._cache: dict[tuple[str, int], list[str]] = {}  # (group, step) -> digest per rank
        self._procs: dict[str, list[subprocess.Popen[str]]] = {}
        for recipe in self.recipes:
            port = _free_port()
            self._procs[recipe.name] = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "chaos.reference",
                        json.dumps({"recipe": asdict(recipe), "port": port}),
                    ],
                    env=_rank_env(rank, recipe.world_size),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=REPO,
                )  # fmt: skip
                for rank in range(recipe.world_size)
            ]

    def digests(self, steps: Iterable[int]) -> dict[str, dict[int, list[str]]]:
        """``{group: {step: [digest of rank 0, rank 1, ...]}}`` for every recipe and step.

        Raises:
            RuntimeError: a reference process failed or did not answer (its stderr's tail is in the message).
        """
        wanted = sorted(set(steps))
        for recipe in self.recipes:
            missing = [s for s in wanted if (recipe.name, s) not in self._cache]
            if missing:
                self._ask(recipe, missing)
        return {r.name: {s: self._cache[(r.name, s)] for s in wanted} for r in self.recipes}

    def _ask(self, recipe: GroupRecipe, steps: list[int]) -> None:
        procs = self._procs[recipe.name]
        request = json.dumps({"steps": steps}) + "\n"
        for proc in procs:  # every rank at once: the steps are collectives
            assert proc.stdin is not None
            proc.stdin.write(request)
            proc.stdin.flush()
        answers = [_read_answer(proc, f"{recipe.name} rank {rank}") for rank, proc in enumerate(procs)]
        for step in steps:
            self._cache[(recipe.name, step)] = [answer[str(step)] for answer in answers]

    def close(self) -> None:
        """End the processes (each started here, ended by its handle)."""
        for procs in self._procs.values():
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        self._procs = {}


_RUNS: dict[tuple[GroupRecipe, ...], ReferenceRun] = {}


def reference_run(recipes: Iterable[GroupRecipe]) -> ReferenceRun:
    """The invocation's reference run of ``recipes`` (started on the first call, ended at exit)."""
    key = tuple(sorted(recipes, key=lambda r: r.name))
    if key not in _RUNS:
        if not _RUNS:
            atexit.register(_close_all)
        _RUNS[key] = ReferenceRun(key)
    return _RUNS[key]


def _close_all() -> None:
    for run in _RUNS.values():
        run.close()
    _RUNS.clear()


def _read_answer(proc: subprocess.Popen[str], who: str) -> dict[str, str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line:
                return dict(json.loads(line))
            break  # end of output: the process ended
    proc.kill()
    _, err = proc.communicate()
    raise RuntimeError(
        f"reference {who} did not answer (exit {proc.returncode}): {(err or '').strip()[-1500:]}"
    )


def _rank_env(rank: int, world_size: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RLHF_FAULT_DIR"}  # no fault hook in the reference
    # The worker's identity contract (supervisor.core.worker.env); the child sets MASTER_PORT to its group's.
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="0",
        OMP_NUM_THREADS="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the child: one rank of one group ---------------------------------------------------------------


def _child(recipe: Mapping[str, Any], port: int) -> None:
    """Build and init the rank, then answer each request line (``{"steps": [...]}``) with the state
    digest at those steps, training forward as far as the largest (the record of every step is kept)."""
    from supervisor.core.state_tree import state_digest

    module, _, name = recipe["cls"].partition(":")
    os.environ["MASTER_PORT"] = str(port)  # init_model reads the rendezvous from the environment
    os.environ["WG_PREFIX"] = f"{recipe['name']}_"
    worker = getattr(importlib.import_module(module), name)(**dict(recipe["kwargs"]))
    worker.init_model()
    record = [state_digest(worker.state_dict())]  # record[s]: the digest after s steps
    for line in sys.stdin:
        steps = [int(s) for s in json.loads(line)["steps"]]
        while len(record) <= max(steps):
            worker.train_step(len(record) - 1)
            record.append(state_digest(worker.state_dict()))
        print(json.dumps({str(s): record[s] for s in steps}), flush=True)
    worker.shutdown()


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    _child(request["recipe"], request["port"])
