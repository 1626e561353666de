"""The bug zoo: a fault of each kind is caught at (or one step after) its faulty step, and
the same workload without it is quiet; cross-rank digests; verified mode and the plugin."""
from __future__ import annotations

import argparse

import pytest

from hicache.monitors.digest import LocalCollective, contribution, verdict
from hicache.monitors.workload import WorkloadConfig
from hicache.monitors.zoo import pipeline_entry, pipeline_run, ranks_entry, runtime_entry, spec_entry

W = WorkloadConfig()


@pytest.mark.parametrize("bug,prop", [(8, "SlotInOneOwner"), (10, "PendingLoadLocked"), (7, "LockedNodesKept")])
def test_runtime_fault_caught_at_its_step(bug, prop, tmp_path):
    r = runtime_entry(bug, 30, W, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, prop, 0, False), r


@pytest.mark.parametrize("bug,prop,steps", [(4, "RankStateDigestsEqual", 0), (1, "SameCollectiveSequence", 1)])
def test_rank_fault_caught_by_digest_exchange(bug, prop, steps, tmp_path):
    r = ranks_entry(bug, 10, W, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, prop, steps, False), r


def test_spec_twin_caught_by_action_check(tmp_path):
    r = spec_entry(5, 10, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "StageApply", 0, False), r
    assert r.detail.startswith("action StageApply at spec/PPSync.tla:")


def test_pipeline_fault_caught_by_the_action_check(tmp_path):
    r = pipeline_entry(20, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "GatherStart", 0, False), r
    assert r.detail.startswith("action GatherStart at spec/LayerPipeline.tla:")


@pytest.mark.parametrize("seed", range(10))
def test_pipeline_schedules_pass_every_action_check(seed, tmp_path):
    ad, exc = pipeline_run(seed, False, str(tmp_path))
    assert exc is None and ad.next_attn == ad.n and ad.seq > 3 * ad.n


def test_collective_pairs_kth_calls_and_detects_divergence():
    s = {"x": 1}
    coll = LocalCollective(2)
    assert coll.contribute(0, contribution("check", 1, s)) is None
    red = coll.contribute(1, contribution("check", 1, s))
    assert verdict(red) is None
    coll.contribute(0, contribution("check", 2, s))
    red = coll.contribute(1, contribution("check", 2, {"x": 2}))
    assert verdict(red).property == "RankStateDigestsEqual"
    coll.contribute(0, contribution("check", 3, s))
    red = coll.contribute(1, contribution("check", 4, s))   # rank 1 skipped a call
    assert verdict(red).property == "SameCollectiveSequence"


def test_verified_mode_attaches_and_detaches():
    from hicache import verified
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig
    verified.disable()          # importing hicache.verified turned it on
    init = HiCache.__init__
    try:
        verified.enable("strict")
        c = HiCache(CacheConfig(page_size=2, device_pages=4, host_pages=4, metadata_only=True))
        assert verified.monitor_of(c) is not None and c.bus.listeners
        c.close()
        verified.disable()
        assert HiCache.__init__ is init
        d = HiCache(CacheConfig(page_size=2, device_pages=4, host_pages=4, metadata_only=True))
        assert verified.monitor_of(d) is None and d.bus.listeners == []
        d.close()
    finally:
        verified.disable()


def test_pytest_plugin_option():
    from hicache import pytest_plugin, verified

    class Cfg:
        def __init__(self, v):
            self.v = v

        def getoption(self, name, default=None):
            return self.v
    cfg = Cfg("sample")
    try:
        pytest_plugin.pytest_configure(cfg)
        assert verified.current().mode == "sample"
        assert pytest_plugin.pytest_report_header(cfg) == "hicache verified mode: sample"
    finally:
        pytest_plugin.pytest_unconfigure(cfg)
    assert verified.current().mode == "off"
    with pytest.raises(ValueError):
        pytest_plugin.pytest_configure(Cfg("loud"))


def test_bugzoo_cli_json(tmp_path, capsys):
    from hicache.cli import bugzoo
    args = argparse.Namespace(seeds=20, clean=2, only=[8], violation_dir=str(tmp_path), json=True)
    assert bugzoo.run(args) == 0
    import json
    obj = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert obj["clean_alarms"] == 0 and obj["clean_runs"] == 2
    (b,) = obj["bugs"]
    assert {"name", "caught", "property", "steps_after_fault"} <= set(b)
    assert (b["caught"], b["property"], b["steps_after_fault"]) == (True, "SlotInOneOwner", 0)


def test_bench_compares_the_three_modes_on_one_replay():
    from hicache.bench import monitors as bench
    from hicache.replay.driver import ReplayConfig, load_requests
    if not bench.TRACE.exists():
        pytest.skip("shared trace not present")
    reqs = load_requests(str(bench.TRACE), 64, 8)
    cfg = ReplayConfig(page_size=64, device_tokens=64 * 32, host_tokens=64 * 64, sync=True, limit=8)
    out = bench._compare(cfg, reqs, runs=1)
    assert set(out["seconds"]) == {"off", "sample", "strict"}
    s = out["strict_vs_off"]
    assert s["ratio"] == s["strict_s"] / s["off_s"]
    assert out["sample_vs_off"]["ratio"] == out["sample_vs_off"]["sample_s"] / out["sample_vs_off"]["off_s"]
