"""The CP replay's sharded cache against spec/CPSharding (hicache.monitors.maps.cp_replay).

Seeded workloads with shared prefixes over a small sharded device pool (evictions and
load-backs both happen) run clean in strict mode; a cache that forgets a chain's offset when
it extends a cached prefix breaks PositionOwner at the step that inserts the pages, and an
allocator that loses a freed page breaks NoDoubleAllocation (its no-leak conjunct) at the
eviction that lost it; verified mode attaches the monitor to a sharded replay. Each runs on
the from-scratch map and on the incremental one (maps/cp_replay_inc.py), whose state equals
the from-scratch map's after every event.
"""
from __future__ import annotations

import collections
import random

import pytest

from hicache.monitors.maps.cp_replay import CPReplayMap
from hicache.monitors.maps.cp_replay_inc import IncrementalCPReplayMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.protocol.cp_layout import chain_owner_class
from hicache.replay.cp import ShardedCache, ShardedDeviceAllocator
from hicache.runtime.config import CacheConfig

PS = 4          # tokens per page


def workload(seed: int, n: int = 60) -> list[bytes]:
    """Page-aligned keys (8-byte tokens) from a few prefix families, of 1-12 pages."""
    rng = random.Random(seed)
    fams = [[rng.randrange(1, 1 << 30) for _ in range(12 * PS)] for _ in range(4)]
    out = []
    for _ in range(n):
        toks = list(rng.choice(fams)[:rng.randint(1, 12) * PS])
        if rng.random() < 0.4:
            toks[-1] = rng.randrange(1 << 30, 1 << 31)       # a divergent tail: splits
        out.append(b"".join(t.to_bytes(8, "little") for t in toks))
    return out


def make(cls=ShardedCache, cp: int = 4, pages_per_rank: int = 6) -> ShardedCache:
    cfg = CacheConfig(page_size=PS, device_pages=cp * pages_per_rank, host_pages=64, layers=2,
                      heads=1, head_dim=2, metadata_only=True)
    return cls(cfg, cp)


