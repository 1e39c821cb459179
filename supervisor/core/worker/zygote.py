"""Zygotes: one process per node that has imported a group's heavy modules, forking standbys from it.

A standby's start is mostly imports: on the 2-core test machine a worker that imports tensordict (and
with it torch and torch._dynamo) spends about 4 CPU-seconds on it, and where CPUs are scarce every rank
beside it slows down for that long, even at the lowest CPU priority (``bench/kill_cost.py``). A zygote
pays for them once per node; each standby then starts as a fork of it (copy-on-write, a fraction of a
CPU-second) and runs Ray's worker as it would in a fresh process.

* :func:`serve` is the zygote (:func:`main`, started by its keeper): it imports the ``preload``
  modules, listens on an abstract UNIX socket, and forks a worker for each request of a launcher
  (:mod:`.zygote_launch`, the standby's ``py_executable``). It never imports Ray: Ray's C++ core reads
  its configuration (the job id among it) from the environment once, at import, and a worker forked
  from a process that had would carry the wrong one. A preload module that imports Ray is refused.
* :class:`ZygoteKeeper` is the Ray actor (one per group and node, named by :func:`keeper_name`, no
  CPU) that starts the zygote and owns it: the zygote dies with it (``PR_SET_PDEATHSIG``), so
  killing the group's named actors (teardown, ``supervisor gc``) removes the zygotes too.
* :class:`NodeZygotes` keeps a group's keepers, without blocking: a standby is forked only on a node
  whose zygote is ready; elsewhere (its zygote still importing, or failed) it starts as a plain process.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib
import json
import os
import runpy
import selectors
import shlex
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import first_line
from ...observability.log import get_logger
from ...retrying import Backoff, poll
from .zygote_launch import STREAMS, ZYGOTE_ENV, recv_frame, send_code

__all__ = ["ZygoteLauncher", "ZygoteKeeper", "NodeZygotes", "serve", "check_preload_names", "keeper_name", "keeper_prefix", "runtime_env_problem", "worker_sys_path"]

log = get_logger("zygote")

LAUNCHER = Path(__file__).with_name("zygote_launch.py")
READY_TIMEOUT_S = 300.0  # a zygote's imports on a loaded node; a standby starts plainly meanwhile
PROGRESS_S = 10.0  # how often a wait for zygotes says it still waits
REQUEST_TIMEOUT_S = 2.0  # a launcher sends its request right after connecting; the loop waits no longer
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ZygoteLauncher:
    """How a worker on one node is forked from that node's zygote: Ray's ``py_executable`` and the
    zygote's socket name, both for the worker's runtime_env."""

    name: str
    py_executable: str
    pid: int  # the zygote's

    def runtime_env(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """``runtime_env`` with this launcher as the worker's Python."""
        env_vars = {**runtime_env.get("env_vars", {}), ZYGOTE_ENV: self.name}
        return {**runtime_env, "env_vars": env_vars, "py_executable": self.py_executable}


def check_preload_names(preload: tuple[str, ...] | list[str]) -> list[str]:
    """The problems with ``preload`` as a list of module names (empty when there are none)."""
    if isinstance(preload, str):
        return [f"give a list of module names, not the string {preload!r}"]
    problems = []
    for module in preload:
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            problems.append(f"{module!r} is not a module name")
    return problems


# -- the zygote ------------------------------------------------------------------------------------


def _preload(modules: list[str]) -> None:
    for module in modules:
        importlib.import_module(module)
        if "ray" in sys.modules:
            raise SystemExit(
                f"zygote: preloading {module!r} imported Ray, which a forked worker cannot inherit: "
                "preload only what it imports below Ray (torch, tensordict, model code)"
            )


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the keeper died before the line above
        os._exit(1)


@dataclass
class _Worker:
    """A forked worker: its launcher's connection and a pidfd that becomes readable when it exits."""

    pid: int
    conn: socket.socket
    pidfd: int


def worker_sys_path(zygote_path: list[str], zygote_pythonpath: str, pythonpath: str, script: str) -> list[str]:
    """``sys.path`` for a worker forked from a zygote: what ``python script`` would have started with
    under ``PYTHONPATH=pythonpath`` (the script's directory, then PYTHONPATH, then the interpreter's own
    entries), from the zygote's path without its entry directory and its own PYTHONPATH."""
    own = {p for p in zygote_pythonpath.split(os.pathsep) if p}
    interpreter = [p for p in zygote_path[1:] if p not in own]
    out: list[str] = []
    for entry in [os.path.dirname(script), *(p for p in pythonpath.split(os.pathsep) if p), *interpreter]:
        if entry not in out:
            out.append(entry)
    return out


