"""Start and stop a `mooncake_master` on loopback, for tests and `hicache replay --storage mooncake`.

    with MooncakeMaster.start() as master:
        store = MooncakeStorage(MooncakeStoreConfig.for_master(master))

The master runs in its own process group on free loopback ports (RPC, HTTP metadata server,
metrics). Readiness is a bounded poll: the process is alive and both the RPC and the metadata
ports accept connections; a start that fails (a port taken between choosing and binding,
the binary crashing) is retried on fresh ports, then reported with the tail of its log.
`stop` kills the whole process group and is idempotent; it also runs at interpreter exit.
"""
from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from hicache.deferred_signals import deferred_signals

LOOPBACK = "127.0.0.1"


class MooncakeUnavailable(RuntimeError):
    """Mooncake cannot run here (package, binary or system libraries missing, or no start)."""


def find_master_binary() -> str | None:
    """Path of `mooncake_master`: the one shipped in the `mooncake` package, else on PATH."""
    spec = importlib.util.find_spec("mooncake")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "mooncake_master"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("mooncake_master")


def unavailable_reason() -> str | None:
    """Why Mooncake Store cannot be used here, or None when the client and master are present."""
    try:
        from mooncake.store import MooncakeDistributedStore  # noqa: F401
    except Exception as exc:  # ImportError, or OSError for a missing libibverbs/librdmacm
        return f"mooncake.store does not import: {exc!r}"
    if find_master_binary() is None:
        return "mooncake_master binary not found"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _listeners(port: int) -> set[int] | None:
    """Inodes of the TCP sockets listening on `port` (/proc/net/tcp), or None where /proc
    cannot tell (then only a connection says the port is served, not by whom)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    out = set()
    for line in lines:
        f = line.split()
        # local "0100007F:1F90", state 0A = LISTEN, inode in column 9
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            out.add(int(f[9]))
    return out


def _serves(pid: int, port: int) -> bool:
    """Whether process `pid` itself listens on `port`: a free port picked for the master
    can be taken by another process first, which then answers the readiness probe while the
    master fails to bind and exits (its client then waited minutes on a dead address)."""
    inodes = _listeners(port)
    if inodes is None:
        return _accepts(port)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and int(link[8:-1]) in inodes:
            return True
    return False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MasterOptions:
    start_timeout_s: float = 30.0    # bound on one start attempt
    attempts: int = 3                # fresh ports per attempt
    rpc_threads: int = 2             # the test machines have 2 cores
    kv_lease_ttl_ms: int = 500       # how long a read pins an object against removal/eviction
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s: must be positive, got {self.start_timeout_s}")
        if self.attempts < 1:
            raise ValueError(f"attempts: must be >= 1, got {self.attempts}")
        if self.rpc_threads < 1:
            raise ValueError(f"rpc_threads: must be >= 1, got {self.rpc_threads}")
        if self.kv_lease_ttl_ms < 1:
            raise ValueError(f"kv_lease_ttl_ms: must be >= 1, got {self.kv_lease_ttl_ms}")


class MooncakeMaster:
    """A running `mooncake_master`; use `MooncakeMaster.start()` (a context manager)."""

    def __init__(self, proc: subprocess.Popen, rpc_port: int, http_port: int,
                 metrics_port: int, log_path: Path) -> None:
        self.proc = proc
        self.rpc_port = rpc_port
        self.http_port = http_port
        self.metrics_port = metrics_port
        self.log_path = log_path
        atexit.register(self.stop)

    @property
    def master_addr(self) -> str:
        return f"{LOOPBACK}:{self.rpc_port}"

    @property
    def metadata_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}/metadata"

    @classmethod
    def start(cls, options: MasterOptions = MasterOptions()) -> MooncakeMaster:
        binary = find_master_binary()
        if binary is None:
            raise MooncakeUnavailable("mooncake_master binary not found")
        failures = []
        for _ in range(options.attempts):
            master = cls._launch(binary, options)
            if master._wait_ready(options.start_timeout_s):
                return master
            failures.append(master.log_tail())
            master.stop()
        raise MooncakeUnavailable(f"mooncake_master did not start in {options.attempts} attempts; "
                                  f"last log:\n{failures[-1]}")

    @classmethod
    def _launch(cls, binary: str, options: MasterOptions) -> MooncakeMaster:
        rpc, http, metrics = free_port(), free_port(), free_port()
        log_fd, log_name = tempfile.mkstemp(prefix="mooncake_master.", suffix=".log")
        args = [binary,
                f"--rpc_address={LOOPBACK}", f"--rpc_port={rpc}",
                "--enable_http_metadata_server=true",
                f"--http_metadata_server_host={LOOPBACK}", f"--http_metadata_server_port={http}",
                f"--metrics_host={LOOPBACK}", f"--metrics_port={metrics}",
                f"--rpc_thread_num={options.rpc_threads}",
                f"--default_kv_lease_ttl={options.kv_lease_ttl_ms}",
                *options.extra_args]
        # a SIGTERM (or Ctrl-C) landing between the exec and the constructor's atexit
        # registration would leave the master running: it waits until the master is armed
        with deferred_signals():
            try:
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log_fd,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            finally:
                os.close(log_fd)
            return cls(proc, rpc, http, metrics, Path(log_name))

    def _wait_ready(self, timeout_s: float) -> bool:
        """Poll until both ports accept, the process exits, or the deadline passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _serves(self.proc.pid, self.rpc_port) and _serves(self.proc.pid, self.http_port):
                return True
            try:
                self.proc.wait(timeout=0.05)   # the poll interval doubles as a liveness check
                return False                    # exited: failed to bind or crashed
            except subprocess.TimeoutExpired:
                pass
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Kill the master's process group (TERM, then KILL) and remove its log. Idempotent."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
        self.log_path.unlink(missing_ok=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> MooncakeMaster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