def serve(cache: ShardedCache, keys: list[bytes]) -> None:
    pb = PS * 8
    for key in keys:
        req = cache.match(key)
        cache.load_back(req)
        for op in req.loads:
            op.wait()
        new = cache.alloc(len(key) // pb - len(cache.prefix_pages(req)))
        if new is not None:
            cache.insert(req, new)
        cache.finish(req)
        cache.drain()


MAPS = pytest.mark.parametrize("cls", [CPReplayMap, IncrementalCPReplayMap], ids=["scratch", "incremental"])


def watch(cache: ShardedCache, tmp_path, cls=CPReplayMap) -> Monitor:
    mon = Monitor(cls(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    mon.detach = cache.bus.subscribe(mon)
    return mon


@MAPS
@pytest.mark.parametrize("seed", range(6))
def test_clean_sharded_replays_hold_every_invariant(seed, tmp_path, cls):
    cache = make(cp=(2, 4)[seed % 2])
    mon = watch(cache, tmp_path, cls)
    serve(cache, workload(seed))
    mon.cache_check()
    assert mon.checked == mon.steps > 60
    m = cache.metrics
    assert m.device_evicted_tokens > 0 and m.host_hit_tokens > 0   # evictions and load-backs ran
    # the mapped chains hold exactly the tree's device pages, each in its rotation's class
    s = mon.rmap.state()
    mapped = [p for c in range(len(s["rot"])) for p in s["page"][c].d.values() if p >= 0]
    assert len(mapped) == len(set(mapped)) == cache.tree.device_pages
    for c in range(len(s["rot"])):
        for P in range(s["len"][c]):
            p = s["page"][c].d[P]
            if p >= 0:
                assert cache.layout.page_owner(p) == chain_owner_class(s["rot"][c], P, cache.layout.cp_size)
    cache.close()


class ForgetsOffset(ShardedCache):
    """Bug: an extension of a cached prefix is placed as if its chain started at position 0
    (the rotation base is kept, the offset of the device run is dropped)."""

    def _chain(self, req):
        base, start = super()._chain(req)
        return base, 0


class LeakyAllocator(ShardedDeviceAllocator):
    """Bug: the third release keeps one page back (never free again, in no node)."""

    def release(self, pages):
        self.releases = getattr(self, "releases", 0) + 1
        if self.releases == 3 and len(pages) > 0:
            self.lost = pages[-1]
            pages = pages[:-1]
        super().release(pages)


class Leaks(ShardedCache):
    def _device_allocator(self, cfg):
        return LeakyAllocator(self.layout, cfg.device_pages // self.layout.cp_size)


@pytest.mark.hicache_unmonitored
@MAPS
def test_an_extension_placed_without_its_offset_breaks_position_owner(tmp_path, cls):
    for seed in range(20):
        cache = make(ForgetsOffset, cp=4)
        mon = watch(cache, tmp_path, cls)
        try:
            serve(cache, workload(seed))
        except ProtocolViolation as e:
            assert e.spec == "spec/CPSharding.tla" and e.property == "PositionOwner"
            # the step that put the misplaced pages in the tree
            assert e.action in ("DeviceInsert", "LoadBackStart"), e.action
            assert e.trace_path
            return
        finally:
            mon.detach()         # (closing applies the transfers still in flight: more steps)
            cache.close()
    pytest.fail("the misplaced extension was never caught")


@pytest.mark.hicache_unmonitored
@MAPS
def test_a_lost_page_breaks_no_double_allocation_at_the_eviction(tmp_path, cls):
    cache = make(Leaks, cp=2)
    mon = watch(cache, tmp_path, cls)
    with pytest.raises(ProtocolViolation) as exc:
        serve(cache, workload(1))
    e = exc.value
    assert e.property == "NoDoubleAllocation" and e.failure.index == 4    # a page leaked
    assert e.action == "DeviceEvict"
    assert cache.dev_alloc.lost not in cache.dev_alloc.free_set()
    mon.detach()
    cache.close()


@pytest.mark.parametrize("host_pages", [64, 0])
def test_verified_mode_checks_a_sharded_replay(tmp_path, monkeypatch, host_pages):
    """With or without a host tier: without one, nothing of HostTier has a step, but the
    page placement does (it attached nothing, and the replay reported "no violation")."""
    from hicache import verified
    from hicache.replay.driver import ReplayConfig, replay_requests
    keys = workload(3, 40)
    reqs = [(k, len(k) // 8) for k in keys]
    cfg = ReplayConfig(page_size=PS, device_tokens=6 * PS, host_tokens=host_pages * PS, cp=2, sync=True)
    seen: list = []
    init = Monitor.__init__

    def counting(self, *a, **kw):
        init(self, *a, **kw)
        seen.append(self)
    monkeypatch.setattr(Monitor, "__init__", counting)
    verified.enable("strict", violation_dir=str(tmp_path))
    try:
        replay_requests(cfg, reqs)
    finally:
        verified.disable()
    cp = [m for m in seen if isinstance(m.rmap, CPReplayMap)]
    assert len(cp) == 1 and cp[0].checked > 40
    assert type(cp[0].rmap) is IncrementalCPReplayMap      # strict: the incremental map
    assert len(seen) == (2 if host_pages else 1)


def test_constant_level_invariants_are_checked_again_only_when_their_constants_change(tmp_path):
    """PlacementBijection reads no variable (READS) and only CP, LocalPages, PageSize and
    ArithPages (CONST_READS): over a replay whose Chains and MaxLen grow it is evaluated once;
    a binding with another CP has it evaluated again."""
    from hicache.monitors.generated import cp_sharding as spec
    assert spec.READS["PlacementBijection"] == frozenset()
    assert spec.CONST_READS["PlacementBijection"] == {"CP", "LocalPages", "PageSize", "ArithPages"}
    assert spec.CONST_READS["PositionOwner"] == {"CP", "Chains"}
    cache = make(cp=4)
    mon = watch(cache, tmp_path)
    calls, full = [], mon.invariants["PlacementBijection"]
    mon.invariants["PlacementBijection"] = lambda C, s: calls.append(C["CP"]) or full(C, s)
    bound, constants = [], mon._constants_at
    mon._constants_at = lambda t: bound.append(constants(t)) or bound[-1]
    serve(cache, workload(2))
    del mon._constants_at
    # (the bindings grew: several, each evaluated under; the invariant checked once)
    assert calls == [4] and mon.checked > 60 and len({id(C) for C in bound}) > 1
    C = mon.constants()
    assert "PlacementBijection" not in mon._invariants_for(C)
    other = spec.constants({**mon.rmap.constants(), "CP": 2, "LocalPages": 12, "ArithPages": 12})
    assert "PlacementBijection" in mon._invariants_for(other)
    mon.detach()
    cache.close()


@MAPS
def test_a_page_freed_and_allocated_again_belongs_to_the_newer_allocation(tmp_path, cls):
    """Two allocations pending at once, the first one's pages freed and handed out again
    before any event: each page is mapped in one chain (the newer allocation's), no alarm."""
    cache = make(cp=2)
    mon = watch(cache, tmp_path, cls)
    first = cache.alloc(3)
    cache.dev_alloc.release(first)        # dropped without an insert, no event between
    second = cache.alloc(3)
    assert set(first) & set(second)       # (LIFO free lists: the same pages again)
    serve(cache, workload(4, 5))          # events: both pending allocations are mapped
    s = mon.rmap.state()
    rows = [[p for p in s["page"][c].d.values() if p >= 0] for c in range(len(s["rot"]))]
    mapped = [p for r in rows for p in r]
    assert set(second) <= set(mapped) and len(mapped) == len(set(mapped))
    assert mon.checked > 5
    mon.detach()
    cache.close()


def test_the_placement_arithmetic_is_walked_on_a_prefix_of_a_device(tmp_path):
    """A device-sized LocalPages: the map binds ArithPages to a prefix (the arithmetic is
    proved for every size by `hicache prove`), which PlacementBijection walks; a broken
    placement inside the prefix still fails it, and a small device is walked whole."""
    from hicache.monitors.generated import cp_sharding as spec
    from hicache.monitors.maps.cp_sharding import ARITH_PAGES, arith_pages
    assert arith_pages(31_250) == ARITH_PAGES == 64 and arith_pages(12) == 12
    C = spec.constants({"CP": 2, "LocalPages": 31_250, "PageSize": 64, "ArithPages": arith_pages(31_250),
                        "Chains": frozenset({1}), "MaxLen": 2, "BugSpliceAnyRotation": False})
    assert spec.inv_PlacementBijection(C, {}) is None
    with pytest.raises(ValueError, match="ArithPages"):
        spec.constants({**C, "ArithPages": 31_251})
    broken = dict(spec.__dict__)
    try:
        spec.d_Owner = lambda C, s, t, p: (p + (p == 100)) % C["CP"]      # page 100 misplaced
        assert spec.inv_PlacementBijection(C, {}).index == 1
    finally:
        spec.d_Owner = broken["d_Owner"]


@pytest.mark.parametrize("seed", range(6))
def test_the_incremental_map_equals_the_from_scratch_map_after_every_event(seed, tmp_path):
    """The maintained state is the reference map's state, chain numbering and padding
    included, after every event of seeded workloads (whose chains and lengths grow, whose
    pages are evicted, loaded back and allocated again), and the page counts NoDoubleAllocation
    reads are the positions holding each page."""
    cache = make(cp=(2, 4)[seed % 2])
    mon = watch(cache, tmp_path, IncrementalCPReplayMap)
    ref = CPReplayMap(cache)
    compared = []

    def compare(action, fields) -> None:
        if action == "LoadBackLayer":
            return
        t, s = ref.state(), mon.rmap.state()
        assert s == t, (action, sorted(k for k in t if s.get(k) != t[k]))
        held = collections.Counter(p for row in t["page"] for p in row.d.values() if p >= 0)
        assert {p: k for p, k in mon.rmap.holders.items() if k} == dict(held)
        compared.append(action)
    detach = cache.bus.subscribe(compare)
    serve(cache, workload(seed))
    assert len(compared) == mon.checked == mon.steps > 60
    assert mon.rmap.n_chains > 8 or mon.rmap.max_len > 8        # a reshape happened on the way
    detach()
    mon.detach()
    cache.close()


def test_the_incremental_map_checks_only_the_chains_an_event_changed(tmp_path):
    """After the first steps, a step checks the invariants over the chains it changed: the
    generated PositionOwner form sees a few chains per event, not every chain."""
    cache = make(cp=2)
    mon = watch(cache, tmp_path, IncrementalCPReplayMap)
    sizes = []
    sync = mon.rmap.sync

    def spy():
        delta, dirty = sync()
        C = mon.constants()          # (the binding the step's checks are under)
        # (the chains a sync dirties are the map's own, in the domain: handed on unsearched,
        # the sync's dict itself, which the monitor takes without asking `domains`)
        assert mon.rmap.own_domains and mon.rmap.domains(C, dirty) is dirty
        assert set(dirty["Chains"]) <= C["Chains"]
        sizes.append((len(dirty["Chains"]), len(C["Chains"])))
        return delta, dirty
    mon.rmap.sync = spy
    serve(cache, workload(2))
    assert sizes and all(d <= n for d, n in sizes)
    assert sum(d for d, _ in sizes) < sum(n for _, n in sizes) / 4
    mon.detach()
    cache.close()


def _first_violation(cache_cls, cp: int, seed: int, tmp_path, cls, fault=None):
    """(step, action, property, conjunct) of the first violation a map reports on a
    workload (None: none); `fault(cache, step)` may corrupt the cache before a request."""
    cache = make(cache_cls, cp=cp)
    mon = watch(cache, tmp_path, cls)
    try:
        for i, key in enumerate(workload(seed)):
            if fault is not None:
                fault(cache, i)
            serve(cache, [key])
    except ProtocolViolation as e:
        return e.step, e.action, e.property, e.failure.index
    finally:
        mon.detach()
        cache.close()
    return None


def _free_a_held_page(cache, i) -> None:
    """A use after free: before request 20, one device page a tree node holds is released
    (the node keeps it): the page is free and in a chain at once."""
    if i == 20:
        held = next(x.device for x in cache.tree.nodes() if x.device)
        cache.dev_alloc.release([held[0]])


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("case", ["offset", "leak", "use_after_free"])
def test_the_incremental_map_reports_what_the_from_scratch_map_reports_at_the_same_step(case, tmp_path):
    """The same violation (property and conjunct) at the same step on both maps: a misplaced
    extension (PositionOwner, on a changed chain), a leaked page (NoDoubleAllocation 4: a
    page left its chain and the free set missed it) and a page freed while a node holds it
    (NoDoubleAllocation 2: only the free set changed)."""
    cache_cls, cp, fault = {"offset": (ForgetsOffset, 4, None), "leak": (Leaks, 2, None),
                            "use_after_free": (ShardedCache, 2, _free_a_held_page)}[case]
    found = []
    for seed in range(20):
        ref = _first_violation(cache_cls, cp, seed, tmp_path, CPReplayMap, fault)
        if ref is None:
            continue
        assert _first_violation(cache_cls, cp, seed, tmp_path, IncrementalCPReplayMap, fault) == ref
        found.append(ref)
        if len(found) == 3:
            break
    assert found, "the fault was never caught"
    want = {"offset": ("PositionOwner", 1), "leak": ("NoDoubleAllocation", 4),
            "use_after_free": ("NoDoubleAllocation", 2)}[case]
    assert all((prop, k) == want for _, _, prop, k in found), found


def test_the_from_scratch_rows_are_each_states_own(tmp_path):
    """Each state's rows are dicts of its own: writing one (as nothing should, but a check
    that did) changes no later state: the all-NoPage row they are copied from is never
    handed out."""
    cache = make(cp=2)
    ref = CPReplayMap(cache)
    serve(cache, workload(0))
    first = ref.state()
    fresh = CPReplayMap(cache).state()
    for row in (*first["page"], *first["host"]):
        for k in list(row.d):
            row.d[k] = -77
    assert ref.state() == fresh
    cache.close()
