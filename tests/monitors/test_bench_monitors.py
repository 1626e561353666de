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
        for mode in ("strict_vs_off", "sample_vs_off", "off_vs_off"):
            assert r[mode]["ratio"] > 0, (replay, mode, r[mode])
        # sample mode's checks in one replay: the budget's leader (HostTier's) says what its
        # checks took of its life (the final cache check at least), its companion nothing
        leader = r["sample_checks"]["spec/HostTier.tla"]
        assert 0 < leader["checking_s"] <= leader["alive_s"] and leader["cache_checks"] == 1
        assert all("checking_s" not in m for name, m in r["sample_checks"].items() if name != "spec/HostTier.tla")


@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_williams_orders_balance_place_and_predecessor(n):
    """Each order is a permutation; over the n orders each item takes each place once, and
    each item directly follows each other item exactly once (never itself)."""
    import collections
    orders = bench.williams_orders(n)
    assert len(orders) == n
    assert all(sorted(o) == list(range(n)) for o in orders)
    for place in range(n):
        assert sorted(o[place] for o in orders) == list(range(n))
    follows = collections.Counter((a, b) for o in orders for a, b in zip(o, o[1:]))
    assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(follows.values()) == {1}


@pytest.mark.parametrize("n", [0, 1, 3, 5])
def test_williams_orders_refuse_an_order_they_cannot_balance(n):
    with pytest.raises(ValueError, match="even order"):
        bench.williams_orders(n)


def test_the_bench_rounds_run_in_williams_orders(monkeypatch):
    """_compare's timed replays follow the Williams orders of its four replays (the three
    modes and the A/A's second off), one order a round, in turn."""
    from hicache.replay.driver import ReplayConfig
    seen = []

    def fake_once(mode, cfg, reqs, rate=None, budget=bench.DEFAULT):
        seen.append((mode, rate, budget))
        return 0.01, 0.01, 0.01
    monkeypatch.setattr(bench, "_replay_once", fake_once)
    monkeypatch.setattr(bench, "_attached_once", lambda cfg, reqs: (0.01, 0.01, 1))
    monkeypatch.setattr(bench, "_strict_profile", lambda cfg, reqs, runs: (1, {}, {}))
    monkeypatch.setattr(bench, "_sample_counts", lambda cfg, reqs: {})
    out = bench._compare(ReplayConfig(limit=1), [], runs=5)
    timed = [m for m, rate, budget in seen[len(bench.MODES):] if rate is None and budget is bench.DEFAULT]
    # (off_again replays as off: the rounds' modes, in the orders' places)
    want = [("off" if bench.ROUND[i] == "off_again" else bench.ROUND[i])
            for k in range(5) for i in bench.williams_orders(4)[k % 4]]
    assert timed == want
    assert out["off_vs_off"]["paired"]["rounds"] == 5
