"""Zygotes: one process per node that has imported a group's heavy modules, forking standbys from it.

A standby's start is mostly imports: on the 2-core test machine a worker that imports tensordict (and
with it torch and torch._dynamo) spends about 4 CPU-seconds on it, and where CPUs are scarce every rank
beside it slows down for that long, even at the lowest CPU priority (``bench/kill_cost.py``). A zygote
pays for them once per node; each standby then starts as a fork of it (copy-on-write, a fraction of a
CPU-second) and runs Ray's worker as it would in a fresh process.

* :func:`serve` is the zygote (``python -m supervisor.core.zygote``): it imports the ``preload``
  modules, listens on an abstract UNIX socket, and forks a worker for each request of a launcher
  (:mod:`.zygote_launch`, the standby's ``py_executable``). It never imports Ray: Ray's C++ core reads
  its configuration (the job id among it) from the environment once, at import, and a worker forked
  from a process that had would carry the wrong one. A preload module that imports Ray is refused.
* :class:`ZygoteKeeper` is the Ray actor (one per group and node, named, no CPU) that starts the zygote
  and owns it: the zygote dies with it (``PR_SET_PDEATHSIG``), so killing the group's named actors
  (teardown, ``supervisor gc``) removes the zygotes too.
* :class:`NodeZygotes` keeps a group's keepers, without blocking: a standby is forked only on a node
  whose zygote is ready; elsewhere (its zygote still importing, or failed) it starts as a plain process.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import first_line
from ..observability.log import get_logger
from .zygote_launch import STREAMS, ZYGOTE_ENV, recv_frame, send_code

__all__ = ["ZygoteLauncher", "ZygoteKeeper", "NodeZygotes", "serve", "check_preload_names"]

log = get_logger("zygote")

LAUNCHER = Path(__file__).with_name("zygote_launch.py")
READY_TIMEOUT_S = 300.0  # a zygote's imports on a loaded node; a standby starts plainly meanwhile
REQUEST_TIMEOUT_S = 10.0  # a launcher sends its request right after connecting
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ZygoteLauncher:
    """How a worker on one node is forked from that node's zygote: Ray's ``py_executable`` and the
    zygote's socket name, both for the worker's runtime_env."""

    name: str
    py_executable: str

    def runtime_env(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """``runtime_env`` with this launcher as the worker's Python."""
        env_vars = {**runtime_env.get("env_vars", {}), ZYGOTE_ENV: self.name}
        return {**runtime_env, "env_vars": env_vars, "py_executable": self.py_executable}


def check_preload_names(preload: tuple[str, ...] | list[str]) -> list[str]:
    """The problems with ``preload`` as a list of module names (empty when there are none)."""
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


