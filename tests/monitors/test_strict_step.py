"""Strict mode's step: csrc/gate.c's StrictStep and its Python twin, runtime.py's
`Monitor._strict_step`, make the same calls in the same order with the same arguments on
random events (binder, quiet map, breaches, guard, sync, constants, invariants, effect, hooks,
each failing or raising at random), and leave the same history, counters and violation, whether
the monitor's _check_delta is its own (called by name) or Monitor's (whose dispatch the native
step runs itself: domains, fused pass, unfused checks); and a cache's monitors take the same
steps and catch the same bugs with either."""
from __future__ import annotations

import collections
import random

import pytest

from hicache.monitors import runtime
from hicache.monitors.gate import StrictStep
from hicache.monitors.workload import WorkloadConfig
from hicache.monitors.zoo import runtime_entry

from tests.monitors.tiny_cache import serve, tiny_cache

native = pytest.mark.skipif(StrictStep is None, reason="the native strict step is not built")

ACTIONS = ["RequestMatch", "DeviceInsert", "HostEvict", "Other"]
VARIABLES = ["v", "w", "x"]


class Violation(Exception):
    """What the spy monitor's fail raises."""


class _Map:
    """A map whose answers are drawn from a seeded RNG, logging each call."""

    def __init__(self, rng: random.Random, log: list, effect_due: bool):
        self.rng, self.log = rng, log
        self.breach = None
        self.synced_key = 0
        if effect_due:
            self.effect_due = frozenset()

    def bind(self, name, fields):
        self.log.append(("bind", name, fields["i"]))
        return None if name == "Other" else ((name, None),)

    def sync(self):
        r = self.rng.random()
        self.log.append(("sync",))
        if r < 0.03:
            raise KeyError("sync")
        delta = [(self.rng.choice(VARIABLES), self.rng.randrange(3), 0) for _ in range(self.rng.randrange(1, 3))] \
            if r < 0.6 else []
        self.synced_key = self.rng.randrange(3)
        if hasattr(self, "effect_due"):
            self.effect_due = frozenset(self.rng.sample(ACTIONS, 2))
        if hasattr(self, "own_domains"):
            self.own_domains = self.rng.random() < 0.5
        return delta, {"d": self.rng.randrange(5)}

    def domains(self, C, dirty):
        self.log.append(("domains", C, dict(dirty)))
        return {"d": frozenset(dirty)}

    def live(self):
        self.log.append(("live",))
        return {"v": 1}


class _PropMap(_Map):
    """The map's breach, synced_key and bind behind properties (data descriptors, which the
    instance dict does not shadow) and effect_due a class attribute until a sync writes it:
    the native step reads them as Python does, not from the dict."""

    effect_due = frozenset(ACTIONS)

    @property
    def breach(self):
        return self.__dict__.get("_breach")

    @breach.setter
    def breach(self, value):
        self.__dict__["_breach"] = value
        self.__dict__["breach"] = "shadowed"      # (never read: the property comes first)

    @property
    def synced_key(self):
        return self._key

    @property
    def bind(self):
        """(a data descriptor: a bind the relay puts in the dict is never called)"""
        return lambda name, fields: _Map.bind(self, name, fields)

    @synced_key.setter
    def synced_key(self, value):
        self._key = value


class _SlotMap(_Map):
    """The map's attributes in slots (member descriptors, before its dict) and synced_key
    served by __getattr__ (written by __setattr__ elsewhere): the native step reads them as
    Python does."""

    __slots__ = ("rng", "log", "breach", "effect_due", "own_domains", "_key")

    def __getattr__(self, name):
        if name == "synced_key":
            return self._key
        raise AttributeError(name)

    def __setattr__(self, name, value):
        object.__setattr__(self, "_key" if name == "synced_key" else name, value)


#: the maps a spy draws from (the reads of their attributes: the generic lookup's outcome)
_MAPS = (_Map, _Map, _PropMap, _SlotMap)


