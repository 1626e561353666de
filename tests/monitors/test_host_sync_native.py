"""The HostTier map's sync in C (incmap.c's host_sync and host_sync_step, the map's own `sync`)
against its Python twin (loops.py_host_sync, py_host_sync_step): the same delta, dirty elements,
state and bookkeeping after every event of seeded workloads; a class's sync, _map_nodes or
_slots other than IncrementalHostTierMap's is called, not done inline; a failing re-mapping
leaves the map as the Python finally does. And the map's guard dispatch in C (guard_step, the
map's own `guard`) against host_tier_guards.check, which defines it."""
from __future__ import annotations

import weakref

import pytest

from hicache.monitors.maps import host_tier_guards, host_tier_inc, loops
from hicache.monitors.maps.host_tier import HostTierMap
from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
from hicache.monitors.workload import WorkloadConfig, make_cache, plan, run_workload

from tests.monitors.test_host_tier_incremental import LOADER_EVENT, canonical

needs_native = pytest.mark.skipif(loops._mod is None, reason="no native module: host_sync is its Python twin")

#: what a sync leaves on the map besides its state (each compared between the two maps)
_KEPT = ("L", "effect_due", "changed", "left", "slots_changed", "own_domains", "fetching", "synced_key", "free_seen",
         "adjusted", "req_dirty", "pf_refs")


def _twin(m: IncrementalHostTierMap) -> None:
    """m synced by the Python twin from now on (its own instance attribute, as the native step is)."""
    m.sync = loops.py_host_sync_step(weakref.ref(m), m._sync_ctx, host_tier_inc._OWN_SYNC)


def _map(step: str, seed: int, requests: int, cls=IncrementalHostTierMap):
    """(the cache of a seeded workload, a map of class cls on it synced by `step`: the native
    form or the twin, the workload's requests)."""
    if step == "native" and loops._mod is None:
        pytest.skip("no native module: host_sync is its Python twin")
    wcfg = WorkloadConfig(requests=requests)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    m = cls(cache)
    if step == "twin":
        _twin(m)
    return cache, m, reqs


def _kept(m) -> tuple:
    return tuple((name, getattr(m, name)) for name in _KEPT) + (("requeue", set(m.requeue)),)


