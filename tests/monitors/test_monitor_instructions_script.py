"""scripts/monitor_instructions.py: its replay child, run natively (callgrind's client
requests do nothing outside valgrind), and the reading of callgrind's output; the run
under valgrind itself takes minutes and is not part of the suite."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_loader import load_script, script_path

SCRIPT = script_path("monitor_instructions")

#: the tests that build the toggle library
needs_toggle = pytest.mark.skipif(shutil.which("cc") is None or not Path("/usr/include/valgrind/callgrind.h").exists(),
                                  reason="needs a C compiler and valgrind's callgrind.h")


def _script():
    return load_script("monitor_instructions")


def test_summary_reads_callgrinds_total_and_refuses_a_file_without_one(tmp_path):
    mod = _script()
    out = tmp_path / "cg.1-01"
    out.write_text("version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 461499987\ntotals: 461499987\n")
    assert mod.summary(out) == 461499987
    out.write_text("version: 1\nevents: Ir\n")
    with pytest.raises(ValueError, match="no summary"):
        mod.summary(out)


def test_totals_reads_each_event_of_a_cache_simulation_and_the_caches_simulated(tmp_path):
    mod = _script()
    out = tmp_path / "cg.1-01"
    out.write_text("version: 1\ncreator: callgrind-3.19.0\n"
                   "desc: I1 cache: 32768 B, 64 B, 8-way associative\n"
                   "desc: D1 cache: 49152 B, 64 B, 12-way associative\n"
                   "desc: LL cache: 2097152 B, 64 B, 16-way associative\n"
                   "desc: Timerange: Basic block 1 - 2\n"
                   "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n"
                   "summary: 415 131 65 11 4 1 7 2 3\n")
    got = mod.totals(out)
    assert got == {"Ir": 415, "Dr": 131, "Dw": 65, "I1mr": 11, "D1mr": 4, "D1mw": 1, "ILmr": 7, "DLmr": 2, "DLmw": 3}
    # (the instructions are the first event's, Ir, with or without the simulation)
    assert mod.summary(out) == 415
    assert mod.simulated_caches(out) == {"I1": "32768 B, 64 B, 8-way associative",
                                         "D1": "49152 B, 64 B, 12-way associative",
                                         "LL": "2097152 B, 64 B, 16-way associative"}
    # each miss event the report names is one callgrind writes, each named once
    assert set(mod.MISSES) <= set(got) and len(set(mod.MISSES.values())) == len(mod.MISSES)
    # callgrind leaves out a summary's trailing zeros: they read as 0
    out.write_text("events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nsummary: 415 131 65 11\n")
    assert mod.totals(out) == {"Ir": 415, "Dr": 131, "Dw": 65, "I1mr": 11, "D1mr": 0, "D1mw": 0, "ILmr": 0,
                               "DLmr": 0, "DLmw": 0}
    # a summary with more counts than events is refused, not read short
    out.write_text("events: Ir I1mr\nsummary: 415 3 9\n")
    with pytest.raises(ValueError, match="no summary"):
        mod.totals(out)


@pytest.mark.parametrize("argv, said", [
    (["--cache-sim", "--mode", "strict"], "--cache-sim counts whole replays: add --whole"),
    (["--whole", "--cache-sim", "--ll-bytes", "3000000"], "--ll-bytes 3000000: a power of two of at least 65536"),
    (["--whole", "--cache-sim", "--ll-bytes", "32768"], "--ll-bytes 32768: a power of two of at least 65536"),
])
def test_the_cache_simulation_options_are_refused_before_valgrind_runs(argv, said):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert said in proc.stderr


@needs_toggle
@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_the_child_replays_with_the_monitors_wrapped_and_counts_their_calls(tmp_path, monkeypatch, mode):
    from hicache.bench import monitors as bench
    from hicache.monitors import runtime
    if not bench.TRACE.exists():
        pytest.skip("trace not present")
    mod = _script()
    lib = mod.build_toggle(tmp_path)
    report = tmp_path / "report.json"
    names = ("__call__", "_strict_step", "cache_check", "__init__")
    kept = tuple(vars(runtime.Monitor)[name] for name in names)
    # (the child wraps all four for its replays, the listeners through
    # runtime.listeners_wrapped, and puts them back; should it not, the rest of the
    # session's tests get the originals back all the same)
    for name, fn in zip(names, kept):
        monkeypatch.setattr(runtime.Monitor, name, fn)
    args = type("A", (), {"lib": str(lib), "mode": mode, "limit": 8, "replays": 2, "report": str(report)})()
    mod.child(args)
    got = json.loads(report.read_text())
    # two replays of 8 requests, each request's match and finish at least: events reached
    # the wrapped listener (strict: both monitors of the cache listen)
    assert got["listener_calls"] >= 2 * 2 * 8
    # strict checks every event; sample mode at least its cache checks, one per replay
    assert got["cache_checks"] >= 2
    if mode == "strict":
        assert got["steps_checked"] >= got["listener_calls"] // 2
    # every listener call, and each cache check not nested in another, is collected once
    assert got["listener_calls"] + 2 <= got["collected_calls"] <= got["listener_calls"] + got["cache_checks"]
    assert tuple(vars(runtime.Monitor)[name] for name in names) == kept


@needs_toggle
@pytest.mark.parametrize("within", [
    "hicache.monitors.maps.host_tier_inc:IncrementalHostTierMap.sync",         # the class's own method
    "hicache.monitors.maps.host_tier_inc:IncrementalHostTierMap.bind",         # an override of the base's
    "hicache.monitors.generated.host_tier:inc_all",                            # a module's function
])
def test_the_filters_select_the_listener_calls_and_put_the_target_back(tmp_path, monkeypatch, within):
    from hicache.bench import monitors as bench
    from hicache.monitors import runtime
    if not bench.TRACE.exists():
        pytest.skip("trace not present")
    mod = _script()
    owner, name = mod.resolve(within)
    before = vars(owner)[name]
    for attr in ("__call__", "cache_check", "__init__"):
        monkeypatch.setattr(runtime.Monitor, attr, getattr(runtime.Monitor, attr))
    report = tmp_path / "report.json"
    args = type("A", (), {"lib": str(mod.build_toggle(tmp_path)), "mode": "strict", "limit": 8, "replays": 2,
                          "report": str(report), "events": "RequestMatch", "spec": "HostTier",
                          "within": within})()
    mod.child(args)
    got = json.loads(report.read_text())
    # one match per request, one HostTier monitor per cache: exactly the selected calls,
    # and each of them reached the target once (bind, sync and the fused check run once per step)
    assert got["listener_calls"] == 2 * 8
    assert got["within_calls"] == 2 * 8
    # (what the toggle cost is subtracted for: the target's calls, not the listener calls)
    assert got["collected_calls"] == got["within_calls"]
    assert vars(owner)[name] is before


def test_resolve_refuses_what_is_not_there_and_classmethods():
    mod = _script()
    for bad in ("hicache.monitors.maps.host_tier_inc:NoSuchMap.sync", "no.such.module:f",
                "hicache.monitors.runtime:VerifyConfig.from_env"):
        with pytest.raises(SystemExit, match="--within"):
            mod.resolve(bad)


def test_a_misspelt_spec_is_refused_before_valgrind_runs():
    # (the run under valgrind would take minutes: the refusal must come first, whether or
    # not valgrind is installed here)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--spec", "HostTeir"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "--spec 'HostTeir': no such spec (one of HostTier, CPSharding" in proc.stderr


@needs_toggle
def test_the_toggle_library_builds_when_run_from_another_folder(tmp_path):
    # as a user runs it (`python scripts/monitor_instructions.py` from anywhere): only the
    # installed package is importable, not the checkout's top-level folders
    code = ("import importlib.util, pathlib, sys\n"
            f"spec = importlib.util.spec_from_file_location('mi', {str(SCRIPT)!r})\n"
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "print(mod.build_toggle(pathlib.Path('.')).name)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert proc.stdout.strip() == "libcg_toggle.so" and (tmp_path / "libcg_toggle.so").exists()


def test_the_calibration_toggles_around_each_shape_and_dumps_each_apart():
    """What `net` subtracts is measured on CALIBRATION_CALLS calls of each collected-call
    shape, each set dumped to its own part: toggles in pairs, one dump after each shape."""
    mod = _script()
    calls: list[str] = []

    class FakeLib:
        def hicache_cg_toggle(self):
            calls.append("toggle")

        def hicache_cg_dump(self):
            calls.append("dump")
    mod.calibrate(FakeLib())
    n = mod.CALIBRATION_CALLS
    assert calls == (["toggle"] * (2 * n) + ["dump"]) * 2


@pytest.mark.parametrize("argv, message", [
    (["--whole", "--spec", "HostTier"], "--whole counts whole replays: no --events, --spec or --within"),
    (["--mode", "off"], "--mode off checks nothing: count it with --whole"),
    (["--mode", "floor"], "--mode floor checks nothing: count it with --whole"),
    (["--mode", "sample_floor"], "--mode sample_floor checks nothing: count it with --whole"),
    (["--rate", "0"], "--rate is sample mode's, between 0 and 1"),
    (["--mode", "sample", "--rate", "1.5"], "--rate is sample mode's, between 0 and 1"),
    (["--no-budget"], "--no-budget is sample mode's"),
    (["--around", "hicache.monitors.attach:attach"], "--around counts inside whole replays: add --whole"),
    (["--whole", "--around", "hicache.monitors.attach:no_such_function"],
     "--around 'hicache.monitors.attach:no_such_function': hicache.monitors.attach has no attribute "
     "'no_such_function'"),
])
def test_whole_replay_counts_refuse_what_they_cannot_mean_before_valgrind_runs(argv, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr


@needs_toggle
@pytest.mark.parametrize("mode", ["off", "floor", "sample_floor", "strict"])
@pytest.mark.parametrize("replay", ["kv_bytes", "kv_bytes_fitting"])
def test_the_whole_replay_child_collects_each_replay_once_and_wraps_no_monitor(tmp_path, mode, replay):
    from hicache.bench import monitors as bench
    from hicache.monitors import runtime
    from hicache.replay import driver
    before = driver.replay_requests
    if not bench.TRACE.exists():
        pytest.skip("trace not present")
    mod = _script()
    names = ("__call__", "_strict_step", "cache_check", "__init__")
    kept = tuple(vars(runtime.Monitor)[name] for name in names)
    report = tmp_path / "report.json"
    args = type("A", (), {"lib": str(mod.build_toggle(tmp_path)), "mode": mode, "limit": 8, "replays": 3,
                          "report": str(report), "whole": True, "replay": replay})()
    seen = []

    def watched(cfg, *a, **kw):
        seen.append(cfg)
        return before(cfg, *a, **kw)
    driver.replay_requests = watched
    try:
        mod.child(args)
        # (collection is on around the driver's replay alone, not the bench's collection
        # before it: the driver's function wrapped for the replays and put back)
        assert driver.replay_requests is watched
    finally:
        driver.replay_requests = before
    # two uncollected replays (imports, then instrumentation on) and the three collected,
    # all of the replay asked for
    assert len(seen) == 5 and all(cfg == mod.REPLAYS[replay](bench, 8) for cfg in seen)
    assert json.loads(report.read_text()) == {"listener_calls": 0, "collected_calls": 3}
    assert tuple(vars(runtime.Monitor)[name] for name in names) == kept


@needs_toggle
@pytest.mark.parametrize("mode, around, calls_per_replay", [
    # one cache a replay: one attach (its companions attached inside it), and one final
    # check (the device pages' check runs inside HostTier's: collected once)
    ("sample", "hicache.monitors.attach:attach", 1),
    ("strict", "hicache.monitors.runtime:Monitor.cache_check", 1),
    ("off", "hicache.monitors.runtime:Monitor.cache_check", 0),
])
def test_the_whole_replay_child_collects_around_the_target_alone_and_puts_it_back(tmp_path, mode, around,
                                                                                   calls_per_replay):
    from hicache.bench import monitors as bench
    from hicache.replay import driver
    if not bench.TRACE.exists():
        pytest.skip("trace not present")
    mod = _script()
    owner, name = mod.resolve(around, "--around")
    before, replay = vars(owner)[name], driver.replay_requests
    report = tmp_path / "report.json"
    args = type("A", (), {"lib": str(mod.build_toggle(tmp_path)), "mode": mode, "limit": 8, "replays": 3,
                          "report": str(report), "whole": True, "replay": "kv_bytes", "around": around})()
    mod.child(args)
    n = 3 * calls_per_replay
    assert json.loads(report.read_text()) == {"listener_calls": 0, "collected_calls": n, "around_calls": n}
    # (the target put back, and the replay not wrapped: collection was around the target alone)
    assert vars(owner)[name] is before and driver.replay_requests is replay


def test_patched_puts_back_a_staticmethod_and_removes_an_inherited_methods_copy():
    mod = _script()

    class Base:
        def f(self):
            return "base"

    class Sub(Base):
        @staticmethod
        def g():
            return "g"
    seen = []

    def wrap(target):
        def wrapper(*a):
            seen.append(target.__name__)
            return target(*a)
        return wrapper
    with mod.patched(Sub, "f", wrap), mod.patched(Sub, "g", wrap):
        assert Sub().f() == "base" and Sub.g() == "g" and Sub().g() == "g"
        assert "f" in vars(Sub)
    assert seen == ["f", "g", "g"]
    assert "f" not in vars(Sub) and Sub().f() == "base"
    assert isinstance(vars(Sub)["g"], staticmethod)
    # (put back when the block raises too)
    with pytest.raises(KeyError), mod.patched(Base, "f", wrap):
        raise KeyError
    assert Base().f() == "base" and seen == ["f", "g", "g"]
