"""The bug zoo: a fault of each kind is caught at (or one step after) its faulty step, and
the same workload without it is quiet; cross-rank digests; verified mode and the plugin."""
from __future__ import annotations

import argparse
import os
import threading

import pytest

from hicache.monitors.digest import LocalCollective, contribution, verdict
from hicache.monitors.workload import WorkloadConfig, make_cache, plan, run_workload, serve_one
from hicache.monitors.zoo import pipeline_entry, pipeline_run, ranks_entry, runtime_entry, spec_entry
from hicache.storage.faulty import InjectedFault
from hicache.tla.itf import decode, read_itf

W = WorkloadConfig()


class FakeConfig:
    """What the plugin's hooks read of pytest's Config: the option's value, and the markers
    it registers (kept)."""

    def __init__(self, v=None):
        self.v = v
        self.markers: list[str] = []

    def getoption(self, name, default=None):
        return self.v

    def addinivalue_line(self, name, line):
        assert name == "markers"
        self.markers.append(line)


@pytest.mark.parametrize("bug,prop", [(8, "SlotInOneOwner"), (10, "HostEvict"), (7, "DeviceEvict")])
def test_runtime_fault_caught_at_its_step(bug, prop, tmp_path):
    r = runtime_entry(bug, 30, W, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, prop, 0, False), r


@pytest.mark.parametrize("bug,prop,steps", [(4, "RankStateDigestsEqual", 0), (1, "SameCollectiveSequence", 1)])
def test_rank_fault_caught_by_digest_exchange(bug, prop, steps, tmp_path):
    r = ranks_entry(bug, 10, W, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, prop, steps, False), r


def test_spec_twin_caught_by_action_check(tmp_path):
    r = spec_entry(13, 10, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "CompletionFire", 0, False), r
    assert r.detail.startswith("action CompletionFire at spec/DraftState.tla:")


def test_stage_applying_local_counts_caught_on_the_distributed_engine(tmp_path):
    """Bug 5 on real processes: the stage-1 rank's PPSync monitor stops it at the cache
    check where its own ready counts first differ from the agreed ones; the same seed
    without the fault raises nothing on any rank."""
    from hicache.monitors.zoo import stages_entry
    r = stages_entry(10, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "StageApply", 0, False), r
    # (conjunct 1 when nothing was agreed that round, 2 when another count was: timing decides)
    assert r.kind == "process" and r.detail.startswith("action StageApply at spec/PPSync.tla:13")
    assert "(rank 1," in r.detail
    meta = read_itf(r.trace)["#meta"]["violation"]
    assert meta["args"]["check"] == meta["args"]["fault_check"] and meta["args"]["rank"] == 1


def test_gather_firing_on_the_target_only_caught_on_real_ranks(tmp_path):
    """Bug 13 on the CP gather of 2 processes: the DraftState monitor stops rank 0 at the
    completion the switch fires without the dependent pools, the first event where the run
    departs from the same gather without it; that gather raises nothing."""
    from hicache.monitors.zoo import draft_entry
    r = draft_entry(1, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "CompletionFire", 0, False), r
    assert r.kind == "process" and r.detail.startswith("action CompletionFire at spec/DraftState.tla:")
    assert read_itf(r.trace)["#meta"]["violation"]["action"] == "CompletionFire"


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


def test_pytest_plugin_option(monkeypatch):
    from hicache import pytest_plugin, verified
    monkeypatch.delenv("HICACHE_VIOLATION_DIR", raising=False)
    cfg = FakeConfig("sample")
    try:
        pytest_plugin.pytest_configure(cfg)
        assert verified.current().mode == "sample"
        assert [m.split(":")[0] for m in cfg.markers] == ["hicache_unmonitored"]     # the marker, registered
        # traces go to a fresh temporary directory, not ./hicache-violations in the tree
        vdir = verified.current().violation_dir
        assert vdir != "hicache-violations" and os.path.basename(vdir).startswith("hicache-violations-")
        assert pytest_plugin.pytest_report_header(cfg) == f"hicache verified mode: sample (violation traces: {vdir})"
    finally:
        pytest_plugin.pytest_unconfigure(cfg)
    assert verified.current().mode == "off"


def test_pytest_plugin_leaves_no_empty_violation_directory(monkeypatch):
    """The session's temporary trace directory is removed at the end when no trace went
    there (every run left an empty hicache-violations-* behind); one holding a trace stays."""
    import shutil

    from hicache import pytest_plugin
    monkeypatch.delenv("HICACHE_VIOLATION_DIR", raising=False)
    clean, dirty = FakeConfig("sample"), FakeConfig("sample")
    for cfg in (clean, dirty):
        try:
            pytest_plugin.pytest_configure(cfg)
            vdir = cfg._hicache_verify_config.violation_dir
            assert os.path.isdir(vdir)
            if cfg is dirty:
                open(os.path.join(vdir, "HostTier-step1-0.itf.json"), "w").close()
        finally:
            pytest_plugin.pytest_unconfigure(cfg)
    try:
        assert not os.path.exists(clean._hicache_verify_config.violation_dir)
        assert os.listdir(dirty._hicache_verify_config.violation_dir) == ["HostTier-step1-0.itf.json"]
    finally:
        shutil.rmtree(dirty._hicache_verify_config.violation_dir)


def test_pytest_option_is_not_blocked_by_a_bad_hicache_verify(monkeypatch, tmp_path):
    """--hicache-verify=strict with HICACHE_VERIFY=bogus: the option is the mode, the variable
    is not used (importing hicache.verified enabled from it, and failed)."""
    import sys

    import hicache
    from hicache import pytest_plugin
    from hicache.monitors.runtime import Mode
    monkeypatch.setenv("HICACHE_VERIFY", "bogus")
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    # as in a fresh process, where the plugin's import of hicache.verified reads the variables
    monkeypatch.delitem(sys.modules, "hicache.verified", raising=False)
    monkeypatch.delattr(hicache, "verified", raising=False)
    cfg = FakeConfig("strict")
    try:
        pytest_plugin.pytest_configure(cfg)
        assert sys.modules["hicache.verified"].current().mode is Mode.STRICT
        assert cfg._hicache_verify_config.violation_dir == str(tmp_path)
    finally:
        pytest_plugin.pytest_unconfigure(cfg)


