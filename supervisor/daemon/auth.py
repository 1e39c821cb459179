"""Ray token authentication: the token an embedded Ray makes for itself, and the token a driver that
joins a cluster presents.

With ``RAY_AUTH_MODE=token`` (Ray 2.52+) every GCS, raylet and dashboard RPC must carry one shared
token; Ray reads it from ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else
``~/.ray/auth_token``. Without it, anyone who can reach a Ray port can run code as the cluster's user.

* **An embedded Ray** gets a fresh random token in its daemon's runtime directory
  (:class:`RuntimeDir`: 0700, the token file 0600), which also names the cluster's address so that
  ``supervisor status``, ``stop``, ``gc``, ``list`` and ``doctor`` on the same machine find the token
  as they find the cluster. The directory is removed when the embedded Ray stops.
* **Joining a cluster** (:func:`choose_token`): Ray's ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``
  when set; else a spec's ``[ray] auth_token_path``; else the token of an embedded Ray on this machine
  at that address; else Ray's default file ``~/.ray/auth_token``, when there is one; else none. A
  ``RAY_AUTH_MODE`` other than ``token`` means none. A cluster that runs without authentication gets
  none either (:func:`requires_token`): presenting one breaks every actor the driver owns.
* A missing or wrong token is found by one GCS request (:func:`check_access`) and reported as one
  line, instead of ``ray.init``'s twenty seconds of retries and a traceback.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ClusterUnavailableError, ConfigError
from .liveness import pid_alive
from .loopback import is_loopback_host

__all__ = [
    "AUTH_ENV_VARS",
    "RUNTIME_DIR_ENV",
    "ClusterAuthError",
    "RuntimeDir",
    "TokenChoice",
    "TokenSource",
    "runtime_root",
    "find_local_token",
    "choose_token",
    "present",
    "withdraw",
    "use_token",
    "saved_env",
    "restore_env",
    "token_file_problem",
    "check_access",
    "requires_token",
]

# Ray's variables, in the order Ray gives them precedence (RAY_AUTH_MODE switches the check on).
AUTH_ENV_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RUNTIME_DIR_ENV = "SUPERVISOR_RUNTIME_DIR"  # overrides where daemons keep their runtime directories
TOKEN_FILE = "auth_token"
CLUSTER_FILE = "cluster.json"  # which cluster the token belongs to, written once the cluster is up


class ClusterAuthError(ClusterUnavailableError):
    """The cluster refused this process's token (none given, or the wrong one)."""


def runtime_root() -> Path:
    """The private directory holding every local daemon's runtime directory, created on first use.

    ``$SUPERVISOR_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/ray-supervisor``, else
    ``<tmp>/ray-supervisor-<uid>``.

    Raises:
        ConfigError: the directory exists but is not a directory of this user's that only they can
            read (another user could have planted it to read the tokens).
    """
    if os.environ.get(RUNTIME_DIR_ENV):
        root = Path(os.environ[RUNTIME_DIR_ENV])
    elif os.environ.get("XDG_RUNTIME_DIR"):
        root = Path(os.environ["XDG_RUNTIME_DIR"]) / "ray-supervisor"
    else:
        root = Path(tempfile.gettempdir()) / f"ray-supervisor-{os.getuid()}"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(
            f"runtime directory {root} is not private to this user (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): "
            f"remove it, or set {RUNTIME_DIR_ENV} to a directory only you can read"
        )
    return root


