"""The listener a bus is given (`Monitor.listener`) and the instrumentation point over it
(`runtime.listeners_wrapped`): strict mode's bus calls its native step (monitors/gate.py's
StrictStep), or `_strict_step` itself where that is not built, gap-counted sample mode's its
gate (monitors/gate.py), any other monitor's its `__call__`; each sees the same steps as the
monitor called as an instance, and a wrapper sees each event once."""
from __future__ import annotations

import collections

import pytest

from hicache.monitors import runtime
from hicache.monitors.gate import Gate, StrictStep
from hicache.monitors.runtime import LISTENERS, Monitor, listeners_wrapped

from tests.monitors.tiny_cache import serve, tiny_cache

#: a workload that moves every tier: matches, inserts, backups, evictions, load-backs
REQUESTS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9], [1, 2, 3, 4], [7, 8], [10, 11, 12, 13]]


def _drive(c) -> None:
    for toks in REQUESTS:
        serve(c, toks)
    c.evict_device(2)
    serve(c, [1, 2, 3, 4])


def _counting(seen: collections.Counter):
    """A `listeners_wrapped` wrapper that counts each monitor's calls in `seen`."""
    def counting(listener):
        def counted(self, action, fields):
            seen[id(self)] += 1
            return listener(self, action, fields)
        return counted
    return counting


def _owner(listener):
    """The monitor a bus listener is a step of (a bound method's, a native step's), or the
    listener itself."""
    return getattr(listener, "__self__", None) or getattr(listener, "monitor", listener)


def _on_bus(c, mon) -> list:
    return [x for x in c.bus.listeners if _owner(x) in (mon, *mon.companions)]


@pytest.fixture(params=["native", "python"])
def strict_step(request, monkeypatch):
    """Which strict step monitors built in the test get: the native one (where it builds) or
    the Python one, `_strict_step`."""
    if request.param == "native" and StrictStep is None:
        pytest.skip("the native strict step is not built")
    if request.param == "python":
        monkeypatch.setattr(runtime, "StrictStep", None)
    return request.param


def test_strict_monitors_are_given_their_one_frame_step_and_sample_monitors_their_gate(tmp_path, strict_step):
    c, mon = tiny_cache(tmp_path, {"mode": "strict"})
    try:
        got = _on_bus(c, mon)
        # the HostTier monitor and its device-page companion, each by its strict step
        if strict_step == "native":
            assert len(got) == 2 and all(type(x) is StrictStep for x in got)
            assert mon.listener is mon._native and mon._native.monitor is mon
        else:
            assert len(got) == 2 and all(x.__func__ is Monitor._strict_step for x in got)
            assert mon.listener.__func__ is Monitor._strict_step
    finally:
        c.close()
    c, mon = tiny_cache(tmp_path, {"mode": "sample", "sample_rate": 0.5, "seed": 3})
    try:
        # (sample mode's device-page companion listens to nothing: it is checked at the
        # HostTier monitor's samples)
        cp = mon.companions[0]
        assert _on_bus(c, mon) == [] and cp._gate not in c.bus.listeners
        assert isinstance(mon.listener, Gate) and mon.listener is mon._gate
        assert [x for x in c.bus.listeners if x is mon._gate] == [mon._gate]
    finally:
        c.close()


def test_a_class_that_wraps_call_is_given_its_call(tmp_path):
    """A monitor class whose `__call__` wraps the step (a lock around it, as
    SequenceMonitor's) is given that `__call__`, whatever its mode: the bus must not go
    around it."""
    class Wrapped(Monitor):
        def __call__(self, action, fields):
            Monitor.__call__(self, action, fields)
    c, mon = tiny_cache(tmp_path, {"mode": "strict"})
    try:
        other = Wrapped(mon.rmap, mon.cfg)
        assert other._fast and other.listener.__func__ is Wrapped.__call__
    finally:
        c.close()