@dataclass
class _Zygote:
    listener: socket.socket
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    workers: dict[int, _Worker] = field(default_factory=dict)  # by pid

    def run(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        while True:
            for key, _ in self.selector.select():
                what, worker = key.data
                if what == "accept":
                    self._accept()
                elif what == "exited":
                    self._reap(worker)
                else:  # the launcher's connection: readable only when it closed (it was killed)
                    self._launcher_gone(worker)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(REQUEST_TIMEOUT_S)
        fds: list[int] = []
        try:
            payload, fds = recv_frame(conn, max_fds=len(STREAMS))
            request = json.loads(payload)
            if len(fds) != len(STREAMS):
                raise ValueError(f"{len(fds)} descriptors, expected {len(STREAMS)}")
        except (OSError, ValueError) as exc:
            print(f"zygote: bad request: {first_line(exc)}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            self._become_worker(request, fds, conn)
        for fd in fds:
            os.close(fd)
        worker = _Worker(pid, conn, os.pidfd_open(pid))
        self.workers[pid] = worker
        send_code(conn, pid)
        self.selector.register(worker.pidfd, selectors.EVENT_READ, ("exited", worker))
        self.selector.register(conn, selectors.EVENT_READ, ("launcher", worker))

    def _reap(self, worker: _Worker) -> None:
        _, status = os.waitpid(worker.pid, 0)
        try:
            send_code(worker.conn, os.waitstatus_to_exitcode(status))
        except OSError:  # the launcher is gone too
            pass
        self._forget(worker)

    def _launcher_gone(self, worker: _Worker) -> None:
        # The process Ray started for the worker was killed: the worker must not outlive it.
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.selector.unregister(worker.conn)  # its exit is reaped when the pidfd fires

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
        """In the forked child: become the worker the launcher asked for (never returns)."""
        code = 1
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
            # What the interpreter would have put on the path at start: the script's directory, and
            # PYTHONPATH entries the zygote's own environment lacked.
            pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
            sys.path[:0] = [os.path.dirname(request["argv"][0]), *pythonpath]
            os.chdir(request["cwd"])
            sys.argv = list(request["argv"])
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001  (a worker's crash: reported on its stderr, as Python would)
            import traceback

            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001  (a closed stream: nothing left to say)
                    pass
            os._exit(code)


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
    _Zygote(listener).run()


def main() -> None:
    parser = argparse.ArgumentParser(description="A zygote: forks Ray workers with modules imported once.")
    parser.add_argument("--name", required=True, help="abstract UNIX socket name to listen on")
    parser.add_argument("--preload", default="", help="comma-separated modules to import before forking")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process (the keeper) dies")
    args = parser.parse_args()
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
        command = [sys.executable, "-m", "supervisor.core.zygote", "--name", self.name, "--preload", ",".join(preload), "--parent", str(os.getpid())]
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

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the zygote accepts requests; how to fork a worker from it.

        Raises:
            RuntimeError: the zygote exited (a preload failed) or was not ready within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while not _reachable(self.name):
            code = self.process.poll()
            if code is not None:
                time.sleep(0.1)  # its last words, through the forwarding thread
                raise RuntimeError(f"the zygote preloading {self.preload} exited with code {code}: {self._last_line or 'no output'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the zygote preloading {self.preload} was not ready within {timeout_s:g}s")
            time.sleep(0.05)
        return {"name": self.name, "py_executable": f"{sys.executable} -I -S {LAUNCHER}", "pid": self.process.pid}


@dataclass
class _NodeKeeper:
    handle: Any
    ready: Any | None  # the pending readiness call, None once answered
    launcher: ZygoteLauncher | None = None
    failed: bool = False


class NodeZygotes:
    """A group's zygotes, one per node, started on first need (never blocks: see :meth:`launcher`)."""

    def __init__(self, prefix: str, namespace: str, preload: tuple[str, ...], detached: bool) -> None:
        self.prefix, self.namespace, self.preload, self.detached = prefix, namespace, tuple(preload), detached
        self._nodes: dict[str, _NodeKeeper] = {}

    def keeper_name(self, node_id: str) -> str:
        return f"{self.prefix}zygote-{node_id[:16]}"

    def launcher(self, node_id: str | None) -> ZygoteLauncher | None:
        """How to fork a worker on ``node_id`` now; None while its zygote is starting (it is started
        on the first call), when it failed, or for an unknown node."""
        if not node_id:
            return None
        keeper = self._nodes.get(node_id)
        if keeper is None:
            self._nodes[node_id] = self._start(node_id)
            return None
        if keeper.ready is not None:
            self._check(node_id, keeper)
        return keeper.launcher

    def _start(self, node_id: str) -> _NodeKeeper:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {
            "name": self.keeper_name(node_id),
            "namespace": self.namespace,
            "get_if_exists": True,  # a restarted daemon finds the zygote its predecessor started
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
        }
        if self.detached:
            options["lifetime"] = "detached"
        handle = ray.remote(ZygoteKeeper).options(**options).remote(list(self.preload))
        log.info("zygote_starting", group=self.prefix, node=node_id, preload=list(self.preload))
        return _NodeKeeper(handle, handle.ready.remote())

    def _check(self, node_id: str, keeper: _NodeKeeper) -> None:
        import ray

        done, _ = ray.wait([keeper.ready], timeout=0)
        if not done:
            return
        try:
            info = ray.get(keeper.ready)
        except Exception as exc:  # standbys on this node start as plain processes from now on
            keeper.failed = True
            log.warning("zygote_failed", group=self.prefix, node=node_id, error=first_line(exc))
        else:
            keeper.launcher = ZygoteLauncher(info["name"], info["py_executable"])
            log.info("zygote_ready", group=self.prefix, node=node_id, pid=info["pid"])
        keeper.ready = None

    def take_handles(self) -> list[Any]:
        """The keepers' handles, forgotten here: for the group to kill (killing a keeper ends its
        zygote; workers forked earlier run on)."""
        keepers, self._nodes = list(self._nodes.values()), {}
        return [k.handle for k in keepers]


if __name__ == "__main__":
    main()
