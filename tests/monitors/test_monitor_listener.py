"""The listener a bus is given (`Monitor.listener`) and the instrumentation point over it
(`runtime.listeners_wrapped`): strict mode's bus calls `_strict_step` itself, any other
monitor's its `__call__`; both see the same steps, and a wrapper sees each event once."""
from __future__ import annotations

import collections

import pytest

from hicache.monitors import runtime
from hicache.monitors.runtime import LISTENERS, Monitor, listeners_wrapped

from tests.monitors.tiny_cache import serve, tiny_cache

#: a workload that moves every tier: matches, inserts, backups, evictions, load-backs
REQUESTS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9], [1, 2, 3, 4], [7, 8], [10, 11, 12, 13]]


def _drive(c) -> None:
    for toks in REQUESTS:
        serve(c, toks)
    c.evict_device(2)
    serve(c, [1, 2, 3, 4])


def _on_bus(c, mon) -> list:
    return [x for x in c.bus.listeners if getattr(x, "__self__", None) in (mon, *mon.companions)]


def test_strict_monitors_are_given_their_one_frame_step_and_sample_monitors_their_call(tmp_path):
    c, mon = tiny_cache(tmp_path, {"mode": "strict"})
    try:
        got = _on_bus(c, mon)
        # the HostTier monitor and its device-page companion, each by its strict step
        assert len(got) == 2 and all(x.__func__ is Monitor._strict_step for x in got)
        assert mon.listener.__func__ is Monitor._strict_step
    finally:
        c.close()
    c, mon = tiny_cache(tmp_path, {"mode": "sample", "sample_rate": 0.5, "seed": 3})
    try:
        got = _on_bus(c, mon)
        # (sample mode's device-page companion listens to nothing: it is checked at the
        # HostTier monitor's samples)
        assert [x.__func__ for x in got] == [Monitor.__call__]
        assert mon.listener.__func__ is Monitor.__call__
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


def test_the_bus_listener_and_call_take_the_same_steps(tmp_path):
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
                c.bus.listeners = [getattr(x, "__self__", x) for x in c.bus.listeners]
                assert all(isinstance(x, Monitor) for x in c.bus.listeners)
            _drive(c)
            runs.append([(m.steps, m.checked, [(h.seq, h.action, h.delta is not None) for h in m.history],
                          m.rmap.reference_state()) for m in (mon, *mon.companions)])
        finally:
            c.close()
    assert runs[0] == runs[1]
    assert runs[0][0][0] > len(REQUESTS) and runs[0][0][1] == runs[0][0][0]


@pytest.mark.parametrize("direct", [False, True])
def test_a_wrapper_sees_each_event_once_and_the_methods_come_back(tmp_path, direct):
    kept = {name: vars(Monitor)[name] for name in LISTENERS}
    seen: collections.Counter = collections.Counter()

    def counting(listener):
        def counted(self, action, fields):
            seen[id(self)] += 1
            return listener(self, action, fields)
        return counted
    with listeners_wrapped(counting):
        assert all(vars(Monitor)[name] is not fn for name, fn in kept.items())
        c, mon = tiny_cache(tmp_path, {"mode": "strict"})
        try:
            if direct:
                c.bus.listeners = [getattr(x, "__self__", x) for x in c.bus.listeners]
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