def test_the_bus_listener_and_call_take_the_same_steps(tmp_path, strict_step):
    """The same workload, its events delivered once to the monitor's `listener` and once to
    the monitor called as an instance: the same steps, checks, history and mapped state
    (the reference numbering: the maps' own positions follow set orders of node objects,
    which differ between two caches)."""
    runs = []
    for direct in (False, True):
        c, mon = tiny_cache(tmp_path / str(direct), {"mode": "strict"})
        try:
            if direct:
                # (each monitor of the cache called as an instance instead)
                c.bus.listeners = [_owner(x) for x in c.bus.listeners]
                assert all(isinstance(x, Monitor) for x in c.bus.listeners)
            _drive(c)
            runs.append([(m.steps, m.checked, [(h.seq, h.action, h.delta is not None) for h in m.history],
                          m.rmap.reference_state()) for m in (mon, *mon.companions)])
        finally:
            c.close()
    assert runs[0] == runs[1]
    assert runs[0][0][0] > len(REQUESTS) and runs[0][0][1] == runs[0][0][0]


@pytest.mark.parametrize("direct", [False, True])
def test_a_wrapper_sees_each_event_once_and_the_methods_come_back(tmp_path, direct, strict_step):
    kept = {name: vars(Monitor)[name] for name in LISTENERS}
    seen: collections.Counter = collections.Counter()
    counting = _counting(seen)
    with listeners_wrapped(counting):
        assert all(vars(Monitor)[name] is not fn for name, fn in kept.items())
        c, mon = tiny_cache(tmp_path, {"mode": "strict"})
        try:
            if direct:
                c.bus.listeners = [_owner(x) for x in c.bus.listeners]
            _drive(c)
        finally:
            c.close()
    assert {name: vars(Monitor)[name] for name in LISTENERS} == kept
    # every event the bus published reached each monitor's wrapper once: through the strict
    # step the bus holds, or through __call__, which delegates to the step's function, not
    # to the wrapped attribute
    events = c.bus.seq
    assert events > len(REQUESTS)
    assert seen == {id(mon): events, id(mon.companions[0]): events}


def test_the_methods_come_back_when_the_body_raises():
    kept = {name: vars(Monitor)[name] for name in LISTENERS}
    with pytest.raises(RuntimeError, match="inside"):
        with listeners_wrapped(lambda listener: (lambda self, action, fields: None)):
            raise RuntimeError("inside")
    assert {name: vars(Monitor)[name] for name in LISTENERS} == kept
    assert runtime._strict_step is Monitor._strict_step


def _sample_run(tmp_path, gate_kind: str | None, rate: float = 0.5) -> list:
    """The workload in gap-counted sample mode (a seeded rate of a half, every drawn sample
    checked: no budget, so the run is the seed's alone), its events reaching the monitor
    through the gate the bus holds (`gate_kind` None), through `Monitor.__call__` (the
    monitor on the bus as an instance: "call"), through the Python gate ("python") in
    place of the one built, or through the gate built again holding no event ("unheld":
    each bound at its event, no deferred binding); what each monitor did."""
    from hicache.monitors.gate import PyGate
    c, mon = tiny_cache(tmp_path, {"mode": "sample", "sample_rate": rate, "seed": 3, "sample_budget": None})
    try:
        g = mon._gate
        if gate_kind == "call":
            c.bus.listeners = [mon if x is g else x for x in c.bus.listeners]
        elif gate_kind in ("python", "unheld"):
            assert g.unbound == frozenset({"LoadBackLayer"})      # (the map's: events are held)
            kind, unbound = (PyGate, g.unbound) if gate_kind == "python" else (type(g), None)
            py = kind(g.bind, g.special, g.slow, g.history, weighted=dict(g.weighted), draw=g.draw,
                      trigger=g.trigger, trigger_on=g.trigger_on, weighed=g.weighed, unbound=unbound)
            py.gap, py.steps = g.gap, g.steps
            mon._gate = py
            c.bus.listeners = [py if x is g else x for x in c.bus.listeners]
        _drive(c)
        return [(m.steps, m.checked, m.cache_checks, m.triggered,
                 [(h.seq, str(h.action), h.state is not None) for h in m.history]) for m in (mon, *mon.companions)]
    finally:
        c.close()


