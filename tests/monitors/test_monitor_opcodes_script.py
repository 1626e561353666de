"""scripts/monitor_opcodes.py: per-function Python opcode counts of the bench's replay, off
against a verify mode, repeating exactly from run to run where nothing depends on time."""
from __future__ import annotations

import pytest
from scripts_loader import load_script


def _script():
    return load_script("monitor_opcodes")


@pytest.fixture
def trace_present():
    from hicache.bench import monitors as bench
    if not bench.TRACE.exists():
        pytest.skip("trace not present")


def test_counts_repeat_and_name_where_each_mode_adds_opcodes(trace_present):
    mod = _script()
    a = mod.compare("sample", "metadata_only", 12, 50, rate=0.0)
    b = mod.compare("sample", "metadata_only", 12, 50, rate=0.0)
    assert a == b                                   # (rate 0: nothing depends on the clock)
    assert a["off"] > 0 and a["extra"] == a["mode_opcodes"] - a["off"] > 0
    names = {r["function"] for r in a["by_function"]}
    # the listener that binds each event (sample mode's gate: C where it builds, no
    # bytecode; else the Python gate's), and the final cache check (its fused pass is C where
    # a compiler is: fused_whole.py, no bytecode)
    from hicache.monitors import gate
    py_gate = any(n.startswith("hicache/monitors/gate.py:__call__@") for n in names)
    assert py_gate == (gate.Gate is gate.PyGate)
    assert not any(n.startswith("hicache/monitors/runtime.py:__call__@") for n in names)
    assert any(n.startswith("hicache/monitors/runtime.py:_cache_check@") for n in names)
    extras = [r["extra"] for r in a["by_function"]]
    assert extras == sorted(extras, reverse=True)
    assert all(r["extra"] == r["mode"] - r["off"] for r in a["by_function"])
    strict = mod.compare("strict", "metadata_only", 12, 5)
    # (strict maps and checks every step, sample at rate 0 binds and records them: strict adds
    # more than twice as much, ~3x on this code)
    assert strict["off"] == a["off"] and strict["extra"] > 2 * a["extra"]
    assert len(strict["by_function"]) == 5


def test_by_event_counts_each_listener_call_inside_it(trace_present):
    """--by-event: the listener calls of each (spec, event), the bytecode and the Python
    calls one of them runs; repeating exactly in strict mode, and within the whole mode's
    extra opcodes (the listeners are part of them; cache checks and the bus are not)."""
    from hicache.monitors import native
    mod = _script()
    a = mod.events("strict", "metadata_only", 12)
    again = mod.events("strict", "metadata_only", 12)
    if native.module() is not None:
        assert a == again
    else:
        # (the maps' Python loops: the journal walk's passes follow the nodes' addresses,
        # a few dozen opcodes either way; what is counted and how often is the same)
        assert sorted((r["spec"], r["action"], r["calls"]) for r in a["by_event"]) == \
            sorted((r["spec"], r["action"], r["calls"]) for r in again["by_event"])
    rows = {(r["spec"], r["action"]): r for r in a["by_event"]}
    # every event reaches both monitors of the cache (HostTier, the device pages)
    assert {spec for spec, _ in rows} == {"HostTier", "CPSharding"}
    assert rows["HostTier", "RequestMatch"]["calls"] == rows["CPSharding", "RequestMatch"]["calls"] == 12
    assert a["listener_calls"] == sum(r["calls"] for r in a["by_event"])
    assert all(r["opcodes"] > 0 and r["python_calls_per_call"] >= 1 for r in a["by_event"])
    assert all(r["opcodes_per_call"] == round(r["opcodes"] / r["calls"], 1) for r in a["by_event"])
    ops = [r["opcodes"] for r in a["by_event"]]
    assert ops == sorted(ops, reverse=True)
    whole = mod.compare("strict", "metadata_only", 12, 0)
    assert 0 < a["opcodes"] < whole["extra"]


@pytest.mark.parametrize("argv, message", [
    (["--mode", "strict", "--rate", "0"], "--rate is sample mode's"),
    (["--rate", "1.5"], "--rate is sample mode's"),
    (["--mode", "strict", "--no-budget"], "--no-budget is sample mode's"),
    (["--limit", "0"], "--limit must be at least 1"),
])
def test_bad_options_are_refused_with_a_message(argv, message, capsys):
    mod = _script()
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err
