"""`hicache bench monitors --quick --json`: one short round of each replay, its report's
shape, and which native paths it ran (a figure measured on the Python twins must say so)."""
import json
import subprocess
import sys

import pytest

from hicache.bench import monitors as bench


@pytest.fixture(scope="module")
def report():
    if not bench.TRACE.exists():
        pytest.skip(f"trace {bench.TRACE} not present")
    proc = subprocess.run([sys.executable, "-m", "hicache.cli.main", "bench", "monitors", "--quick", "--runs", "1",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_report_says_which_native_paths_ran(report):
    from hicache.monitors import gate, native
    from hicache.runtime import events
    paths = report["config"]["native"]
    assert set(paths) == {"monitor_loops", "event_bus", "sample_gate"}
    # (a subprocess of the same environment: the same decision as this process's)
    assert paths["monitor_loops"]["loaded"] is (native.module() is not None)
    assert paths["event_bus"]["loaded"] is (events.EXTENSION.module() is not None)
    assert paths["sample_gate"]["loaded"] is (gate.EXTENSION.module() is not None)
    for p in paths.values():
        assert p["loaded"] or p["reason"], "an unavailable path must say why"


def test_each_replay_reports_both_modes_against_off(report):
    for replay in ("kv_bytes", "metadata_only", "kv_bytes_fitting"):
        r = report[replay]
        assert r["events"] > 0
        for mode in ("strict_vs_off", "sample_vs_off"):
            assert r[mode]["ratio"] > 0, (replay, mode, r[mode])