@pytest.mark.parametrize("rate", [0.5, 0.1])
def test_sample_mode_takes_the_same_steps_through_its_gate_its_call_the_python_gate_and_no_holding(tmp_path, rate):
    runs = {kind: _sample_run(tmp_path / str(kind), kind, rate) for kind in (None, "call", "python", "unheld")}
    assert runs[None] == runs["call"] == runs["python"] == runs["unheld"]
    (steps, checked, _, _, history), _ = runs[None]
    # a seeded fraction of the events checked (their states mapped), every other one recorded
    # by the gate as a tuple and read back as its Step, in order
    assert steps < 64 and [h[0] for h in history] == list(range(1, steps + 1))
    assert 0 < checked == sum(h[2] for h in history) < steps
    evictions = [mapped for _, action, mapped in history if action in ("DeviceEvict", "HostEvict")]
    if rate == 0.5:
        assert evictions and all(evictions)          # (drawn at the rate times their weight: 1)
    else:
        assert True in evictions and False in evictions    # (some drawn by the gate, some recorded)


def test_a_wrapper_sees_each_sample_mode_event_once(tmp_path):
    """Instrumentation that wraps the listeners (the bench's floor, the instruction scripts)
    sees a gated monitor's events through its wrapped `__call__`: the bus is given that, not
    the gate, and the gate still takes the steps."""
    seen: collections.Counter = collections.Counter()
    counting = _counting(seen)
    with listeners_wrapped(counting):
        c, mon = tiny_cache(tmp_path, {"mode": "sample", "sample_rate": 0.5, "seed": 3})
        try:
            assert mon._gate is not None and mon.listener is not mon._gate
            _drive(c)
        finally:
            c.close()
    assert seen == {id(mon): c.bus.seq} and mon.steps > len(REQUESTS)


def test_what_changes_after_the_bus_holds_a_strict_step_reaches_that_one_step(tmp_path, strict_step):
    """Strict mode's step is made once, with its monitor (`Monitor._native_step`, never again
    outside tests, which remake it before the bus is given anything), and holds the parts
    that are changed afterwards by reference or reads them at each event: the hook lists
    (appended to), the map's `bind` (read at each event: python_bind takes effect), the
    history (the monitor's setter hands the step the new one). So with all of these changed
    after the bus was given the step, and a second monitor subscribed to the same bus, the bus
    holds one listener per monitor, the one each monitor names, and every event is taken once
    by each: the same steps, checks and history as a run with nothing changed."""
    from hicache.monitors.attach import monitor_cache
    from hicache.monitors.runtime import VerifyConfig
    runs = []
    for changed in (False, True):
        c, mon = tiny_cache(tmp_path / str(changed), {"mode": "strict"})
        try:
            hooked: collections.Counter = collections.Counter()
            monitors = [mon, *mon.companions]
            if changed:
                steps = {id(m): m.listener for m in monitors}
                mon.rmap.python_bind()
                mon.step_hooks.append(lambda name, fields: hooked.update(["step"]))
                mon.watch_hooks.append(lambda name, fields: hooked.update(["watch"]))
                for m in monitors:
                    m.history = collections.deque(maxlen=m.history.maxlen)
                other = monitor_cache(c, VerifyConfig(mode="strict", violation_dir=str(tmp_path / "other")))
                monitors += [other, *other.companions]
                # (the listener each monitor names is still the one the bus was given: the same
                # native step, or a bound method of the same function and monitor)
                assert all(m.listener == steps[id(m)] for m in monitors[:2])
            _drive(c)
            held = collections.Counter(id(_owner(x)) for x in c.bus.listeners)
            assert all(held[id(m)] == 1 for m in monitors) and len(c.bus.listeners) == len(monitors)
            assert all(any(x == m.listener for x in c.bus.listeners) for m in monitors)
            if changed:
                assert hooked == {"step": mon.steps, "watch": mon.steps}
            runs.append([(m.steps, m.checked, [(h.seq, str(h.action), h.delta is not None) for h in m.history])
                         for m in monitors])
        finally:
            c.close()
    plain, changed = runs
    assert changed[:2] == plain and changed[2:] == plain
    assert plain[0][0] > len(REQUESTS) and plain[0][1] == plain[0][0] and len(plain[0][2]) == plain[0][0]