def test_pytest_plugin_reports_bad_settings_as_usage_errors(monkeypatch):
    """A bad HICACHE_VERIFY or HICACHE_VERIFY_RATE under the plugin is a usage error (pytest
    prints the line and exits 4), not an INTERNALERROR traceback."""
    from hicache import pytest_plugin
    monkeypatch.setenv("HICACHE_VERIFY", "loud")
    with pytest.raises(pytest.UsageError, match="^HICACHE_VERIFY: 'loud' is not one of"):
        pytest_plugin.pytest_configure(FakeConfig(None))
    monkeypatch.setenv("HICACHE_VERIFY", "sample")
    monkeypatch.setenv("HICACHE_VERIFY_RATE", "abc")
    with pytest.raises(pytest.UsageError, match="HICACHE_VERIFY_RATE"):
        pytest_plugin.pytest_configure(FakeConfig(None))
    # as in a fresh process, where importing hicache.verified is what reads the variables
    import sys

    import hicache
    monkeypatch.delitem(sys.modules, "hicache.verified")
    monkeypatch.delattr(hicache, "verified")
    monkeypatch.setenv("HICACHE_VERIFY_RATE", "2")
    with pytest.raises(pytest.UsageError, match="^HICACHE_VERIFY_RATE: 2.0 is not a fraction"):
        pytest_plugin.pytest_configure(FakeConfig("sample"))


def test_the_final_check_adds_a_closed_runtimes_counts_once_violation_or_not(tmp_path):
    """`final_check` (a runtime's close): the leader's counts added to its mode's, once per
    close, also when the check raises; what the pytest plugin's summary line says."""
    from hicache import verified
    from hicache.monitors.attach import closed_counts, monitor_report, open_count, summary_line
    from hicache.monitors.runtime import ProtocolViolation

    def delta(before, after):
        return {k: after[k] - before.get(k, 0) for k in after}
    verified.enable("sample", sample_rate=0.2, violation_dir=str(tmp_path))
    try:
        policy, reqs = plan(0, W)
        cache = make_cache(W, policy)
        before = closed_counts().get("sample", {})
        run_workload(cache, reqs)         # (which closes the cache at its end)
        cache.close()                     # (idempotent: tallied once)
        leader = monitor_report(cache)[0]
        got = delta(before, closed_counts()["sample"])
        assert got == {"runtimes": 1, "events": leader["events"], "checked": leader["checked"], "cache_checks": 1,
                       "budget_skipped": leader["budget_skipped"], "checking_s": pytest.approx(leader["checking_s"])}
        assert leader["events"] > 100 and leader["checking_s"] > 0
        # a monitored runtime not closed yet is open, and no longer once closed
        other = make_cache(W, policy)
        still = open_count()
        assert still >= 1
        other.close()
        assert open_count() == still - 1
        # a close whose final check finds a violation is tallied too (the violation raised after)
        cache = make_cache(W, policy)
        for toks, what in reqs[:5]:
            serve_one(cache, toks, what)
        cache.drain()
        assert cache.host.reserve(1)      # a slot RESERVED by nobody, with no event
        before = closed_counts()["sample"]
        with pytest.raises(ProtocolViolation):
            cache.close()
        assert delta(before, closed_counts()["sample"])["runtimes"] == 1
    finally:
        verified.disable()
    line = summary_line("sample", {"runtimes": 2, "events": 1234, "checked": 5, "cache_checks": 2,
                                   "budget_skipped": 7, "checking_s": 0.0031}, 1)
    assert line == ("hicache verified mode sample: 2 monitored caches or draft sets closed; their monitors saw 1,234 "
                    "events, checked 5 steps and ran 2 cache checks (7 drawn samples let go by the budget); checking "
                    "under the budget took 3.1 ms; 1 monitored runtime still open")
    one = summary_line("strict", {"runtimes": 1, "events": 1, "checked": 1, "cache_checks": 1, "budget_skipped": 1,
                                  "checking_s": 0.0}, 0)
    assert one == ("hicache verified mode strict: 1 monitored cache or draft set closed; their monitors saw 1 event, "
                   "checked 1 step and ran 1 cache check (1 drawn sample let go by the budget)")
    assert summary_line("sample", None, 2) == ("hicache verified mode sample: no monitored cache or draft set was "
                                               "closed; 2 monitored runtimes still open")


def test_pytest_option_off_holds_over_hicache_verify(monkeypatch):
    """--hicache-verify=off with HICACHE_VERIFY=strict in the environment: off (the cache
    attached its own strict monitor from the variable)."""
    from hicache import pytest_plugin, verified
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    pytest_plugin.pytest_configure(FakeConfig("off"))
    d = HiCache(CacheConfig(page_size=2, device_pages=4, host_pages=4, metadata_only=True))
    assert verified.monitor_of(d) is None and d.bus.listeners == []
    d.close()


_MARKED_SUITE = """
import pytest
from hicache import verified
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig


def _cache():
    return HiCache(CacheConfig(page_size=2, device_pages=4, host_pages=4, metadata_only=True))


@pytest.fixture
def made_in_setup():
    c = _cache()
    yield c
    c.close()


def test_unmarked(made_in_setup):
    c = _cache()
    assert verified.monitor_of(c) is not None and verified.monitor_of(made_in_setup) is not None
    c.close()


@pytest.mark.hicache_unmonitored
def test_marked(made_in_setup):
    c = _cache()
    assert verified.monitor_of(c) is None and verified.monitor_of(made_in_setup) is None
    c.close()


def test_unmarked_after_a_marked_one():
    c = _cache()
    assert verified.monitor_of(c) is not None
    c.close()
"""


