"""The parent side of ``supervisor run``: connect, claim, run the command, take the job back, end it.

Life of a run (:meth:`RunLauncher.run`)::

    connect (or start an embedded Ray) ──> claim the supervisor (owner id O) ──> heartbeat the record
        ──> start the command (SUPERVISOR_RUN, PYTHONPATH with the hook, RAY_ADDRESS)
              │   the process that makes the first group claims with O: it writes the record now,
              │   the parent's writes are refused (it stops beating and only watches)
              v
        the command exits (any way: returns, raises, SIGKILL) ──> claim again with O (a new
        generation fences off whatever is left of the command) ──> remove everything the supervisor
        owns and delete the record; or, detached, kill its actors, keep its placement groups and the
        record (state detached) for the next run of the name, which adopts the pools

The parent forwards SIGTERM, SIGHUP and SIGINT to the command (SIGINT only when the terminal did not
deliver it to the command already) and exits with the command's status, 128+N for a command ended by
signal N. ``supervisor stop NAME`` is a SIGTERM to the command (``--detach``: and a detached end).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from ..daemon.auth import AUTH_ENV_VARS
from ..daemon.claim import claim
from ..daemon.events import EventKind, EventType, history_ending_with
from ..daemon.fence import FENCE_ACTOR_NAME, ClaimVerdict, OwnerFence, fence_status
from ..daemon.job import Job
from ..daemon.liveness import ProcessIdentity
from ..daemon.loopback import LOOPBACK_ENV
from ..daemon.ownership import find_owned
from ..daemon.record import DaemonState, RecordStore
from ..daemon.spec import SupervisorSpec
from ..daemon.spec_cluster import SpecCluster
from ..errors import SupersededError, SupervisorError, first_line
from ..observability.log import get_logger
from .descriptor import RunDescriptor, child_environment
from .exit_status import shell_status

__all__ = ["RunLauncher", "RunNotStartedError", "forwards_sigint"]

log = get_logger("run")

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class RunNotStartedError(SupervisorError):
    """The run could not start (the cluster, the claim); nothing of it is left anywhere."""


def forwards_sigint(terminal_foreground: bool) -> bool:
    """Whether a SIGINT the parent got goes on to the command (pure): not when the parent runs in the
    terminal's foreground process group, whose Ctrl-C the command (same group) got already."""
    return not terminal_foreground


