"""The loopback mooncake_master helper: ready when it says so, always stopped."""
from __future__ import annotations

import os

import pytest

from hicache.storage.mooncake_server import MasterOptions, MooncakeMaster, MooncakeUnavailable


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _state(pid: int) -> str:
    """The process's state letter (Z: a zombie, killed but not reaped), for a failure message."""
    try:
        return "state " + open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "no such process"


def test_master_runs_on_loopback(mooncake_master):
    assert mooncake_master.alive()
    assert mooncake_master.metadata_url.startswith("http://127.0.0.1:")
    assert mooncake_master.master_addr == f"127.0.0.1:{mooncake_master.rpc_port}"


def test_failed_start_reports_the_log(mooncake_available):
    with pytest.raises(MooncakeUnavailable, match="did not start in 2 attempts") as info:
        MooncakeMaster.start(MasterOptions(attempts=2, extra_args=("--no_such_flag_xyz=1",)))
    assert "no_such_flag_xyz" in str(info.value)


def test_stop_kills_the_process_group_and_is_idempotent(mooncake_available):
    master = MooncakeMaster.start()
    pgid = master.proc.pid
    with master:
        assert _group_alive(pgid)
    assert not _group_alive(pgid)
    assert not master.log_path.exists()
    master.stop()


@pytest.mark.parametrize("kwargs,field", [({"attempts": 0}, "attempts"),
                                          ({"start_timeout_s": 0}, "start_timeout_s")])
def test_options_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MasterOptions(**kwargs)


def test_sigterm_to_the_command_stops_its_master(mooncake_available, tmp_path):
    """`timeout -s TERM ... hicache replay --storage mooncake` left the master running (its
    cleanup ran at exit, which SIGTERM skips). The command now unwinds on SIGTERM."""
    import signal
    import subprocess
    import sys
    import time
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join('{"timestamp": %d, "input_length": 4096, "output_length": 1, "hash_ids": [%s]}\n'
                             % (i, ", ".join(str(i * 8 + b) for b in range(8))) for i in range(100000)))
    proc = subprocess.Popen([sys.executable, "-m", "hicache.cli.main", "replay", str(trace), "--storage", "mooncake",
                             "--host-tokens", "4096", "--device-tokens", "4096"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        master = None
        deadline = time.monotonic() + 60
        while master is None and time.monotonic() < deadline and proc.poll() is None:
            kids = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "mooncake_master"],
                                  capture_output=True, text=True).stdout.split()
            master = int(kids[0]) if kids else None
            if master is None:
                try:            # the poll's pace: returns early only if the command ended
                    proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        assert master is not None, "the replay never started its master"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM and "terminated" in err
        assert not _group_alive(master), _state(master)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


_SIGTERM_AT_EXEC = """
import signal, subprocess, sys
from hicache.storage import mooncake_server

class Stop(BaseException):
    pass

def stop(signum, frame):
    raise Stop()
signal.signal(signal.SIGTERM, stop)       # as `hicache` installs it
real = subprocess.Popen

def popen(*args, **kwargs):               # the signal lands after the exec, before Popen returns
    proc = real(*args, **kwargs)
    print(proc.pid, flush=True)
    signal.raise_signal(signal.SIGTERM)
    return proc
subprocess.Popen = popen
try:
    mooncake_server.MooncakeMaster.start()
except Stop:
    print("stopped", flush=True)
"""


def test_a_sigterm_between_the_exec_and_the_registration_still_stops_the_master(mooncake_available):
    """CI once found the master of a SIGTERMed `hicache replay` still running: a signal landing
    between the master's exec and the registration of its cleanup raised where nothing could
    stop it. The launch now holds the signal until the master is armed."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _SIGTERM_AT_EXEC], capture_output=True, text=True, timeout=60)
    lines = out.stdout.split()
    assert out.returncode == 0 and lines[1:] == ["stopped"], (out.stdout, out.stderr)
    master = int(lines[0])
    try:
        assert not _group_alive(master), _state(master)
    finally:
        if _group_alive(master):
            os.killpg(master, 9)


def test_a_port_taken_by_another_process_is_not_taken_for_the_master(mooncake_available, monkeypatch):
    """Another process listening on the port picked for the master answered the readiness
    probe: start() returned a master that had exited on its failed bind, and the client then
    retried a dead address for minutes. Readiness now asks whether the master itself listens,
    and a failed attempt retries on fresh ports."""
    import socket

    from hicache.storage import mooncake_server
    squat = socket.socket()
    squat.bind(("127.0.0.1", 0))
    squat.listen()
    taken = squat.getsockname()[1]
    fresh, calls = mooncake_server.free_port, []

    def first_taken():
        calls.append(1)
        return taken if len(calls) == 1 else fresh()
    monkeypatch.setattr(mooncake_server, "free_port", first_taken)
    try:
        with MooncakeMaster.start(MasterOptions(attempts=3)) as master:
            assert master.rpc_port != taken and master.alive()
            assert mooncake_server._serves(master.proc.pid, master.rpc_port)
            assert not mooncake_server._serves(master.proc.pid, taken)
    finally:
        squat.close()


def test_a_client_without_a_master_fails_at_once_and_says_where(mooncake_available):
    """The client's setup retried an absent master for ~90 s before failing."""
    import time

    from hicache.storage.mooncake_store import MooncakeStorage, MooncakeStoreConfig
    from hicache.storage.mooncake_server import free_port
    rpc, http = free_port(), free_port()
    t0 = time.monotonic()
    with pytest.raises(MooncakeUnavailable, match=f"no Mooncake master answers at 127.0.0.1:{rpc}"):
        MooncakeStorage(MooncakeStoreConfig(master_addr=f"127.0.0.1:{rpc}",
                                            metadata_server=f"http://127.0.0.1:{http}/metadata"))
    assert time.monotonic() - t0 < 10