@needs_native
@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("seed", range(8))
def test_the_native_sync_agrees_with_its_python_twin(seed):
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    native, twin = IncrementalHostTierMap(cache), IncrementalHostTierMap(cache)
    assert type(native.sync).__name__ == "MapStep"
    _twin(twin)
    ref = HostTierMap(cache)
    seen = {"events": 0, "slots": 0, "nodes": 0}

    def both(action, fields):
        ref.bind(str(action), fields)
        for m in (native, twin):
            m.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        journaled = bool(native.journal or native.requeue)
        (d0, dirty0), (d1, dirty1) = native.sync(), twin.sync()
        seen["events"] += 1
        seen["nodes"] += journaled
        seen["slots"] += bool(native.slots_changed)
        assert d0 == d1, (seen["events"], action)
        assert {k: None if v is None else set(v) for k, v in dirty0.items()} == \
            {k: None if v is None else set(v) for k, v in dirty1.items()}
        assert native.state() == twin.state() and native.delta is d0 and twin.delta is d1
        assert _kept(native) == _kept(twin), (seen["events"], action)
        assert canonical(native, native.state()) == canonical(ref, ref.state())
    cache.bus.subscribe(both)
    run_workload(cache, reqs)
    # (the paths the native form does inline ran: re-mappings and slot changes)
    assert seen["events"] > 20 and seen["nodes"] > 5 and seen["slots"] > 0


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("step", ["native", "twin"])
def test_a_sync_patched_on_the_class_is_called_by_the_map_own_step(step, monkeypatch):
    """The map's own `sync` stands for the class's only while that is IncrementalHostTierMap's:
    one patched on the class later (a profiler's wrapper) is what a call runs, bound to the map."""
    _, m, _ = _map(step, 1, 6)
    calls = []
    own = IncrementalHostTierMap.sync

    def wrapper(self):
        calls.append(self)
        return own(self)
    monkeypatch.setattr(IncrementalHostTierMap, "sync", wrapper)
    delta, dirty = m.sync()
    assert calls == [m] and delta is m.delta and dirty is m.dirty


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("step", ["native", "twin"])
def test_a_subclass_map_nodes_and_slots_are_called_not_inlined(step):
    """A map class whose _map_nodes or _slots is its own: the sync calls them (the native form
    does IncrementalHostTierMap's inline only), and the state stays the reference map's."""
    counts = {"nodes": 0, "slots": 0}

    class Counted(IncrementalHostTierMap):
        def _map_nodes(self):
            counts["nodes"] += 1
            super()._map_nodes()

        def _slots(self, hs, free):
            counts["slots"] += 1
            super()._slots(hs, free)
    cache, m, reqs = _map(step, 3, 30, Counted)
    ref = HostTierMap(cache)

    def listener(action, fields):
        ref.bind(str(action), fields)
        m.bind(str(action), fields)
        if action != LOADER_EVENT:
            m.sync()
            assert canonical(m, m.state()) == canonical(ref, ref.state())
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert counts["nodes"] > 5 and counts["slots"] > 0


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("step", ["native", "twin"])
def test_a_failing_re_mapping_raises_and_leaves_the_map_as_the_finally_does(step):
    """Something in the journal that is no node: the re-mapping raises its error, the journal
    already emptied and requeue a new set, and the finally ran (slot_changed cleared); the
    twin and the native form alike."""
    cache, m, reqs = _map(step, 2, 6)
    run_workload(cache, reqs)
    m.sync()
    before = m.requeue
    m.journal.add(object())
    m.slot_changed.add("stale")
    with pytest.raises(AttributeError):
        m.sync()
    assert not m.journal and m.requeue is not before and m.requeue == set() and not m.slot_changed


@needs_native
def test_the_native_step_refuses_a_gone_map_and_a_bad_ctx():
    wcfg = WorkloadConfig(requests=2)
    policy, _ = plan(0, wcfg)
    cache = make_cache(wcfg, policy)
    m = IncrementalHostTierMap(cache)
    ctx = m._sync_ctx
    with pytest.raises(TypeError, match="ctx must be a tuple"):
        loops.host_sync_step(weakref.ref(m), ctx[:-1], host_tier_inc._OWN_SYNC)
    with pytest.raises(TypeError, match="dirty_nodes must be a set"):
        loops.host_sync(m, (ctx[0], frozenset()) + ctx[2:])

    class Gone:
        pass
    g = Gone()
    step = loops.host_sync_step(weakref.ref(g), ctx, host_tier_inc._OWN_SYNC)
    del g
    with pytest.raises(ReferenceError):
        step()


def _guard_twin(m):
    return loops.py_guard_step(weakref.ref(m), host_tier_guards.guard_tables(m), host_tier_inc._OWN_GUARD)


def _effect_twin(m):
    return loops.py_effect_step(weakref.ref(m), host_tier_guards.effect_tables(m), host_tier_inc._OWN_EFFECT)


@needs_native
@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("seed", range(6))
def test_the_native_effect_agrees_with_effect_after_every_sync_and_on_foreign_steps(seed):
    """After each event's sync: the map's own effect, its twin and host_tier_guards.effect give
    the same verdict on the event, and on the same changes claimed by a step of a node not in
    the tree (a frame that fails: the changed nodes are not its own), by a step naming no
    node (nothing to judge) and by an action with neither frame nor writes."""
    cache, m, reqs = _map("native", seed, 40)
    assert type(m.effect).__name__ == "MapStep"
    twin = _effect_twin(m)
    seen = {"events": 0, "foreign_failed": 0}

    def verdicts(action, fields):
        got = (m.effect(action, fields), twin(action, fields), host_tier_guards.effect(m, action, fields))
        assert got[0] == got[1] == got[2], (action, fields, got)
        return got[0]

    def listener(action, fields):
        m.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        m.sync()
        seen["events"] += 1
        if str(action) in m.effect_actions:
            verdicts(action, fields)
        if m.changed or m.left or m.slots_changed:
            seen["foreign_failed"] += verdicts("DeviceEvict", {"node": 10 ** 9}) is not None
            verdicts("BackupStart", {"node": None})
            verdicts("BackupFinish", {"node": None, "held": ()})
            assert verdicts("NoSuchAction", {"node": 1}) is None     # (no frame, no writes)
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert seen["events"] > 20 and seen["foreign_failed"] > 3