class RunLauncher:
    """Runs ``command`` supervised as ``spec.name``; :meth:`run` returns the exit status.

    Args:
        command: the program and its arguments.
        spec: the validated run spec (``load_spec(..., run=True)``), named.
        spec_text, spec_source: the spec file's text and path, handed to the command's processes.
        address: the Ray cluster (None: an embedded local Ray, like ``supervisor start``).
        detach: at the end, leave the placement groups and the record for the next run.
    """

    def __init__(
        self, command: list[str], spec: SupervisorSpec, spec_text: str | None = None, spec_source: str = "<run spec>",
        address: str | None = None, detach: bool = False,
    ) -> None:  # fmt: skip
        self.command = command
        self.spec = spec
        self.address = address or spec.ray.address
        self.detach = detach
        self.owner = uuid.uuid4().hex
        self.descriptor = RunDescriptor(spec.name, self.owner, spec_text, spec_source)
        self.job = Job(spec, owner=self.owner)
        # The command gets the user's environment, not what connecting did to this process's (Ray sets
        # a token mode and path for its driver, PYTHONBREAKPOINT...): its own ray.init decides those.
        self._user_env = dict(os.environ)
        self._cluster = SpecCluster(spec, self.address)
        self._child: subprocess.Popen[bytes] | None = None
        self._pending_signal: int | None = None
        self._ending = False
        self._holding = True  # this process writes the record (until the command's host claims)
        self._stop_beat = threading.Event()
        self._beat_thread: threading.Thread | None = None

    # -- the whole life -------------------------------------------------------------------------
    def run(self) -> int:
        """Connect, claim, run the command, end the run. Returns the command's shell status.

        Raises:
            RunNotStartedError: the cluster is unreachable or the name is taken (nothing was started).
        """
        try:
            self._connect()
        except Exception as exc:
            self._disconnect()
            raise RunNotStartedError(f"cannot reach the Ray cluster: {first_line(exc, limit=None)}") from None
        try:
            self.job.fence = OwnerFence(self.spec.name)
            self.job.phase = DaemonState.RUNNING
            claim(self.job, self.address, None, _ray_version())
        except Exception as exc:
            self._disconnect()
            raise RunNotStartedError(str(exc).splitlines()[0] if isinstance(exc, SupervisorError) else first_line(exc)) from None
        for signum in _FORWARDED:  # after connecting: Ray's own SIGTERM handler ends the process at once
            signal.signal(signum, self._on_signal)
        self._beat_thread = threading.Thread(target=self._beat, name="supervisor-run-parent", daemon=True)
        self._beat_thread.start()
        status = 1
        try:
            status = self._run_command()
        finally:
            self._ending = True
            self._stop_beat.set()
            self._join_beat()
            try:
                self._end()
            finally:
                self._disconnect()
        return status

    def _run_command(self) -> int:
        if self._pending_signal is not None:
            log.info("run_not_started", reason=signal.Signals(self._pending_signal).name)
            return 128 + self._pending_signal
        env = child_environment(self._command_base_env(), self.descriptor, self.address or "")
        self._child = subprocess.Popen(self.command, env=env)
        log.info("run_command_started", supervisor=self.spec.name, pid=self._child.pid, command=self.command, detach=self.detach)
        if self._pending_signal is not None:  # arrived while the command was being started
            self._forward(self._pending_signal)
        returncode = self._child.wait()
        status = shell_status(returncode)
        log.info("run_command_exited", supervisor=self.spec.name, status=status, returncode=returncode)
        return status

    def _command_base_env(self) -> dict[str, str]:
        env = dict(self._user_env)
        carried = [LOOPBACK_ENV]  # a loopback cluster keeps the command's Ray processes on loopback too
        if self._cluster.embedded is not None:
            carried += list(AUTH_ENV_VARS)  # the embedded Ray's fresh token: the command cannot guess it
        for key in carried:
            if key in os.environ:
                env[key] = os.environ[key]
            elif key in env and key in AUTH_ENV_VARS:
                del env[key]
        return env

    # -- signals and the stop command -----------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._ending:
            log.info("run_signal_ignored", signal=signal.Signals(signum).name, reason="the run is ending")
            return
        if signum == signal.SIGINT and not forwards_sigint(_terminal_foreground()):
            return
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self._child
        if child is None or child.poll() is not None:
            self._pending_signal = self._pending_signal or signum
            return
        log.info("run_signal_forwarded", signal=signal.Signals(signum).name, pid=child.pid)
        try:
            os.kill(child.pid, signum)
        except ProcessLookupError:
            pass

    def _beat(self) -> None:
        job, interval = self.job, self.spec.supervisor.heartbeat_interval_s
        assert job.store is not None
        stop_seen = False
        while not self._stop_beat.wait(interval):
            try:
                self._hold_or_watch()
            except Exception as exc:  # a GCS hiccup must not end the beat; the next one retries
                log.warning("run_heartbeat_failed", error=first_line(exc))
            try:
                how = job.store.stop_requested(self.spec.name, self.owner)
            except Exception as exc:
                log.warning("run_stop_check_failed", error=first_line(exc))
                continue
            if how is not None and not stop_seen:
                stop_seen = True
                self.detach = self.detach or how == "detach"
                log.info("stop_requested", by="supervisor stop", detach=how == "detach")
                self._forward(signal.SIGTERM)

    def _hold_or_watch(self) -> None:
        """Beat while this process holds the record; hand it over to the command's host when that claims
        it, and take it back if the host's process is seen gone while the command lives on."""
        job, status = self.job, fence_status(self.spec.name)
        assert job.fence is not None
        if self._holding:
            if status is not None and status.generation != job.fence.generation and status.owner == self.owner:
                # The command's group host claimed with our owner id: it writes the record now (asking
                # first spares a refused write, which the fence logs as a takeover).
                self._holding = False
                log.info("run_host_took_over", supervisor=self.spec.name, generation=status.generation)
                return
            try:
                job.write_record()
            except SupersededError:
                self._holding = False
                log.info("run_host_took_over", supervisor=self.spec.name)
            except Exception:
                pass  # counted and logged by write_record
            return
        host = status.owner_process if status is not None and status.owner == self.owner else None
        if host is not None and host.pid != os.getpid() and host.provably_gone():
            self._take_back(reason="the host process is gone")

    def _join_beat(self) -> None:
        # All the way: a beat thread still in a fence call could take the record back (a new
        # generation) in the middle of _end's teardown and fence it off. Its calls are bounded (a fence
        # call, a claim's start of a fence actor), so this ends; it says what it waits for meanwhile.
        thread, started = self._beat_thread, time.monotonic()
        while thread is not None and thread.is_alive():
            thread.join(5.0)
            if thread.is_alive():
                log.info("waiting_for_run_heartbeat", supervisor=self.spec.name, waited_s=round(time.monotonic() - started, 1), why="it is in a fence call")

    def _take_back(self, reason: str) -> None:
        """Claim the supervisor back with our owner id and beat the record again (from the host's last)."""
        if self._ending:  # _end claims it back itself
            return
        sup, store = self.spec.supervisor, self.job.store
        assert store is not None
        fence = OwnerFence(self.spec.name)
        verdict, _ = fence.claim(self.owner, sup.orphan_grace_s, sup.heartbeat_interval_s, record=store.get(self.spec.name))
        if verdict is not ClaimVerdict.GRANTED:
            return
        me = ProcessIdentity.current()
        with self.job.lock:
            record = store.get(self.spec.name) or self.job.record
            assert record is not None
            record.generation = fence.generation or 0
            record.pid, record.host, record.boot_id, record.pid_namespace = me.pid, me.host, me.boot_id, me.pid_namespace
            self.job.record, self.job.fence = record, fence
        self._holding = True
        log.warning("run_record_taken_back", supervisor=self.spec.name, reason=reason, generation=fence.generation)
        self.job.write_record()

    # -- the end ----------------------------------------------------------------------------------
    def _end(self) -> None:
        """Take the job back from whatever is left of the command, then remove it or leave it detached."""
        name, sup = self.spec.name, self.spec.supervisor
        assert self.job.store is not None
        store = self.job.store
        fence = OwnerFence(name)
        log.info("run_ending", supervisor=name, detach=self.detach)
        try:
            verdict, before = fence.claim(self.owner, sup.orphan_grace_s, sup.heartbeat_interval_s, record=store.get(name))
            if verdict is not ClaimVerdict.GRANTED:
                log.error("run_left_to_new_owner", supervisor=name, heard_from_s=round(before.silent_s, 1))
                return
            record = store.get(name) or self.job.record
            assert record is not None
            me = ProcessIdentity.current()
            record.owner, record.generation = self.owner, fence.generation or 0
            record.pid, record.host, record.boot_id, record.pid_namespace = me.pid, me.host, me.boot_id, me.pid_namespace
            record.heartbeat_seq += 1
            owned = find_owned(name)
            log.info("run_taken_back", supervisor=name, generation=fence.generation, placement_groups=len(owned.placement_groups), actors=len(owned.actors))
            if self.detach:
                fence.kill_named([a for a in owned.actors if a != FENCE_ACTOR_NAME])
                record.state, record.groups = DaemonState.DETACHED.value, {}
                fence.write_record(record.to_json(), record.heartbeat_seq, detached=True)
                store.clear_stop(name, self.owner)
                log.info("run_detached", supervisor=name, placement_groups=sorted(owned.placement_groups), hint="the next run of this name adopts them; `supervisor gc --include-detached` removes them")
                return
            record.state = DaemonState.STOPPING.value
            fence.write_record(record.to_json(), record.heartbeat_seq)
            fence.remove_owned(owned)
            ended = f"torn down: the command ended ({len(owned.placement_groups)} placement group(s), {len(owned.actors)} actor(s))"
            fence.retire(
                history_ending_with(
                    store.events(name),
                    EventKind.STOPPED,
                    ended,
                    time=time.time(),
                    type=EventType.NORMAL,
                    generation=record.generation,
                )
            )
            store.clear_stop(name, self.owner)  # a `supervisor stop` that ended this run is done
            log.info("run_torn_down", supervisor=name, placement_groups=sorted(owned.placement_groups), actors=owned.actors)
        except SupersededError as exc:
            log.error("run_left_to_new_owner", supervisor=name, error=str(exc))
        except Exception as exc:
            log.error("run_teardown_incomplete", supervisor=name, error=first_line(exc), hint="`supervisor gc` removes what is left once the record is orphaned")

    # -- the cluster ------------------------------------------------------------------------------
    def _connect(self) -> None:
        # No runtime_env: the command's program is a Ray job of its own and sets its own.
        self.address = self._cluster.connect()
        self.job.store = RecordStore()

    def _disconnect(self) -> None:
        self._cluster.disconnect()


def _terminal_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _ray_version() -> str:
    import ray

    return ray.__version__