def test_pytest_marker_leaves_a_tests_caches_unmonitored(tmp_path, monkeypatch):
    """`@pytest.mark.hicache_unmonitored` under --hicache-verify=strict: the caches a marked
    test creates, in its body and in its fixtures' setup, get no monitor; the tests around
    it keep theirs (a pytest run of its own, in a subprocess: the plugin's configure and
    unconfigure turn the process's verified mode on and off). The marker is registered: a
    run with --strict-markers accepts it."""
    import subprocess
    import sys
    monkeypatch.delenv("HICACHE_VERIFY", raising=False)

    def run_suite(text: str, *flags: str):
        (tmp_path / "test_marked_suite.py").write_text(text)
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags,
                               "--hicache-verify=strict", "--rootdir", str(tmp_path), str(tmp_path)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)
    run = run_suite(_MARKED_SUITE, "--strict-markers")
    assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout + run.stderr
    # the session's summary counts the monitored caches closed: the unmarked tests' three
    # (the marked test's two had no monitor), each with its final cache check
    assert ("hicache verified mode strict: 3 monitored caches or draft sets closed; their monitors saw 0 events, "
            "checked 0 steps and ran 3 cache checks\n") in run.stdout, run.stdout
    # without the marker's effect the marked test fails: the same suite with the marker
    # taken off the test
    run = run_suite(_MARKED_SUITE.replace("@pytest.mark.hicache_unmonitored\n", ""))
    assert run.returncode == 1 and "1 failed, 2 passed" in run.stdout, run.stdout + run.stderr
    # a suite whose monitored cache is never closed says so (kept alive to the session's end)
    run = run_suite(_MARKED_SUITE.split("@pytest.fixture")[0] + "KEPT = []\n\n\ndef test_left_open():\n"
                    "    KEPT.append(_cache())\n    assert verified.monitor_of(KEPT[0]) is not None\n")
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("hicache verified mode strict: no monitored cache or draft set was closed; 1 monitored runtime still "
            "open\n") in run.stdout, run.stdout


def test_bugzoo_cli_json(tmp_path, capsys):
    from hicache.cli import bugzoo
    args = argparse.Namespace(seeds=20, clean=2, only=[8], violation_dir=str(tmp_path), json=True, sample_rate=None)
    assert bugzoo.run(args) == 0
    import json
    obj = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert obj["clean_alarms"] == 0 and obj["clean_runs"] == 2
    assert obj["clean_shapes"] == ["zoo", "joining fetches", "failing copies", "acks held", "trace replays"]
    (b,) = obj["bugs"]
    assert {"name", "caught", "property", "steps_after_fault"} <= set(b)
    assert (b["caught"], b["property"], b["steps_after_fault"]) == (True, "SlotInOneOwner", 0)