class _Spy:
    """The attributes and methods of a Monitor that the strict step reads and calls."""

    def __init__(self, seed: int, log: list, history: collections.deque):
        rng = self.rng = random.Random(seed)
        self.log = log
        self.rmap = _MAPS[seed % len(_MAPS)](rng, log, effect_due=rng.random() < 0.5)
        self._native = None
        self.tripped = False
        self._steps = self._checked = 0
        self._history = history
        self._checked_C = None
        self._cache = {0: {"d": 0}, 1: {"d": 1}}
        self._constants = {"d": 2}
        self._synced_key = rng.random() < 0.7
        self._breaches = rng.random() < 0.5
        self._quiet = self.quiet if rng.random() < 0.5 else None
        self._guard = self.guard if rng.random() < 0.7 else None
        self._effect = self.effect if rng.random() < 0.7 else None
        self._effect_on = frozenset(rng.sample(ACTIONS, 2)) if self._effect is not None else frozenset()
        self._effect_due = self._effect is not None and hasattr(self.rmap, "effect_due")
        self.step_hooks: list = []
        self.watch_hooks: list = []
        # Monitor's _check_delta (and the parts it reads), or the spy's own
        self._monitors_checks = rng.random() < 0.7
        if self._monitors_checks:
            self._domains = ("d",)
            if rng.random() < 0.5:
                self.rmap.own_domains = False
            self._own_domains = hasattr(self.rmap, "own_domains")
            self._live = {"v": 0} if rng.random() < 0.5 else None
            self._inc_checks = [(f"I{i}", self.check(f"inc{i}") if rng.random() < 0.6 else None,
                                 self.check(f"full{i}"), frozenset(rng.sample(VARIABLES, rng.randrange(1, 3))))
                                for i in range(rng.randrange(1, 5))]
            self._inc_all = self.inc_all if rng.random() < 0.7 else None
            self._fused_skip = frozenset({"I0"})
            self._unfused_checks = [c for c in self._inc_checks if rng.random() < 0.5] \
                if self._inc_all is not None else self._inc_checks
            self._unfused_reads = frozenset().union(*(c[3] for c in self._unfused_checks))

    def _answer(self, what: str, *args, fail: float = 0.05, raise_: float = 0.02):
        """A logged call's answer: a failure ("broke"), an error, or None."""
        self.log.append((what, *args))
        r = self.rng.random()
        if r < raise_:
            raise ValueError(what)
        return f"broke:{what}" if r < raise_ + fail else None

    def quiet(self):
        self.log.append(("quiet",))
        return self.rng.random() < 0.6

    def guard(self, name, fields):
        return self._answer("guard", name, fields["i"])

    def effect(self, name, fields):
        return self._answer("effect", name, fields["i"])

    def constants(self):
        self.log.append(("constants",))
        return self._constants

    def check(self, tag):
        """An invariant's form (incremental: C, s, D, changed; full: C, s)."""
        def check(*args):
            return self._answer(tag, *args)
        return check

    def inc_all(self, C, s, D, changed, skip):
        self.log.append(("inc_all", C, s, D, changed, skip))
        r = self.rng.random()
        if r < 0.02:
            raise ValueError("inc_all")
        return r < 0.7

    def _check_delta(self, name, fields, C, delta, acc):
        if self._monitors_checks:
            runtime.Monitor._check_delta(self, name, fields, C, delta, acc)
            return
        self._checked_C = C
        if self._answer("check_delta", name, fields["i"], C, list(delta), dict(acc)) is not None:
            self.fail("invariant", name, fields, "broke", None, None)

    def _report_breach(self):
        self.log.append(("report_breach", self.rmap.breach))
        self.rmap.breach = None
        self.fail("action", "breach", {}, "breached", None, None)

    def fail(self, kind, name, fields, failure, s, t):
        self.log.append(("fail", kind, name, fields.get("i"), failure, s, t))
        self.tripped = True
        if self._native is not None:
            self._native.tripped = True
        raise Violation(failure)

    def hook(self, tag):
        def hook(name, fields):
            self._answer(tag, name, fields["i"], fail=0)
        return hook

    def churn(self) -> None:
        """Between events: a breach found, a hook added, the dicts relaid, a bind of the map's
        own, a binding replaced (all drawn)."""
        r = self.rng.random()
        if self._breaches and r < 0.05:
            self.rmap.breach = ("B", {}, "f")
        if r > 0.97:
            (self.step_hooks if r > 0.985 else self.watch_hooks).append(self.hook(f"hook{len(self.log)}"))
        self.relay()

    def relay(self) -> None:
        """The monitor's and the map's dicts relaid (drawn): an attribute the step reads taken
        out and put back (at a new entry), the dict grown and shrunk (its entries renumbered), a
        bind of the map's own put in its dict or taken out, the cache's binding of a key
        replaced or a key's binding made anew (a new key object equal to the old): the native
        step, which keeps the entry it last read each at and the last binding it found, must
        read what Python reads."""
        for obj in (self, self.rmap):
            d = getattr(obj, "__dict__", None)
            r = self.rng.random()
            if d is None or r > 0.3:
                continue
            if r < 0.1:
                keys = [k for k in ("_checked_C", "breach", "synced_key", "effect_due", "own_domains", "bind") if k in d]
                if keys:
                    k = self.rng.choice(keys)
                    d[k] = d.pop(k)
            elif r < 0.15:
                for j in range(40):
                    d[f"_pad{j}"] = j
                for j in range(40):
                    del d[f"_pad{j}"]
            elif r < 0.25 and obj is self.rmap:
                if "bind" in d:
                    del d["bind"]
                else:
                    tag = f"own{len(self.log)}"
                    d["bind"] = lambda name, fields, tag=tag: self.log.append((tag, name)) or ((name, tag),)
            elif obj is self:
                k = self.rng.randrange(3)
                if self.rng.random() < 0.5:
                    self._cache[k] = {"d": len(self.log)}
                elif k in self._cache:
                    self._cache[k] = self._cache.pop(k)


