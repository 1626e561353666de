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
