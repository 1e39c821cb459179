"""The worker command a forked standby starts with: it asks its node's zygote (:mod:`.zygote`) for a
forked worker, and stands for it until it exits.

Ray starts a worker as ``<py_executable> default_worker.py <args>``; a standby forked from a zygote has
``python -I -S <this file>`` as its ``py_executable``. This process sends its arguments, environment,
working directory and standard streams to the zygote named by :data:`ZYGOTE_ENV`, which forks a child
that runs Ray's worker with them, and then:

* passes SIGTERM, SIGINT and SIGHUP on to the child, and exits with the child's exit code;
* when it is killed itself (SIGKILL cannot be passed on), the zygote sees its connection close and
  kills the child, so a worker never outlives the process Ray started for it;
* when no zygote answers, it becomes the worker itself (``exec`` of a plain Python with the same
  arguments): a standby then starts as it would without one, only slower.

Run with ``-I -S``: no site-packages, so it starts in milliseconds, and it imports only the standard
library. The framing here is also the zygote's (one place for the protocol).
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

ZYGOTE_ENV = "SUPERVISOR_ZYGOTE"  # the abstract UNIX socket name of the node's zygote
STREAMS = (0, 1, 2)  # stdin, stdout, stderr: passed to the forked worker
_LENGTH = struct.Struct("!I")
_CODE = struct.Struct("!i")
MAX_FRAME = 16 << 20  # a request is arguments and an environment: far below this


def send_frame(sock: socket.socket, payload: bytes, fds: tuple[int, ...] = ()) -> None:
    """Send ``payload`` length-prefixed, with ``fds`` attached (SCM_RIGHTS) to its first byte."""
    data = _LENGTH.pack(len(payload)) + payload
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([data], ancillary)
    if sent < len(data):
        sock.sendall(data[sent:])


def recv_frame(sock: socket.socket, max_fds: int = 0) -> tuple[bytes, list[int]]:
    """Receive one :func:`send_frame` frame: its payload and the descriptors that came with it."""
    fds = array.array("i")
    head, ancillary, _, _ = sock.recvmsg(_LENGTH.size, socket.CMSG_SPACE(max_fds * fds.itemsize) if max_fds else 0)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    head += _recv_exactly(sock, _LENGTH.size - len(head))
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    return _recv_exactly(sock, length), list(fds)


def send_code(sock: socket.socket, code: int) -> None:
    sock.sendall(_CODE.pack(code))


def recv_code(sock: socket.socket) -> int | None:
    """A 4-byte signed integer, or None when the peer closed first."""
    try:
        data = _recv_exactly(sock, _CODE.size)
    except (ConnectionError, OSError):
        return None
    return _CODE.unpack(data)[0]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def _become_worker(argv: list[str], why: str) -> None:
    print(f"supervisor zygote launcher: {why}; starting the worker without it", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, *argv])


def _forward_signals(pidfd: int) -> None:
    """Pass SIGTERM, SIGINT and SIGHUP on to the worker (through its pidfd: never to a reused pid)."""

    def forward(received: int, _frame: object) -> None:
        try:
            signal.pidfd_send_signal(pidfd, received)
        except OSError:  # it has exited already
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)


def main(argv: list[str]) -> int:
    name = os.environ.get(ZYGOTE_ENV)
    if not name:
        _become_worker(argv, f"{ZYGOTE_ENV} is not set")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + name)
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        send_frame(sock, json.dumps(request).encode(), STREAMS)
        pid = recv_code(sock)
    except OSError as exc:
        pid = None
        why = f"zygote {name!r} unreachable ({exc.__class__.__name__}: {exc})"
    else:
        why = f"zygote {name!r} did not fork a worker"
    if pid is None or pid <= 0:
        sock.close()
        _become_worker(argv, why)
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # it exited at once: its code follows
        pidfd = None
    if pidfd is not None:
        _forward_signals(pidfd)
    code = recv_code(sock)
    if code is None:  # the zygote went away before the worker: wait for the worker itself
        if pidfd is not None:
            import select

            select.select([pidfd], [], [])
        return 1
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