class _PropSpy(_Spy):
    """A monitor whose _checked_C is a property (the native step reads it through it)."""

    @property
    def _checked_C(self):
        return self.__dict__.get("_cc")

    @_checked_C.setter
    def _checked_C(self, value):
        self.__dict__["_cc"] = value
        self.__dict__["_checked_C"] = "shadowed"      # (never read: the property comes first)


def _run(seed: int, use_native: bool) -> tuple:
    log: list = []
    history: collections.deque = collections.deque(maxlen=8)
    spy = (_PropSpy if seed % 5 == 4 else _Spy)(seed, log, history)
    if use_native:
        spy._native = StrictStep(spy, spy.rmap, {}, str, spy._cache, history, quiet=spy._quiet, guard=spy._guard,
                                 effect=spy._effect, effect_on=spy._effect_on, effect_due=spy._effect_due,
                                 breaches=spy._breaches, synced_key=spy._synced_key, step_hooks=spy.step_hooks,
                                 watch_hooks=spy.watch_hooks,
                                 checks=(spy._own_domains, spy._live, spy._inc_all, spy._fused_skip,
                                         spy._unfused_checks, spy._unfused_reads, spy._inc_checks,
                                         runtime._variables_of) if spy._monitors_checks else None)
    step = spy._native if use_native else (lambda a, f: runtime.Monitor._strict_step(spy, a, f))
    outcomes = []
    for i in range(200):
        spy.churn()
        try:
            step(spy.rng.choice(ACTIONS), {"i": i})
            outcomes.append(None)
        except (Violation, ValueError, KeyError) as e:
            outcomes.append(repr(e))
            if not spy.tripped and spy.rng.random() < 0.5:
                continue
            break
    counts = (spy._native.steps, spy._native.checked, spy._native.tripped) if use_native \
        else (spy._steps, spy._checked, spy.tripped)
    return log, list(history), counts, outcomes


@native
@pytest.mark.parametrize("seed", range(60))
def test_the_native_step_makes_the_python_steps_calls(seed):
    py, c = _run(seed, False), _run(seed, True)
    assert c == py
    assert py[2][0] > 0


@native
def test_the_native_step_checks_its_arguments():
    with pytest.raises(TypeError):
        StrictStep(object(), object(), {}, str, {}, collections.deque(), quiet=None, guard=1, effect=None,
                   effect_on=frozenset(), effect_due=False, breaches=False, synced_key=False,
                   step_hooks=[], watch_hooks=[])
    st = StrictStep(object(), object(), {}, str, {}, collections.deque(), quiet=None, guard=None, effect=None,
                    effect_on=frozenset(), effect_due=False, breaches=False, synced_key=False,
                    step_hooks=[], watch_hooks=[])
    with pytest.raises(TypeError):
        st("a")


def _cache_run(tmp_path, use_native: bool, monkeypatch) -> list:
    """A seeded random workload on a tiny strict-mode cache: what each monitor did."""
    if not use_native:
        monkeypatch.setattr(runtime, "StrictStep", None)
    c, mon = tiny_cache(tmp_path, {"mode": "strict", "history": 16})
    try:
        assert (mon._native is not None) == use_native
        rng = random.Random(7)
        for _ in range(40):
            r = rng.random()
            if r < 0.7:
                serve(c, [rng.randrange(4) for _ in range(rng.randrange(1, 4))])
            elif r < 0.9:
                c.evict_device(rng.randrange(1, 5))     # (room for the next request's pages)
            else:
                c.evict_host(rng.randrange(1, 4))
        return [(m.steps, m.checked, m.tripped,
                 [(h.seq, h.action, h.args, sorted(h.delta[0::3])) for h in m.history],
                 m.rmap.reference_state()) for m in (mon, *mon.companions)]
    finally:
        c.close()
        monkeypatch.undo()