@dataclass
class _Zygote:
    listener: socket.socket
    base_path: list[str]  # the zygote's sys.path once it preloaded
    base_pythonpath: str
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    workers: dict[int, _Worker] = field(default_factory=dict)  # by pid

    def __post_init__(self) -> None:
        self.pid = os.getpid()  # the zygote's own: a forked child runs some of this code too

    def run(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        while True:
            for key, _ in self.selector.select():
                what, worker = key.data
                if worker is not None and self.workers.get(worker.pid) is not worker:
                    continue  # reaped by an earlier event of the same batch
                try:
                    if what == "accept":
                        self._accept()
                    elif what == "exited":
                        self._reap(worker)
                    else:  # the launcher's connection: readable only when it closed (it was killed)
                        self._launcher_gone(worker)
                except Exception as exc:  # one request or worker never takes the zygote down
                    print(f"zygote: {what}: {first_line(exc)}", file=sys.stderr, flush=True)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(REQUEST_TIMEOUT_S)
        fds: list[int] = []
        try:
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if uid != os.getuid():  # an abstract socket has no file permissions: only the zygote's user
                raise PermissionError(f"a request from uid {uid}")
            payload, fds = recv_frame(conn, max_fds=len(STREAMS))
            request = json.loads(payload)
            if len(fds) != len(STREAMS):
                raise ValueError(f"{len(fds)} descriptors, expected {len(STREAMS)}")
        except (OSError, ValueError) as exc:
            if not isinstance(exc, ConnectionError) or fds:  # a bare connect and close is a readiness probe
                print(f"zygote: bad request: {first_line(exc)}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        try:
            pid = os.fork()
        finally:
            if os.getpid() == self.pid:  # the zygote, whether the fork worked or not
                for fd in fds:
                    os.close(fd)
        if pid == 0:
            self._become_worker(request, fds, conn)
        worker = _Worker(pid, conn, os.pidfd_open(pid))
        self.workers[pid] = worker
        self.selector.register(worker.pidfd, selectors.EVENT_READ, ("exited", worker))
        try:
            send_code(conn, pid)
        except OSError:  # the launcher died meanwhile: so does its worker
            self._launcher_gone(worker)
            return
        self.selector.register(conn, selectors.EVENT_READ, ("launcher", worker))

    def _reap(self, worker: _Worker) -> None:
        _, status = os.waitpid(worker.pid, 0)
        try:
            send_code(worker.conn, os.waitstatus_to_exitcode(status))
        except OSError:  # the launcher is gone too
            pass
        self._forget(worker)

    def _launcher_gone(self, worker: _Worker) -> None:
        # The process Ray started for the worker was killed: the worker, and what it started, must
        # not outlive it. Not reaped yet, so its pid (and its process group's id) is still its own.
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.selector.unregister(worker.conn)  # its exit is reaped when the pidfd fires
        except (KeyError, ValueError):
            pass

    def _forget(self, worker: _Worker) -> None:
        for fileobj in (worker.pidfd, worker.conn):
            try:
                self.selector.unregister(fileobj)
            except (KeyError, ValueError):
                pass
        os.close(worker.pidfd)
        worker.conn.close()
        self.workers.pop(worker.pid, None)

    def _become_worker(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
        """In the forked child: become the worker the launcher asked for. It ends the way a Python
        script does (its exit code, or a traceback and 1; exit handlers run); it never returns."""
        try:
            # A process group of its own, as a worker Ray starts has: Ray cleans up after a dead worker
            # by killing its process group, which would otherwise be the zygote's and every worker's
            # forked from it.
            os.setsid()
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            self.listener.close()
            conn.close()
            for worker in self.workers.values():
                os.close(worker.pidfd)
                worker.conn.close()
            for target, fd in zip(STREAMS, fds, strict=True):
                os.dup2(fd, target)
                os.close(fd)
            os.environ.clear()
            os.environ.update(request["env"])
            script = request["argv"][0]
            sys.path[:] = worker_sys_path(self.base_path, self.base_pythonpath, os.environ.get("PYTHONPATH", ""), script)
            os.chdir(request["cwd"])
            sys.argv = list(request["argv"])
            if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS; so does each fork
                sys.modules["numpy"].random.seed()
        except BaseException:  # noqa: BLE001  (the set-up failed: say why where the worker's errors go)
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit:
            raise  # out through the zygote's frames (none of which catches it) to the interpreter's exit
        except BaseException:  # noqa: BLE001  (as Python reports an uncaught exception of a script)
            import traceback

            traceback.print_exc()
            raise SystemExit(1) from None
        raise SystemExit(0)


def serve(name: str, preload: list[str], parent: int | None = None) -> None:
    """Run a zygote listening on the abstract UNIX socket ``name`` once ``preload`` is imported."""
    if parent is not None:
        _die_with_parent(parent)
    started = time.monotonic()
    _preload(preload)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(64)
    print(f"zygote {name}: ready (pid {os.getpid()}, preloaded {preload} in {time.monotonic() - started:.1f}s)", file=sys.stderr, flush=True)
    _Zygote(listener, list(sys.path), os.environ.get("PYTHONPATH", "")).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A zygote: forks Ray workers with modules imported once.")
    parser.add_argument("--name", required=True, help="abstract UNIX socket name to listen on")
    parser.add_argument("--preload", default="", help="comma-separated modules to import before forking")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process (the keeper) dies")
    args = parser.parse_args(argv)
    serve(args.name, [m for m in args.preload.split(",") if m], args.parent)


# -- the keeper actor ------------------------------------------------------------------------------


def _reachable(name: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect("\0" + name)
        return True
    except OSError:
        return False
    finally:
        probe.close()


class ZygoteKeeper:
    """Ray actor owning one node's zygote for one group (create with ``ray.remote``, ``num_cpus=0``)."""

    def __init__(self, preload: list[str]) -> None:
        import subprocess

        self.name = f"ray-supervisor-zygote-{uuid.uuid4().hex}"
        self.preload = list(preload)
        entry = "from supervisor.core.worker.zygote import main; main()"  # not -m: the package imports this module
        command = [sys.executable, "-c", entry, "--name", self.name, "--preload", ",".join(preload), "--parent", str(os.getpid())]
        self.process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.PIPE, text=True)
        self._last_line = ""
        threading.Thread(target=self._forward_stderr, name="zygote-stderr", daemon=True).start()

    def _forward_stderr(self) -> None:
        # Into this actor's log (the node's worker log files); the last line explains a failed zygote.
        assert self.process.stderr is not None
        for line in self.process.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                self._last_line = line.strip()

    def _exited(self, code: int) -> str:
        time.sleep(0.1)  # its last words, through the forwarding thread
        return f"the zygote preloading {self.preload} exited with code {code}: {self._last_line or 'no output'}"

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the zygote accepts requests; how to fork a worker from it.

        Raises:
            RuntimeError: the zygote exited (a preload failed) or was not ready within ``timeout_s``.
        """

        def reachable() -> bool:
            if _reachable(self.name):
                return True
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(self._exited(code))
            return False

        if not poll(reachable, Backoff.fixed(0.05), timeout_s=timeout_s):
            raise RuntimeError(f"the zygote preloading {self.preload} was not ready within {timeout_s:g}s")
        py_executable = f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(LAUNCHER))}"
        return {"name": self.name, "py_executable": py_executable, "pid": self.process.pid}

    def watch(self) -> str:
        """Block until the zygote exits (after :meth:`ready`); why it did."""
        return self._exited(self.process.wait())


_REMOTE_KEEPER: Any = None


def _remote_keeper() -> Any:
    global _REMOTE_KEEPER
    if _REMOTE_KEEPER is None:  # one remote class: exported to the cluster once, not per node
        import ray

        _REMOTE_KEEPER = ray.remote(ZygoteKeeper)
    return _REMOTE_KEEPER


def keeper_prefix(prefix: str) -> str:
    """What the names of the keepers of ``prefix`` (a group's, or a job's) start with."""
    return f"{prefix}zygote-"


def keeper_name(prefix: str, preload: tuple[str, ...], node_id: str) -> str:
    """The keeper actor's name: one per group (or job), preload and node."""
    digest = hashlib.sha256(",".join(preload).encode()).hexdigest()[:6]
    return f"{keeper_prefix(prefix)}{digest}-{node_id[:12]}"


# Where a runtime_env sets up more than variables and files, a zygote started beside the workers
# would not import what they do (another pip environment, a container image, another Python).
RUNTIME_ENV_KEYS = frozenset({"env_vars", "working_dir", "py_modules", "excludes", "config"})


def runtime_env_problem(runtime_env: dict[str, Any] | None) -> str | None:
    """Why workers of ``runtime_env`` cannot be forked from a zygote (None: they can)."""
    other = sorted(set(runtime_env or {}) - RUNTIME_ENV_KEYS)
    return f"the workers' runtime_env sets {', '.join(other)}, which a zygote cannot share" if other else None


RETRY_S = 30.0  # a zygote that failed is started again after this, doubling up to RETRY_MAX_S
RETRY_MAX_S = 3600.0
STARTS_PER_CALL = 8  # keepers created in one call: each is a synchronous named-actor registration


@dataclass
class _NodeKeeper:
    handle: Any = None  # None: no keeper now (failed; started again at retry_at)
    ready: Any = None  # the pending readiness call
    watch: Any = None  # the pending watch: answers when the zygote exits
    launcher: ZygoteLauncher | None = None
    failures: int = 0
    retry_at: float = 0.0


class NodeZygotes:
    """A group's zygotes, one per node (never blocks: see :meth:`launcher`).

    A node's zygote is started on the first call for it; a zygote that fails to start or exits later
    is reported (``zygote_failed``), its keeper killed, and it is started again after a pause that
    doubles with each failure. Meanwhile standbys on that node start as plain processes."""

    def __init__(
        self, prefix: str, namespace: str, preload: tuple[str, ...], detached: bool,
        kill_actors: Callable[[list[Any]], None], runtime_env: dict[str, Any] | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.prefix, self.namespace, self.preload, self.detached = prefix, namespace, tuple(preload), detached
        self.kill_actors, self.runtime_env, self.clock = kill_actors, runtime_env, clock
        self._nodes: dict[str, _NodeKeeper] = {}
        # The supervision loop starts and polls; a teardown (or a test) may ask from another thread.
        self._lock = threading.RLock()

    def keeper_name(self, node_id: str) -> str:
        return keeper_name(self.prefix, self.preload, node_id)

    def warm(self, node_ids: Iterable[str]) -> None:
        """Start the zygotes of ``node_ids`` that are due (none running, past any retry pause), at
        most :data:`STARTS_PER_CALL` in one call."""
        with self._lock:
            for node_id in [n for n in sorted(set(node_ids)) if self._due(n)][:STARTS_PER_CALL]:
                self._start(node_id, self._nodes.setdefault(node_id, _NodeKeeper()))

    def wait_ready(self, node_ids: Iterable[str], timeout_s: float = READY_TIMEOUT_S) -> dict[str, ZygoteLauncher | None]:
        """Start the zygotes of ``node_ids`` and wait until each is ready or has failed, at most
        ``timeout_s``: how to fork a worker on each node (None: failed, or not ready in time; its
        workers start as plain processes). For a group's first ranks, which would otherwise each
        pay for the imports at once."""
        nodes = sorted({n for n in node_ids if n})
        started, waiting, next_report = time.monotonic(), False, 0.0
        while True:
            self.warm(nodes)
            self.poll()
            with self._lock:
                # Not yet answered: no keeper yet (a name still held by one being killed), or started
                # and not ready; a failed one (failures > 0) waits for its retry, not for us.
                pending = [n for n in nodes if (k := self._nodes.get(n)) is None or (k.launcher is None and k.failures == 0)]
            if not pending or time.monotonic() - started >= timeout_s:
                break
            waited = time.monotonic() - started
            if not waiting or waited >= next_report:  # what it waits for, and (every 10 s) for how long
                waiting, next_report = True, waited + PROGRESS_S
                log.info("zygotes_waiting", group=self.prefix, nodes=pending, preload=list(self.preload), waited_s=round(waited, 1), timeout_s=timeout_s)
            time.sleep(0.05)
        with self._lock:
            launchers = {n: (self._nodes[n].launcher if n in self._nodes else None) for n in nodes}
        if waiting:
            ready = sum(1 for launcher in launchers.values() if launcher is not None)
            log.info("zygotes_waited", group=self.prefix, ready=ready, nodes=len(nodes), waited_s=round(time.monotonic() - started, 3))
        return launchers

    def _due(self, node_id: str) -> bool:
        keeper = self._nodes.get(node_id)
        return keeper is None or (keeper.handle is None and self.clock() >= keeper.retry_at)

    def launcher(self, node_id: str | None, start: bool = True) -> ZygoteLauncher | None:
        """How to fork a worker on ``node_id`` now: None while its zygote starts (started here when it
        is due, unless not ``start``), after it failed, or for an unknown node."""
        with self._lock:
            if not node_id:
                return None
            if self._due(node_id):
                if start:
                    self._start(node_id, self._nodes.setdefault(node_id, _NodeKeeper()))
                return None
            self.poll()
            return self._nodes[node_id].launcher

    def poll(self) -> None:
        """Learn which zygotes became ready, failed to start, or exited (without waiting)."""
        import ray

        with self._lock:
            pending = {ref: (node, keeper) for node, keeper in self._nodes.items() for ref in (keeper.ready, keeper.watch) if ref is not None}
            if not pending:
                return
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in done:
                node_id, keeper = pending[ref]
                if ref is keeper.ready:
                    self._on_ready(node_id, keeper)
                    continue
                try:
                    why = ray.get(ref)
                except Exception as exc:  # the keeper itself died (its node, a kill)
                    why = first_line(exc)
                self._failed(node_id, keeper, why)

    def _start(self, node_id: str, keeper: _NodeKeeper) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {
            "name": self.keeper_name(node_id),
            "namespace": self.namespace,
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
        }
        if self.runtime_env:  # the workers' own (their variables and files): the zygote imports what they would
            options["runtime_env"] = self.runtime_env
        if self.detached:
            options["lifetime"] = "detached"
        try:
            keeper.handle = _remote_keeper().options(**options).remote(list(self.preload))
        except ValueError as exc:  # the name is still held by a keeper being killed: next time
            log.debug("zygote_keeper_name_taken", group=self.prefix, node=node_id, error=first_line(exc))
            keeper.retry_at = self.clock() + 1.0
            return
        keeper.ready = keeper.handle.ready.remote()
        log.info("zygote_starting", group=self.prefix, node=node_id, preload=list(self.preload))

    def _on_ready(self, node_id: str, keeper: _NodeKeeper) -> None:
        import ray

        try:
            info = ray.get(keeper.ready)
        except Exception as exc:
            self._failed(node_id, keeper, first_line(exc))
            return
        keeper.ready, keeper.watch = None, keeper.handle.watch.remote()
        keeper.launcher = ZygoteLauncher(info["name"], info["py_executable"], info["pid"])
        keeper.failures = 0
        log.info("zygote_ready", group=self.prefix, node=node_id, pid=info["pid"])

    def _failed(self, node_id: str, keeper: _NodeKeeper, why: str) -> None:
        keeper.failures += 1
        pause = min(RETRY_MAX_S, RETRY_S * 2 ** (keeper.failures - 1))
        log.warning("zygote_failed", group=self.prefix, node=node_id, error=why, failures=keeper.failures, retry_in_s=pause)
        handle = keeper.handle
        keeper.handle = keeper.ready = keeper.watch = keeper.launcher = None
        keeper.retry_at = self.clock() + pause
        try:
            self.kill_actors([handle])
        except Exception as exc:  # gone already, or Ray is down
            log.debug("zygote_keeper_not_killed", group=self.prefix, node=node_id, error=first_line(exc))

    def failures(self, node_id: str) -> int:
        """How many times in a row the zygote of ``node_id`` failed (0 once one is ready)."""
        with self._lock:
            keeper = self._nodes.get(node_id)
            return keeper.failures if keeper is not None else 0

    def take_handles(self) -> list[Any]:
        """The keepers' handles, forgotten here: for the group to kill (killing a keeper ends its
        zygote; workers forked earlier run on)."""
        with self._lock:
            keepers, self._nodes = list(self._nodes.values()), {}
            return [k.handle for k in keepers if k.handle is not None]


if __name__ == "__main__":
    main()