@dataclass(frozen=True)
class RuntimeDir:
    """A daemon's runtime directory: its embedded Ray's token, and which cluster that token opens."""

    path: Path

    @property
    def token_path(self) -> Path:
        return self.path / TOKEN_FILE

    @classmethod
    def create(cls, name: str) -> RuntimeDir:
        """A new directory (0700) holding a fresh 256-bit token (0600). Directories of daemons that
        died without stopping (SIGKILL: their embedded Ray died with them) are removed first."""
        root = runtime_root()
        _remove_dead(root)
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        runtime = cls(path)
        try:
            runtime._write_cluster_file({"pid": os.getpid()})
            fd = os.open(runtime.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        except BaseException:
            runtime.remove()
            raise
        return runtime

    def publish(self, address: str) -> None:
        """Record the address of the cluster this token opens (what :func:`find_local_token` matches)."""
        self._write_cluster_file({"address": address, "pid": os.getpid()})

    def _write_cluster_file(self, content: dict[str, object]) -> None:
        tmp = self.path / f".{CLUSTER_FILE}.tmp"
        tmp.write_text(json.dumps(content))
        tmp.replace(self.path / CLUSTER_FILE)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def find_local_token(address: str) -> Path | None:
    """The token file of a live embedded Ray on this machine whose GCS is at ``address``."""
    try:
        root = runtime_root()
    except (ConfigError, OSError):
        return None
    for entry in sorted(root.iterdir()):
        try:
            published = json.loads((entry / CLUSTER_FILE).read_text())
            if _same_address(str(published["address"]), address) and pid_alive(int(published["pid"])):
                token = entry / TOKEN_FILE
                if token.is_file():
                    return token
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not published yet, or not ours: never fatal for a command
    return None


def _remove_dead(root: Path) -> None:
    for entry in root.iterdir():
        try:
            pid = int(json.loads((entry / CLUSTER_FILE).read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being created right now, or not one of ours
        if not pid_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _same_address(a: str, b: str) -> bool:
    host_a, _, port_a = a.rpartition(":")
    host_b, _, port_b = b.rpartition(":")
    return port_a == port_b and (host_a == host_b or (is_loopback_host(host_a) and is_loopback_host(host_b)))


class TokenSource(enum.Enum):
    """Where the token a driver presents comes from, in the order they are tried."""

    RAY_ENV = "Ray's RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH"
    SPEC = "the token file"  # [ray] auth_token_path
    EMBEDDED = "the embedded Ray's token file"
    RAY_DEFAULT = "Ray's default token file"
    DISABLED = "RAY_AUTH_MODE"  # set, and not "token": the user said to send none
    NONE = "no token"


@dataclass(frozen=True)
class TokenChoice:
    """Which token a driver presents (for the error line when it is refused)."""

    source: TokenSource
    path: Path | None = None  # the token file, when there is one

    @property
    def sends(self) -> bool:
        return self.source not in (TokenSource.DISABLED, TokenSource.NONE)

    def describe(self) -> str:
        if self.source is TokenSource.DISABLED:
            return f"RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}"
        return f"{self.source.value} {self.path}" if self.path is not None and self.source is not TokenSource.RAY_ENV else self.source.value


def choose_token(address: str, auth_token_path: Path | None = None) -> TokenChoice:
    """The token to present to the cluster at ``address`` (see the module docstring for the order)."""
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    if mode and mode != "token":
        return TokenChoice(TokenSource.DISABLED)
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        env_path = os.environ.get("RAY_AUTH_TOKEN_PATH") if not os.environ.get("RAY_AUTH_TOKEN") else None
        return TokenChoice(TokenSource.RAY_ENV, Path(env_path) if env_path else None)
    if auth_token_path is not None:
        return TokenChoice(TokenSource.SPEC, auth_token_path)
    local = find_local_token(address)
    if local is not None:
        return TokenChoice(TokenSource.EMBEDDED, local)
    default = Path.home() / ".ray" / TOKEN_FILE  # where `ray get-auth-token --generate` and a local ray.init() put one
    if default.is_file():
        return TokenChoice(TokenSource.RAY_DEFAULT, default)
    return TokenChoice(TokenSource.NONE)


# Ray's variables as they were before present() changed them (None: unchanged), for withdraw().
_before_present: dict[str, str | None] | None = None


def present(choice: TokenChoice) -> None:
    """Configure this process (and the Ray processes it starts) to present the chosen token."""
    global _before_present
    if not choice.sends or (choice.source is TokenSource.RAY_ENV and os.environ.get("RAY_AUTH_MODE")):
        return
    if _before_present is None:
        _before_present = saved_env()
    if choice.source is TokenSource.RAY_ENV:
        # A token in Ray's variables means to authenticate, but Ray sends it only in token mode.
        os.environ["RAY_AUTH_MODE"] = "token"
        _refresh_ray_auth()
    else:
        assert choice.path is not None
        use_token(choice.path)


def withdraw() -> None:
    """Undo :func:`present`: the next connection chooses from the user's own variables again."""
    global _before_present
    if _before_present is not None:
        restore_env(_before_present)
        _before_present = None


def use_token(path: Path) -> None:
    """Make this process, and every Ray process it starts, present the token in ``path``."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
    _refresh_ray_auth()


def restore_env(saved: dict[str, str | None]) -> None:
    """Put Ray's variables back as ``saved`` (from :func:`saved_env`) and make Ray read them again."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _refresh_ray_auth()


def saved_env() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in AUTH_ENV_VARS}


def _refresh_ray_auth() -> None:
    # Ray's C++ config and token loader read the variables once and cache them; a Ray already imported
    # here must read them again (config first: the loader consults it).
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


def token_file_problem(path: Path) -> str | None:
    """Why Ray could not use ``path`` as a token file (a file it cannot read aborts Ray's processes), or None."""
    try:
        if not path.is_file():
            return f"no such file: {path}"
        if not path.read_text().strip():
            return f"the token file {path} is empty"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return None


def requires_token(address: str) -> bool:
    """Whether the cluster at ``address`` refuses a driver that presents no token (one GCS request).

    A driver must not present a token to a cluster that runs without authentication: its own RPC
    server then refuses the GCS, which takes every actor the driver owns for unreferenced and ends it
    (Ray 2.60: ``REF_DELETED`` at once). Unknown (the GCS unreachable now) counts as required.
    """
    from ray._raylet import GcsClient

    saved = saved_env()
    os.environ["RAY_AUTH_MODE"] = "disabled"
    _refresh_ray_auth()
    try:
        with _native_stderr_discarded():
            GcsClient(address=address)
    except Exception:  # refused (AuthenticationError), or unknown now: both count as required
        return True
    finally:
        restore_env(saved)
    return False


def check_access(address: str, choice: TokenChoice) -> None:
    """One GCS request with this process's token: fails within milliseconds when the token is refused.

    Raises:
        ClusterAuthError: the chosen token file is unreadable or empty, or the cluster requires a token
            and refused this one (or its absence).
    """
    import ray
    from ray._raylet import GcsClient

    problem = token_file_problem(choice.path) if choice.path is not None else None
    if problem:  # Ray's processes abort on a token file they cannot read
        raise ClusterAuthError(f"cannot use {choice.describe()} for the Ray cluster at {address}: {problem}")
    try:
        with _native_stderr_discarded():
            GcsClient(address=address)
    except ray.exceptions.AuthenticationError:
        if not choice.sends:
            why = f" ({choice.describe()})" if choice.source is TokenSource.DISABLED else ""
            raise ClusterAuthError(
                f"the Ray cluster at {address} requires a token and none was given{why}: set "
                "RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN), or [ray] auth_token_path in the spec"
            ) from None
        raise ClusterAuthError(f"the Ray cluster at {address} refused the token from {choice.describe()}") from None
    except Exception:  # anything else is ray.init's to report, with its own retries and message
        return


@contextlib.contextmanager
def _native_stderr_discarded() -> Iterator[None]:
    # Ray's C++ client logs each refused attempt on fd 2, past Python's logging; the caller reports
    # the refusal in one line of its own. Connecting happens before the daemon starts its threads.
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