def test_bugzoo_cli_reports_the_sample_mode_study_and_keeps_its_exit_status(tmp_path, capsys):
    """--sample-rate adds the study per rate (JSON and table) of the runtime bugs `--only`
    names; a miss in it is a measurement, so the exit status stays the strict zoo's."""
    import json

    from hicache.cli.main import main
    argv = ["bugzoo", "--only", "8", "--only", "4", "--seeds", "30", "--clean", "0", "--violation-dir", str(tmp_path),
            "--sample-rate", "0.01", "--sample-rate", "1"]
    assert main([*argv, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    low, every = obj["sample"]        # (bug 4 is a rank fault: no sample-mode entry)
    assert (low["bug"], low["rate"], every["bug"], every["rate"]) == (8, 0.01, 8, 1.0)
    # (bug 8's leaked slots last: at rate 0.01 some are seen only by the final cache check)
    assert low["fired"] == every["fired"] > 0 and low["at_check"] > 0 and low["missed"] == 0
    assert every["at_step"] == every["fired"] and every["properties"] == {"SlotInOneOwner": every["fired"]}
    # (why each alarming step was checked: at rate 1 every step is drawn; at 0.01 the rest
    # are the end's cache check)
    assert every["causes"] == {"the seeded draw": every["fired"]}
    assert low["causes"]["a cache check"] == low["at_check"] and sum(low["causes"].values()) == low["fired"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "sample mode at rate 0.01, no budget (workloads of seeds 0-29 the fault fired in):" in text
    assert (f"  8  AbortKeepsSlots {every['fired']:>18} {every['fired']:>5}     0     0      0  0 / 0   "
            f"(checked by: the seeded draw x{every['fired']})") in text


def test_a_sample_mode_alarm_before_the_fault_fired_is_a_false_alarm(tmp_path, capsys, monkeypatch):
    """The study counts a violation on a workload whose fault had not fired as a false alarm
    (by seed), not as a catch; the CLI names it and exits 1, as for the clean sweep's."""
    from types import SimpleNamespace

    from hicache.cli.main import main
    from hicache.monitors import zoo

    def alarmed(seed, cls, wcfg, vdir, rate):
        quiet = SimpleNamespace(fired=False, fault_seq=None)
        return zoo._SampleRun(quiet, SimpleNamespace(action="RequestMatch", property="TypeOK"), None, 3)
    monkeypatch.setattr(zoo, "_sample_run", alarmed)
    r = zoo.sample_entry(6, 3, W, str(tmp_path), 0.5)
    assert (r.fired, r.false_alarms, r.properties) == (0, [0, 1, 2], {})
    assert main(["bugzoo", "--only", "6", "--seeds", "2", "--clean", "0", "--violation-dir", str(tmp_path),
                 "--sample-rate", "0.5"]) == 1
    assert "false alarm: sample mode at rate 0.5, bug 6's workload of seed 1 raised before its fault fired" \
        in capsys.readouterr().out


def test_sample_mode_at_rate_one_catches_every_runtime_bug_at_a_sampled_step(tmp_path):
    """Sample mode at rate 1 checks every invariant after every event: each runtime bug of
    the zoo is caught at a sampled step in every workload it fires in, at its faulty step
    (the state each fault leaves breaks an invariant at once; strict mode's guards and
    frames see each fault at its step too)."""
    from hicache.monitors.faults import RUNTIME_FAULTS
    from hicache.monitors.zoo import run_sample_zoo
    results = run_sample_zoo([1.0], seeds=12, vdir=str(tmp_path))
    assert [r.bug for r in results] == sorted(RUNTIME_FAULTS)
    for r in results:
        assert r.fired > 0 and (r.at_step, r.at_check, r.runtime_first, r.missed) == (r.fired, 0, 0, 0), r
        assert r.false_alarms == [], r
        assert r.steps_after_fault == [0] * r.fired, r


def test_weighted_evictions_catch_more_transient_faults_than_as_many_uniform_checks(tmp_path, monkeypatch):
    """Bug 7's breach begins at an eviction and ends with its request: at the default rate,
    drawing evictions at their weight catches it in most workloads, where a uniform rate
    with at least as many checks (0.08, the weights emptied) catches it in few. (The map's
    trigger, which checks that eviction whatever the draw, is turned off: the draws alone.)"""
    from hicache.monitors.maps.host_tier import HostTierMap
    from hicache.monitors.runtime import Monitor
    from hicache.monitors.zoo import sample_entry
    monkeypatch.setattr(HostTierMap, "trigger_events", frozenset())
    checks = [0]
    checked = Monitor._checked_sample

    def counted(self, *a, **kw):
        checks[0] += 1
        return checked(self, *a, **kw)
    monkeypatch.setattr(Monitor, "_checked_sample", counted)
    weighted = sample_entry(7, 30, W, str(tmp_path), 0.05)
    weighted_checks, checks[0] = checks[0], 0
    monkeypatch.setattr(HostTierMap, "sample_weights", {})
    uniform = sample_entry(7, 30, W, str(tmp_path), 0.08)
    assert checks[0] >= weighted_checks > 0
    assert weighted.fired == uniform.fired > 0
    assert weighted.at_step > weighted.missed and uniform.at_step < uniform.missed
    assert weighted.at_step >= 2 * uniform.at_step, (weighted, uniform)


def test_sample_mode_at_a_low_rate_misses_a_transient_fault_but_for_the_maps_trigger(tmp_path, monkeypatch):
    """An anchor node evicted under a live prefetch (bug 7) breaks LockedNodesKept only until
    its request ends: with the draws alone (the map's trigger off), at rate 0.01 most of its
    workloads end with no alarm, which strict mode catches at the eviction itself. Each
    outcome is counted once, and the study is the seeds' alone (no budget): run again, it is
    the same. With the trigger, which checks an eviction of a node a prefetch is anchored
    at whatever the draw, every workload is caught at the eviction, as in strict mode."""
    from hicache.monitors.maps.host_tier import HostTierMap
    from hicache.monitors.zoo import sample_entry
    with monkeypatch.context() as m:
        m.setattr(HostTierMap, "trigger_events", frozenset())
        r = sample_entry(7, 30, W, str(tmp_path), 0.01)
        assert r.missed > r.fired // 2 and r.at_step + r.at_check + r.runtime_first + r.missed == r.fired > 0, r
        assert sample_entry(7, 30, W, str(tmp_path), 0.01) == r
    held = sample_entry(7, 30, W, str(tmp_path), 0.01)
    assert (held.fired, held.at_step, held.steps_after_fault) == (r.fired, r.fired, [0] * r.fired), held
    assert held.causes == {"the map's trigger": r.fired}
    assert runtime_entry(7, 30, W, str(tmp_path)).steps_after_fault == 0


@pytest.mark.parametrize("bug", [7, 10, 12])
def test_an_eviction_of_a_held_node_is_checked_whatever_the_draw_and_the_budget(bug, tmp_path):
    """Bugs 7, 10 and 12 each take what something in flight still holds (a prefetch's
    anchor, a load's host pages, a copy's destination slots) and emit an eviction: sample
    mode with nothing drawn (rate 0) and a budget spent at once checks that eviction all
    the same, as the map's trigger asks, and stops the run there, at the fault's event; the
    trigger asked for that check alone."""
    from hicache.monitors.attach import monitor_cache
    from hicache.monitors.faults import RUNTIME_FAULTS
    from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
    from hicache.monitors.workload import own_cache, plan, run_workload
    from hicache.monitors.zoo import _close_quietly
    for seed in range(30):
        policy, reqs = plan(seed, W)
        cache = own_cache(W, policy, cls=RUNTIME_FAULTS[bug])
        mon = monitor_cache(cache, VerifyConfig(mode="sample", sample_rate=0.0, sample_budget=1e-9, budget_window=1e-9,
                                                seed=seed, violation_dir=str(tmp_path)))
        try:
            run_workload(cache, reqs)
        except ProtocolViolation as e:
            assert cache.fired and e.arguments["seq"] == cache.fault_seq, (seed, e)
            assert e.action in ("DeviceEvict", "HostEvict") and (mon.triggered, mon.checked) == (1, 1)
            assert read_itf(e.trace_path)["#meta"]["violation"]["checked_because"] == "the map's trigger" \
                == e.checked_because
            _close_quietly(cache)       # (the faulted cache's own checks would raise at its close)
            return
        assert not cache.fired, f"seed {seed}: the fault fired and sample mode let it pass"
        cache.close()
    pytest.fail(f"bug {bug}'s fault fired in none of 30 workloads")


#: what each clean shape must exercise for its runs to mean what its name says: an event
#: predicate, counted over three seeds
_SHAPE_EXERCISES = {
    "zoo": lambda a, f: a == "DeviceEvict",
    "joining fetches": lambda a, f: a == "PrefetchFinish" and f.get("joined", 0) > 0,
    "failing copies": lambda a, f: a == "LoadBackFail" or (a == "BackupFinish" and f.get("ok") is False),
    # an ack whose op held a node split while it was in flight (or a load of several nodes)
    "acks held": lambda a, f: a in ("BackupFinish", "LoadBackFinish", "LoadBackFail") and len(f.get("held") or ()) > 1,
    # the host tier full under real traffic: evicting, and writing what it keeps to storage
    "trace replays": lambda a, f: a in ("HostEvict", "StorageBackupFinish"),
}


@pytest.mark.parametrize("name", sorted(_SHAPE_EXERCISES))
def test_the_clean_sweeps_shapes_raise_no_false_alarm(name, tmp_path):
    """`hicache bugzoo --clean` takes these shapes in turn: each runs three seeds under the
    strict monitors with no alarm, and exercises what it is for (the acks-held shape found
    the loads' frame read off their start a false alarm: 26 of 200 clean runs raised)."""
    from hicache.monitors.zoo import CLEAN_SHAPES, run_clean_shape
    (shape,) = [s for s in CLEAN_SHAPES if s.name == name]
    hits = []

    def listener(action, fields):
        if _SHAPE_EXERCISES[name](action, fields):
            hits.append(action)
    for seed in range(1000, 1003):
        assert run_clean_shape(shape, seed, str(tmp_path), listener=listener) is None
    assert hits


def test_bench_compares_the_three_modes_on_one_replay():
    from hicache.bench import monitors as bench
    from hicache.replay.driver import ReplayConfig, load_requests
    if not bench.TRACE.exists():
        pytest.skip("shared trace not present")
    reqs = load_requests(str(bench.TRACE), 64, 8)
    cfg = ReplayConfig(page_size=64, device_tokens=64 * 32, host_tokens=64 * 64, sync=True, limit=8)
    from hicache.monitors import runtime
    call, strict, final = runtime.Monitor.__call__, runtime.Monitor._strict_step, runtime.Monitor.cache_check
    out = bench._compare(cfg, reqs, runs=1)
    # the floor's stand-ins are gone afterwards
    assert (runtime.Monitor.__call__, runtime.Monitor._strict_step, runtime.Monitor.cache_check) == \
        (call, strict, final)
    assert set(out["seconds"]) == set(out["thread_cpu_seconds"]) == {"off", "sample", "strict"}
    s = out["strict_vs_off"]
    assert s["ratio"] == s["strict_s"] / s["off_s"]
    th = out["thread_cpu_seconds"]
    assert s["thread_cpu_ratio"] == th["strict"] / th["off"] and th["off"] > 0
    assert out["sample_vs_off"]["ratio"] == out["sample_vs_off"]["sample_s"] / out["sample_vs_off"]["off_s"]
    # one round: its paired ratio is that round's (here also the best-of: one replay each)
    for mode in ("sample", "strict"):
        p = out[f"{mode}_vs_off"]["paired"]
        assert p["rounds"] == 1 and p["q1"] == p["median"] == p["q3"] == out[f"{mode}_vs_off"]["ratio"]
    # the A/A comparison: off's second replay of the round against its first, as a mode's is
    aa = out["off_vs_off"]
    assert aa["off_s"] == s["off_s"] and aa["off_again_s"] > 0 and aa["ratio"] == aa["off_again_s"] / aa["off_s"]
    assert aa["paired"]["rounds"] == 1 and aa["paired"]["median"] == aa["ratio"] and aa["thread_cpu_ratio"] > 0
    assert aa["cpu_ratio"] > 0      # (the process CPU ratio too, as a mode's comparison has it)
    # default sample mode's checks, and the same rate with no budget, in the same runs
    assert out["sample_budget"] == 0.01
    checks = out["sample_checks"]
    assert set(checks) == {"spec/HostTier.tla", "spec/CPSharding.tla (device pages, CP = 1)"}
    counts = checks["spec/HostTier.tla"]
    assert counts["events"] == out["events"] and counts["cache_checks"] == 1
    # (sample mode checks the device pages at cache checks only: no event reaches it)
    assert checks["spec/CPSharding.tla (device pages, CP = 1)"]["events"] == 0
    assert counts["checked"] + counts["budget_skipped"] <= counts["events"]
    u = out["sample_unbudgeted_vs_off"]
    assert u["ratio"] == u["sample_s"] / s["off_s"] and u["thread_cpu_ratio"] > 0
    # the per-type profile covers every event the strict monitor saw, once
    prof = out["strict_us_by_event"]
    assert sum(v["events"] for v in prof.values()) >= out["events"] > 0
    assert {"RequestMatch", "RequestFinish"} <= set(prof)
    assert all(v["us_per_event"] > 0 and v["ms"] > 0 for v in prof.values())
    # ... split per monitor of the cache: HostTier's and the device pages' (CPSharding, CP = 1)
    assert set(out["strict_ms_by_monitor"]) == {"spec/HostTier.tla", "spec/CPSharding.tla (device pages, CP = 1)"}
    assert all(ms > 0 for ms in out["strict_ms_by_monitor"].values())
    # the attached floor ran the replay with the monitor attached (its listener got every
    # event the strict monitor saw, and more: LoadBackLayer binds to no step)
    floor = out["attached_floor"]
    assert floor["seconds"] > 0 and floor["ratio"] == floor["seconds"] / s["off_s"]
    assert floor["events_delivered"] >= out["events"] and floor["thread_cpu_ratio"] > 0


# ---------------------------------------------------------------------- bug 14
def test_key_derivation_mismatch_caught_at_its_step(tmp_path):
    from hicache.monitors.faults import PrefetchThreadDies
    from hicache.monitors.zoo import _run_single
    r = runtime_entry(14, 30, W, str(tmp_path))
    assert (r.caught, r.property, r.steps_after_fault, r.clean_alarm) == (True, "OneKeyDerivation", 0, False), r
    cache, exc = _run_single(r.seed, PrefetchThreadDies, W, str(tmp_path))
    # exists announced a page get/set do not have; get's None for it killed the thread
    assert isinstance(cache.prefetcher.died_of, AttributeError)
    assert exc.kind == "runtime" and exc.action in ("PrefetchFinish", "RequestAbort")
    assert exc.history[-1].args["seq"] == cache.fault_seq
    (breach,) = cache.storage.breaches
    assert breach[0] == "hicache-prefetch"
    doc = read_itf(exc.trace_path)
    assert doc["#meta"]["violation"]["property"] == "OneKeyDerivation"


def test_key_derivation_mismatch_caught_on_every_seed_it_fires(tmp_path):
    from hicache.monitors.faults import PrefetchThreadDies
    from hicache.monitors.zoo import _run_single
    fired = 0
    for seed in range(8):
        cache, exc = _run_single(seed, PrefetchThreadDies, W, str(tmp_path))
        if not cache.fired:
            assert exc is None
            continue
        fired += 1
        assert exc is not None and exc.property == "OneKeyDerivation", seed
        assert exc.history[-1].args["seq"] == cache.fault_seq, seed
    assert fired >= 2


def test_a_dead_prefetch_thread_is_an_error_not_a_hang(tmp_path):
    """Bug 14's dead thread leaves an abandoned prefetch that nothing completes. Off, the
    drain that waits for it raises WorkerDied (it waited forever); in sample mode with every
    drawn sample let go by the budget, the worker watch still runs at each drawn sample and
    names the breach at the step strict mode does; at rate 0 (no sample at all) the drain's
    cache check names it before WorkerDied would."""
    from hicache import verified
    from hicache.monitors.attach import monitor_cache
    from hicache.monitors.faults import PrefetchThreadDies
    from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
    from hicache.monitors.workload import make_cache, plan, run_workload
    from hicache.runtime.transfer import WorkerDied
    verified.disable()           # (importing it turned verified mode on)
    wcfg = WorkloadConfig(requests=40)
    policy, reqs = plan(0, wcfg)
    cache = make_cache(wcfg, policy, cls=PrefetchThreadDies)
    # (on a daemon thread, bounded: a regression hangs it, not the suite)
    raised: list = []

    def run() -> None:
        try:
            run_workload(cache, reqs)
        except BaseException as e:  # noqa: BLE001 - what the run raised is the result
            raised.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the drain hung on the dead prefetch thread's operation"
    (e,) = raised
    assert isinstance(e, WorkerDied) and "prefetch worker's thread has ended" in str(e)
    assert not cache.prefetcher._thread.is_alive()
    steps = {}
    for budget in (None, 1e-9):
        cache = make_cache(wcfg, policy, cls=PrefetchThreadDies)
        mon = monitor_cache(cache, VerifyConfig(mode="sample", sample_rate=1.0, sample_budget=budget,
                                                violation_dir=str(tmp_path)))
        with pytest.raises(ProtocolViolation) as exc:
            run_workload(cache, reqs)
        assert exc.value.property == "OneKeyDerivation"
        steps[budget] = exc.value.step
        if budget is not None:
            # (the first sample too: before any check it waits for a full bucket)
            assert mon.checked == 0 and mon.budget_skipped == exc.value.step
    assert steps[None] == steps[1e-9]
    verified.enable("sample", sample_rate=0.0, violation_dir=str(tmp_path))
    try:
        cache = make_cache(wcfg, policy, cls=PrefetchThreadDies)
        with pytest.raises(ProtocolViolation) as exc:
            run_workload(cache, reqs)
        assert exc.value.property == "OneKeyDerivation" and exc.value.action == "cache_check"
    finally:
        verified.disable()


def test_key_audit_follows_fetches():
    from hicache.monitors.workers import KeyAudit
    from hicache.monitors.workload import MemStore
    store = MemStore()
    store.data.update({k: b"x" for k in "abcd"})
    a = KeyAudit(store)
    # a fetch: exists in two batches, then gets over what they confirmed
    assert a.batch_exists(["a", "b"]) == 2 and a.batch_exists(["c", "z"]) == 1
    a.batch_get(["a", "b"])
    a.batch_get(["c"])
    assert a.breaches == []
    # the next fetch starts over: "a" was confirmed by the last fetch, not by this one
    assert a.batch_exists(["d"]) == 1
    a.batch_get(["d", "a"])
    assert [k for _, k in a.breaches] == ["a"]
    a.batch_get(["z"])          # a key exists found absent
    assert [k for _, k in a.breaches] == ["a", "z"]


def _faulty_backend_run(seed: int, cls, tmp_path):
    """The seeded workload over a backend that returns None or raises on a third of its calls."""
    from hicache.monitors.workload import make_cache, plan
    from hicache.monitors.zoo import run_monitored
    from hicache.storage.faulty import FaultConfig, FaultyStorage
    policy, reqs = plan(seed, W)
    cache = make_cache(W, policy, cls=cls)
    cache.storage = FaultyStorage(cache.storage, FaultConfig(seed=seed, p_none=0.3, p_raise=0.3))
    return cache, run_monitored(cache, reqs, str(tmp_path))


@pytest.mark.parametrize("seed", range(6))
def test_runtime_survives_backend_errors(seed, tmp_path):
    from hicache.runtime.cache import HiCache
    cache, exc = _faulty_backend_run(seed, HiCache, tmp_path)
    assert exc is None
    st = cache.storage.stats()
    assert cache.metrics.prefetch_requests > 0 and st.get("fault_none", 0) + st.get("fault_raise", 0) > 0


def test_backend_none_kills_the_reference_prefetch_thread(tmp_path):
    # one key derivation, but the reference's unchecked reads: a backend None kills the thread
    from hicache.monitors.faults import UncheckedPrefetch
    died = []
    for seed in range(6):
        cache, exc = _faulty_backend_run(seed, UncheckedPrefetch, tmp_path)
        assert cache.storage.breaches == []
        if cache.fired:
            assert exc is not None and exc.property == "InFlightOpsHaveWorker"
            assert exc.history[-1].args["seq"] == cache.fault_seq      # at the faulty step
            died.append(type(cache.prefetcher.died_of))
        else:
            assert exc is None
    assert died and set(died) <= {TypeError, AttributeError, InjectedFault}


# ---------------------------------------------------------------------- traces
@pytest.mark.parametrize("bug", [1, 2])
def test_rank_violation_writes_a_merged_trace(bug, tmp_path):
    r = ranks_entry(bug, 10, W, str(tmp_path))
    doc = read_itf(r.trace)
    meta, states = doc["#meta"], doc["states"]
    assert meta["violation"]["kind"] == "digest" and meta["violation"]["property"] == r.property
    assert meta["ranks"] == [0, 1] and doc["vars"][-2:] == ["collective", "view"]
    assert states[-1]["#meta"]["action"] == "DigestExchange" and "rank" not in states[-1]["#meta"]
    assert {s["#meta"]["rank"] for s in states[:-1]} == {0, 1}
    # every variable maps each rank to its value
    for v in ("len", "slot", "req"):
        assert set(decode(states[-1][v]).d) == {0, 1}
    div = meta["violation"]["divergence"]
    assert div["diverging_ranks"] == [1] and div["reference_rank"] == 0
    calls = decode(states[-1]["collective"]).d
    assert {str(k): c for k, c in calls.items()} == div["calls"]
    assert (calls[0] == calls[1]) == (r.property == "RankStateDigestsEqual")


def test_divergence_names_the_minority():
    from hicache.monitors.digest import Contribution, divergence
    cs = [Contribution(0, "check", 3, {"a": 1, "b": 2}), Contribution(1, "check", 3, {"a": 1, "b": 5}),
          Contribution(2, "check", 3, {"a": 1, "b": 5})]
    d = divergence(cs)
    assert (d["reference_rank"], d["diverging_ranks"], d["fields"]) == (1, [0], ["b"])
    d = divergence([Contribution(0, "x", 1, {"a": 1}), Contribution(1, "y", 1, {"a": 1})])
    assert (d["reference_rank"], d["diverging_ranks"], d["fields"]) == (0, [1], [])
    assert d["calls"] == {"0": "x#1", "1": "y#1"}


def test_monitor_traces_record_constants_and_config(tmp_path):
    from hicache.tla.cfg import load_cfg
    r = runtime_entry(8, 30, W, str(tmp_path))
    meta = read_itf(r.trace)["#meta"]
    consts = {k: decode(v) for k, v in meta["constants"].items()}
    assert set(consts) == {"NNodes", "NSlots", "NLayers", "NReqs", "Policies", "BugEvictDuringLoad", "BugAbortLeak"}
    assert consts["NSlots"] == W.host_pages and consts["BugAbortLeak"] is False
    assert meta["config"] == {"mode": "strict", "seed": 0, "sample_rate": 0.05, "sample_budget": 0.01, "budget_window": 1.0,
                              "budget_skipped": 0, "history": 64, "sample_probabilities": {}, "sample_triggers": [],
                              "triggered": 0, "action_checks": False}
    s = spec_entry(13, 10, str(tmp_path))
    meta = read_itf(s.trace)["#meta"]
    assert {k: decode(v) for k, v in meta["constants"].items()} == dict(load_cfg("spec/DraftState.cfg").constants)
    assert meta["config"]["action_checks"] is True


def test_bugzoo_cli_refuses_what_it_cannot_run(capsys):
    """--only a class the zoo does not have, --seeds 0, --clean -1: a usage error naming the
    flag (the CLI's usage exit code, TLC's 150) before anything runs, not an empty or
    negative report."""
    from hicache.cli.main import EXIT_USAGE, main
    from hicache.monitors.zoo import bug_classes
    assert bug_classes() == list(range(1, 15))
    assert main(["bugzoo", "--only", "3", "--only", "99"]) == EXIT_USAGE
    assert "--only: 99 is not a bug class of the zoo (1-14)" in capsys.readouterr().err
    for argv, msg in ((["--seeds", "0"], "--seeds: must be >= 1, got 0"),
                      (["--clean", "-1"], "--clean: must be >= 0, got -1"),
                      (["--seeds", "x"], "--seeds: 'x' is not an integer"),
                      (["--sample-rate", "0"], "--sample-rate: must be a fraction in (0, 1], got 0"),
                      (["--sample-rate", "nan"], "--sample-rate: must be a fraction in (0, 1], got nan"),
                      (["--sample-rate", "x"], "--sample-rate: 'x' is not a number")):
        with pytest.raises(SystemExit) as e:
            main(["bugzoo", *argv])
        assert e.value.code == EXIT_USAGE and msg in capsys.readouterr().err


def test_a_violation_whose_trace_cannot_be_written_still_raises_and_says_so(tmp_path):
    """The violation directory is a file: the monitor still raises at the faulty step, and
    its message (and `trace_error`) names the directory and the reason the trace was not
    written; the bugzoo CLI refuses such a directory before running anything."""
    from hicache.cli.main import EXIT_USAGE, main
    from hicache.monitors.attach import unmonitored
    from hicache.monitors.faults import RUNTIME_FAULTS
    from hicache.monitors.zoo import _run_single
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    exc = None
    # (the zoo's own monitor alone: under `--hicache-verify` the session's would attach too,
    # write its trace to its own directory and raise first)
    with unmonitored():
        for seed in range(30):
            _, exc = _run_single(seed, RUNTIME_FAULTS[6], W, str(blocked))
            if exc is not None:
                break
    assert exc is not None and exc.property == "SlotInOneOwner" and exc.trace_path is None
    assert exc.trace_error.startswith(f"{blocked}: ") and f"trace: not written ({blocked}: " in str(exc)
    assert main(["bugzoo", "--only", "6", "--clean", "0", "--violation-dir", str(blocked)]) == EXIT_USAGE


def test_bench_draft_long_run_checks_every_step_in_a_bounded_window():
    """`hicache bench monitors`' long DraftState run: each iteration's backup and read
    load-back retire, so strict checks all 13 steps of each and the window stays at its
    first width; the report's figures come from those runs."""
    from hicache.bench import draft_run
    out = draft_run.run(blocks=2, per_block=20)
    assert (out["blocks"], out["iterations_per_block"]) == (2, 20)
    for mode in ("sample", "strict"):
        m = out[mode]
        assert len(m["block_seconds"]) == 2 and m["records_left"] == 0 and m["window"] == 32
    strict, sample = out["strict"], out["sample"]
    assert strict["steps"] == strict["checked"] == 40 * 13
    # sample mode: every retire (2 per iteration) checked, and not every step
    assert sample["steps"] == 40 * 13 and 2 * 40 <= sample["checked"] < sample["steps"]


def test_paired_ratios_are_per_round_and_their_quartiles():
    from hicache.bench.monitors import _paired
    # round 2's mode replay met a slow spell its off replay did not: the median pairs rounds
    p = _paired([1.1, 3.0, 1.3, 1.2, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert p["rounds"] == 5 and abs(p["median"] - 1.2) < 1e-12
    assert abs(p["q1"] - 1.1) < 1e-12 and abs(p["q3"] - 1.3) < 1e-12
    # each ratio is of one round: a fast mode replay is not set against another round's off
    assert _paired([2.0, 4.0], [1.0, 4.0])["median"] == 1.5
    assert _paired([], []) == {"rounds": 0} and _paired([1.0], [0.0]) == {"rounds": 0}


def test_the_fitting_replay_holds_the_requests_the_kv_bytes_replay_serves_uncached():
    """`kv_bytes_fitting`: the same requests on a device tier that holds them. Its uncached
    requests are exactly those longer than its device tier (counted from the keys alone);
    the kv_bytes replay serves more of them uncached."""
    from hicache.bench import monitors as bench
    from hicache.monitors.attach import unmonitored
    from hicache.replay.driver import load_requests, replay_requests
    if not bench.TRACE.exists():
        pytest.skip("shared trace not present")
    reqs = load_requests(str(bench.TRACE), bench.PAGE, 30)
    too_long = sum(1 for key, _ in reqs if len(key) // (bench.PAGE * 8) > bench.FIT_DEVICE_PAGES)
    with unmonitored():        # (whatever mode the session runs in: no monitor needed)
        fit = replay_requests(bench.fitting_config(30), reqs)
        small = replay_requests(bench.replay_config(30, "small"), reqs)
    assert fit["uncached_requests"] == too_long < small["uncached_requests"]
    assert fit["corrupt_pages"] == 0


def test_a_clean_sweeps_alarm_is_reported_with_its_workload_trace_and_call(tmp_path, capsys, monkeypatch):
    """An alarm in the clean sweep (here planted: a shape whose run carries bug 6's fault)
    fails the command, and its report says which seed and shape, the property and step, the
    workload in words, the trace written and the call that runs it again."""
    from hicache.cli import bugzoo
    from hicache.monitors import zoo
    from hicache.monitors.attach import unmonitored
    from hicache.monitors.faults import RUNTIME_FAULTS

    class Planted:
        name = "planted"

        def run(self, seed, vdir, listener=None):
            for s in range(30):
                _, exc = zoo._run_single(s, RUNTIME_FAULTS[6], W, vdir)
                if exc is not None:
                    return exc
            raise AssertionError("bug 6's fault fired on none of 30 seeds")

        def describe(self, seed):
            return f"the zoo's workload with bug 6's fault, seed {seed}"
    monkeypatch.setattr(zoo, "CLEAN_SHAPES", (Planted(),))
    args = argparse.Namespace(seeds=20, clean=1, only=[8], violation_dir=str(tmp_path), json=False)
    with unmonitored():
        assert bugzoo.run(args) == 1
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("  false alarm:")]
    assert line.startswith("  false alarm: seed 1000 (planted): SlotInOneOwner at ")
    assert "workload: the zoo's workload with bug 6's fault, seed 1000" in line
    trace = line.split("; trace: ")[1].split(";")[0]
    assert trace.startswith(str(tmp_path)) and os.path.exists(trace)
    assert line.endswith("; again: hicache.monitors.zoo.run_clean_shape(CLEAN_SHAPES[0], 1000, violation_dir)")
    assert "false alarms: 1" in out


def test_a_trace_shape_describes_the_window_and_configuration_its_seed_replays():
    from hicache.monitors.zoo import TraceShape
    shape = TraceShape("trace replays", requests=100)
    for seed in (1004, 1009):
        trace, first, cfg = shape.config(seed)
        words = shape.describe(seed)
        assert words.startswith(f"{trace.name} requests {first}-{first + 99}, page {cfg.page_size}, ")
        assert f"{cfg.device_tokens // cfg.page_size} device / {cfg.host_tokens // cfg.page_size} host pages" in words
        assert cfg.write_policy.value in words and ("synced" if cfg.sync else "polled") in words
    assert shape.config(1004) == shape.config(1004)      # (a seed is one replay, run again)
    with pytest.raises(ValueError, match="requests must be >= 1"):
        TraceShape("empty", requests=0)