@native
def test_a_cache_takes_the_same_steps_with_either_step(tmp_path, monkeypatch):
    py = _cache_run(tmp_path / "py", False, monkeypatch)
    c = _cache_run(tmp_path / "c", True, monkeypatch)
    assert c == py
    assert py[0][0] > 40 and py[0][1] == py[0][0]


@native
@pytest.mark.parametrize("bug", [8, 10, 7])
def test_the_bugs_are_caught_the_same_with_either_step(bug, tmp_path, monkeypatch):
    c = runtime_entry(bug, 10, WorkloadConfig(), str(tmp_path / "c"))
    monkeypatch.setattr(runtime, "StrictStep", None)
    py = runtime_entry(bug, 10, WorkloadConfig(), str(tmp_path / "py"))
    fields = ("caught", "property", "steps_after_fault", "clean_alarm")
    assert [getattr(c, f) for f in fields] == [getattr(py, f) for f in fields] and c.caught


def _request_steps(step, spy, log: list, n: int, at: int, change) -> list:
    """n RequestMatch events through `step`, `change()` made before the one numbered `at`;
    each violation or error the step raised logged (and the run stopped once it tripped)."""
    for i in range(n):
        if i == at:
            change()
        try:
            step("RequestMatch", {"i": i})
        except (Violation, ValueError, KeyError) as e:
            log.append(repr(e))
            if spy.tripped:
                break
    return log


@native
def test_the_native_step_sees_a_class_changed_under_it():
    """The native step keeps, for each attribute it reads of its map and monitor, the type
    it found without a class attribute of that name (its version tag); a property set on the
    class afterwards is what the next step reads, as Python's lookup reads it."""
    def steps(use_native: bool) -> list:
        log: list = []
        spy = _Spy(1, log, collections.deque(maxlen=8))
        spy._breaches, spy._quiet, spy._guard = True, None, None
        spy._effect, spy._effect_on, spy._effect_due = None, frozenset(), False
        spy.rmap = type("Fresh", (_Map,), {})(spy.rng, log, effect_due=False)
        native_step = StrictStep(spy, spy.rmap, {}, str, spy._cache, spy._history, quiet=None, guard=None,
                                 effect=None, effect_on=frozenset(), effect_due=False, breaches=True,
                                 synced_key=spy._synced_key, step_hooks=[], watch_hooks=[])
        spy._native = native_step if use_native else None
        step = native_step if use_native else (lambda a, f: runtime.Monitor._strict_step(spy, a, f))
        def shadow():       # (the dict's None now shadowed by a data descriptor)
            type(spy.rmap).breach = property(lambda self: ("B", {}, "f"),
                                             lambda self, value: self.__dict__.update(breach=value))
        return _request_steps(step, spy, log, 6, 3, shadow)

    py, c = steps(False), steps(True)
    assert c == py
    assert ("report_breach", ("B", {}, "f")) in py


@native
def test_the_native_step_sees_a_bind_descriptor_become_a_data_descriptor():
    """A class attribute `bind` of a mutable descriptor class that gains a __set__ later beats
    the map's own `bind` in its dict from then on (Python's lookup asks the descriptor's type at
    each read); the map type's version tag does not change, so the native step must not have
    memoized "no data descriptor" for such a descriptor."""
    def binds(use_native: bool) -> list:
        log: list = []

        class Desc:         # (a non-data descriptor until __set__ is added below)
            def __get__(self, obj, tp=None):
                return lambda name, fields: (log.append(("class_bind", name)), ((name, None),))[1]

        spy = _Spy(1, log, collections.deque(maxlen=8))
        spy._breaches, spy._quiet, spy._guard = False, None, None
        spy._effect, spy._effect_on, spy._effect_due = None, frozenset(), False
        spy.rmap = type("DescMap", (_Map,), {"bind": Desc()})(spy.rng, log, effect_due=False)
        spy.rmap.__dict__["bind"] = lambda name, fields: (log.append(("own_bind", name)), None)[1]
        native_step = StrictStep(spy, spy.rmap, {}, str, spy._cache, spy._history, quiet=None, guard=None,
                                 effect=None, effect_on=frozenset(), effect_due=False, breaches=False,
                                 synced_key=spy._synced_key, step_hooks=[], watch_hooks=[])
        step = native_step if use_native else (lambda a, f: runtime.Monitor._strict_step(spy, a, f))
        def make_data_descriptor():
            Desc.__set__ = lambda self, obj, value: None
        _request_steps(step, spy, log, 4, 2, make_data_descriptor)
        return [e for e in log if e[0] in ("own_bind", "class_bind")]

    py, c = binds(False), binds(True)
    assert py == [("own_bind", "RequestMatch")] * 2 + [("class_bind", "RequestMatch")] * 2
    assert c == py