@needs_native
@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("seed", range(6))
def test_the_native_guard_agrees_with_check_on_every_event_and_on_broken_ones(seed):
    """Before each event's sync (the state the guards judge): the map's own guard, its twin and
    check itself give the same verdict; then events that break a guard (a request finished
    twice, matched while live, a node event of a node not in the tree, an ack of no node) on
    the final state, the same failures."""
    cache, m, reqs = _map("native", seed, 40)
    assert type(m.guard).__name__ == "MapStep"
    twin = _guard_twin(m)
    verdicts = []

    def listener(action, fields):
        m.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        got = (m.guard(action, fields), twin(action, fields), host_tier_guards.check(m, action, fields))
        assert got[0] == got[1] == got[2], (action, fields, got)
        verdicts.append(got[0])
        m.sync()
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert len(verdicts) > 20
    live = next(iter(m.phase), None)
    broken = [("RequestFinish", {"rid": 10 ** 9}), ("HostEvict", {"node": 10 ** 9}),
              ("BackupFinish", {"node": None}), ("BackupFinish", {"node": 10 ** 9}), ("DeviceEvict", {}),
              ("NoSuchAction", {"node": 1})]
    if live is not None:
        broken.append(("RequestMatch", {"rid": live}))
    failed = 0
    for action, fields in broken:
        m.phase_before = m.phase.get(fields.get("rid")) if "rid" in fields else None
        got = (m.guard(action, fields), twin(action, fields), host_tier_guards.check(m, action, fields))
        assert got[0] == got[1] == got[2], (action, got)
        failed += got[0] is not None
    assert failed >= 3


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("step", ["native", "twin"])
@pytest.mark.parametrize("method,event", [("guard", ("RequestMatch", {"rid": 1})),
                                          ("effect", ("HostEvict", {"node": 1}))])
def test_a_guard_or_effect_patched_on_the_class_is_called_by_the_map_own_one(step, method, event, monkeypatch):
    """As sync: the map's own guard and effect stand for the class's only while it is
    IncrementalHostTierMap's; one patched on the class later is called, bound to the map."""
    cache, m, _ = _map(step, 1, 4)
    if step == "twin":
        setattr(m, method, {"guard": _guard_twin, "effect": _effect_twin}[method](m))
    calls = []

    def other(self, action, fields):
        calls.append((self, action))
        return "judged"
    monkeypatch.setattr(IncrementalHostTierMap, method, other)
    assert getattr(m, method)(*event) == "judged" and calls == [(m, event[0])]


@needs_native
def test_the_native_guard_refuses_bad_tables_and_a_gone_map():
    cache, m, _ = _map("native", 0, 2)
    tables = host_tier_guards.guard_tables(m)
    with pytest.raises(TypeError, match="ctx must be a tuple"):
        loops.guard_step(weakref.ref(m), tables[:-1], host_tier_inc._OWN_GUARD)
    with pytest.raises(TypeError, match="npos must be a dict"):
        loops.guard_step(weakref.ref(m), tables[:6] + ([],) + tables[7:], host_tier_inc._OWN_GUARD)

    class Gone:
        pass
    g = Gone()
    step = loops.guard_step(weakref.ref(g), tables, host_tier_inc._OWN_GUARD)
    del g
    with pytest.raises(ReferenceError, match="guard: its map is gone"):
        step("RequestMatch", {})
