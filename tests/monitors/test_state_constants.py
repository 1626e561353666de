"""A from-scratch map's constants read off a state it mapped (`state_constants`) are the
constants it reads off the runtime at that moment (`constants()`), value for value and class
for class, and its key for them (`state_constants_key`) names one set of constants: what lets
the process's monitors share a binding per key (`Monitor._constants_at(t)`), a fresh
monitor's check finding it with one tuple hashed."""
from __future__ import annotations

import collections

import pytest

from hicache.monitors import runtime, zoo
from hicache.monitors.maps.cp_replay import CPReplayMap
from hicache.monitors.maps.cp_replay_inc import IncrementalCPReplayMap
from hicache.monitors.maps.host_tier import HostTierMap, Requests
from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
from hicache.monitors.runtime import Monitor, VerifyConfig
from hicache.protocol.vocabulary import HostTier as A

from tests.monitors.test_map_cp_replay import make, serve, workload


def _typed(raw: dict) -> dict:
    """raw with each value's class beside it (and its elements', for a set): 1 and TRUE, {1}
    and {TRUE} are equal in Python and other constants to a spec."""
    return {k: (v.__class__, frozenset((x.__class__, x) for x in v) if isinstance(v, frozenset) else v)
            for k, v in raw.items()}


class Compare:
    """After each event (but the loader thread's LoadBackLayer: the tree may be mid-change on
    the scheduler's), each map's state is mapped and its constants read both ways."""

    def __init__(self, maps: list, keys: dict, seen: collections.Counter) -> None:
        self.maps, self.keys, self.seen = maps, keys, seen

    def __call__(self, action, fields: dict) -> None:
        if action == A.LoadBackLayer:
            return
        for m in self.maps:
            t = m.state()
            key, got, want = m.state_constants_key(t), m.state_constants(t), m.constants()
            assert _typed(got) == _typed(want), (str(action), got, want)
            # (one key, one set of constants, whichever cache or moment made it)
            assert self.keys.setdefault((type(m), key), _typed(want)) == _typed(want), key
            self.seen["compared"] += 1
            if isinstance(m, HostTierMap):
                # (NReqs past the requests: a prefetch's slots have rows of their own)
                self.seen["prefetch rows"] += want["NReqs"] > max(1, len(m.phase))


@pytest.mark.parametrize("shape", zoo.CLEAN_SHAPES, ids=lambda s: s.name)
def test_host_tier_constants_read_off_a_state_are_the_runtimes(shape, monkeypatch, tmp_path):
    seen, keys = collections.Counter(), {}
    attach = zoo.monitor_cache

    def both(cache, cfg):
        mon = attach(cache, cfg)
        cache.bus.subscribe(Compare([HostTierMap(cache, Requests.RUNTIME), HostTierMap(cache)], keys, seen))
        return mon
    monkeypatch.setattr(zoo, "monitor_cache", both)
    for seed in range(1 if isinstance(shape, zoo.TraceShape) else 3):
        assert zoo.run_clean_shape(shape, seed, str(tmp_path)) is None
    assert seen["compared"] > 100 and len(keys) > 4, (seen, len(keys))
    if shape.name in ("joining fetches", "acks held"):
        assert seen["prefetch rows"] > 0


@pytest.mark.parametrize("cp", [2, 4])
def test_sharded_placement_constants_read_off_a_state_are_the_maps(cp):
    """The chains' capacities grow as the states need: each key names the binding of the
    capacities and placement it was read with (two CP values: two placements, one table)."""
    seen, keys = collections.Counter(), {}
    cache = make(cp=cp)
    m = CPReplayMap(cache)
    cache.bus.subscribe(Compare([m], keys, seen))
    serve(cache, workload(cp))
    assert seen["compared"] > 60 and len(keys) > 1


def test_a_monitor_shares_one_binding_per_key_and_maps_of_their_own_constants_keep_theirs(tmp_path):
    """Two monitors of one cache's state get the one binding of its constants; a map whose
    class maps its own state or constants (an incremental one, a subclass) has no key, and
    its monitor binds what its constants() says; so does a monitor class with constants of
    its own."""
    cache = make(cp=2)
    serve(cache, workload(2, 20))
    cfg = VerifyConfig(mode="sample", violation_dir=str(tmp_path))
    one, two = Monitor(CPReplayMap(cache), cfg), Monitor(CPReplayMap(cache), cfg)
    t1, t2 = one.rmap.state(), two.rmap.state()
    C = one._constants_at(t1)
    assert C is two._constants_at(t2) and C == runtime.binding(one.spec, one.rmap.constants())
    assert C is one._constants_at(one.rmap.state())

    class Own(CPReplayMap):
        def constants(self) -> dict:
            return {**super().constants(), "BugSpliceAnyRotation": True}
    own = Monitor(Own(cache), cfg)
    assert own.rmap.state_constants_key is None
    assert own._constants_at(own.rmap.state())["BugSpliceAnyRotation"] is True

    class OwnMonitor(Monitor):
        def constants(self) -> dict:
            return runtime.binding(self.spec, {**self.rmap.constants(), "BugSpliceAnyRotation": True})
    mine = OwnMonitor(CPReplayMap(cache), cfg)
    assert mine._constants_at(mine.rmap.state())["BugSpliceAnyRotation"] is True
    assert IncrementalCPReplayMap(cache).state_constants_key is None
    assert IncrementalHostTierMap(cache).state_constants_key is None
    cache.close()