@native
def test_the_native_step_sees_a_binding_written_by_the_release_of_the_last_one():
    """The native step's last constants lookup is kept with the cache's version tag read right
    after it: a finalizer run when it lets the previous binding go, writing the cache, makes the
    next step look the key up again, and find what the finalizer wrote."""
    seen: list = []

    class Map:
        synced_key = 0

        def bind(self, name, fields):
            return ((name, None),)

        def sync(self):
            return [], {}

    class Mon:
        def __init__(self):
            self.rmap, self._cache, self._checked_C = Map(), {}, None

        def constants(self):
            return {"tag": "fresh"}

        def _check_delta(self, name, fields, C, delta, acc):
            seen.append(C["tag"])

        def fail(self, *a):
            raise AssertionError(a)

    mon = Mon()

    class Fin:
        def __del__(self):
            mon._cache[0] = {"tag": "C2"}

    mon._cache[0] = {"tag": "C0", "fin": Fin()}
    st = StrictStep(mon, mon.rmap, {}, str, mon._cache, collections.deque(maxlen=8), quiet=None, guard=None,
                    effect=None, effect_on=frozenset(), effect_due=False, breaches=False, synced_key=True,
                    step_hooks=[], watch_hooks=[])
    st("A", {})
    mon._cache[0] = {"tag": "C1"}   # (C0 stays alive: the step holds it as its last lookup's)
    for _ in range(3):
        st("A", {})
    assert seen == ["C0", "C1", "C2", "C2"] and mon._cache[0]["tag"] == "C2"


class _GetattributeMap(_Map):
    """A map whose __getattribute__ serves its own `bind` (and counts the reads): the generic
    lookup, which would find the dict's, is not how Python reads it."""

    def __getattribute__(self, name):
        if name == "bind":
            log = object.__getattribute__(self, "log")
            return lambda n, fields: (log.append(("getattribute_bind", n)), ((n, None),))[1]
        return object.__getattribute__(self, name)


@native
@pytest.mark.parametrize("odd", ["getattribute", "non_str_keys"])
def test_the_native_step_reads_odd_maps_as_python_does(odd):
    """Maps and monitors the native step's reads at remembered dict entries must not be taken
    in by: a map class serving `bind` through __getattribute__ while its dict holds one too,
    and instance dicts holding a non-str key (another entry layout) while their attributes
    change between steps."""
    def steps(use_native: bool) -> list:
        log: list = []
        spy = _Spy(3, log, collections.deque(maxlen=8))
        spy._breaches, spy._quiet, spy._guard = True, None, None
        spy._effect, spy._effect_on, spy._effect_due = None, frozenset(), False
        cls = _GetattributeMap if odd == "getattribute" else _Map
        spy.rmap = cls(spy.rng, log, effect_due=False)
        spy.rmap.__dict__["bind"] = lambda n, fields: (log.append(("own_bind", n)), ((n, None),))[1]
        if odd == "non_str_keys":
            spy.__dict__[7] = "seven"
            spy.rmap.__dict__[(1, 2)] = "pair"
        native_step = StrictStep(spy, spy.rmap, {}, str, spy._cache, spy._history, quiet=None, guard=None,
                                 effect=None, effect_on=frozenset(), effect_due=False, breaches=True,
                                 synced_key=spy._synced_key, step_hooks=[], watch_hooks=[])
        step = native_step if use_native else (lambda a, f: runtime.Monitor._strict_step(spy, a, f))
        def move():         # (attributes read at remembered entries, moved: deleted and put back)
            for d, name in ((spy.rmap.__dict__, "breach"), (spy.__dict__, "_checked_C")):
                d[name] = d.pop(name)
        return _request_steps(step, spy, log, 8, 4, move)

    py, c = steps(False), steps(True)
    assert c == py
    expected = "getattribute_bind" if odd == "getattribute" else "own_bind"
    assert (expected, "RequestMatch") in py
