"""One engine's device pages against spec/CPSharding at CP = 1 (hicache.monitors.maps.device_pages).

HostTier has no page identity (`dev[n]` is a boolean), so these faults leave every HostTier
invariant true while two nodes read each other's KV: a page handed to a node while another
node holds it, a page released while its node still holds it, a page lost by an eviction.
The device-page monitor reports each at the step that does it, on the from-scratch map and
on the incremental one alike; the incremental map's state equals the from-scratch map's
(up to the numbering of chains) after every event of seeded workloads; verified mode
attaches it beside every HostTier monitor (strict: every step; sample: at HostTier's sampled
steps and cache checks).
"""
from __future__ import annotations

import collections
import random

import pytest

from hicache.monitors.maps.cp_sharding import NONE
from hicache.monitors.maps.device_pages import CHECKED, DevicePagesMap, IncrementalDevicePagesMap, OpJournal
from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig, undo
from hicache.monitors.workload import WorkloadConfig, make_cache, plan, run_workload, serve_one
from hicache.runtime.cache import HiCache
from hicache.tla.values import KK_INT, Fcn

MAPS = pytest.mark.parametrize("cls", [DevicePagesMap, IncrementalDevicePagesMap], ids=["scratch", "incremental"])


def canonical(s: dict) -> tuple:
    """The state with chains renamed away: the multiset of (rot, len, row) of the chains in
    use, the free set, mixed."""
    rows = collections.Counter()
    for r, n, row, host in zip(s["rot"], s["len"], s["page"], s["host"]):
        if n:
            rows[(r, n, tuple(sorted(row.d.items())), tuple(sorted(host.d.items())))] += 1
    return frozenset(rows.items()), s["free"], s["mixed"]


def watch(cache, tmp_path, cls) -> Monitor:
    mon = Monitor(cls(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    mon.detach = cache.bus.subscribe(mon)
    return mon


@pytest.mark.parametrize("seed", range(16))
def test_the_incremental_map_equals_the_from_scratch_map_after_every_event(seed, tmp_path):
    """Seeded workloads of every write policy (splits, evictions, load-backs, prefetches,
    aborts): after every event the maintained state is the reference state up to chain
    numbers, every chain id in use is within Chains, and `holders` counts the positions
    holding each page."""
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    mon = watch(cache, tmp_path, IncrementalDevicePagesMap)
    ref = DevicePagesMap(cache)
    compared = []

    def compare(action, fields) -> None:
        if action == "LoadBackLayer":
            return
        t, s = ref.state(), mon.rmap.state()
        assert canonical(s) == canonical(t), (action, fields)
        assert len(s["rot"]) == mon.rmap.n_chains
        held = collections.Counter(p for row in t["page"] for p in row.d.values() if p >= 0)
        assert {p: k for p, k in mon.rmap.holders.items() if k} == dict(held)
        compared.append(action)
    cache.bus.subscribe(compare)
    run_workload(cache, reqs)
    assert len(compared) > 20 and mon.checked == mon.steps


@pytest.mark.parametrize("seed", range(4))
def test_deltas_rebuild_the_previous_states(seed):
    """undo(state after k, delta k) == state after k-1 for every event (a violation's trace
    is rebuilt this way)."""
    wcfg = WorkloadConfig(requests=15)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    inc = IncrementalDevicePagesMap(cache)
    states, deltas = [inc.state()], []
    from_calls = []

    def listener(action, fields):
        if action == "LoadBackLayer":
            return
        before = inc.s["free"]
        inc.free_moved = None
        delta, dirty = inc.sync()
        # (what `domains` hands on unsearched: the dirty chains are the map's own)
        assert set(dirty["Chains"]) <= set(range(1, inc.n_chains + 1))
        # every page that entered or left the free set is dirty, and only pages are: from
        # the allocator's calls (free_moved) or the two sets' difference
        if inc.s["free"] is not before:
            assert before ^ inc.s["free"] <= dirty["PageIds"] <= inc.pids
            if inc.free_moved is not None:
                # (the calls' pages alone cover the change, whatever else dirtied a page)
                assert before ^ inc.s["free"] <= inc.free_moved <= inc.pids
            from_calls.append(inc.free_moved is not None)
        deltas.append(delta)
        states.append(inc.state())
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert len(deltas) > 10 and any(deltas)
    assert any(from_calls)
    for k, delta in enumerate(deltas, 1):
        assert undo(states[k], delta) == states[k - 1]


# ------------------------------------------------------------------ faults HostTier cannot see
class SharesAPage(HiCache):
    """Bug: the 4th insert puts a page another node holds into the new node (the page it
    was given goes back to the free list): two nodes' KV in one device page."""
    inserts = 0

    def insert(self, req, pages):
        self.inserts += 1
        if self.inserts == 4 and pages:
            held = next((x.device[0] for x in self.tree.nodes() if x.device), None)
            if held is not None and held not in pages:
                self.dev_alloc.release([pages[0]])
                pages = [held, *pages[1:]]
        return super().insert(req, pages)


class FreesAHeldPage(HiCache):
    """Bug: the 4th insert also releases the first page it put in the tree (use after free:
    the next allocation hands it out again), after its DeviceInsert event: the next event,
    the request's finish, is the first step that shows it."""
    inserts = 0

    def insert(self, req, pages):
        self.inserts += 1
        out = super().insert(req, pages)
        if self.inserts == 4 and req.node.device:
            self.dev_alloc.release([req.node.device[0]])
        return out


class LosesAPage(HiCache):
    """Bug: the 2nd device eviction keeps one page back (in no node, never free again)."""
    evictions = 0

    def _evict_device(self, v):
        self.evictions += 1
        if self.evictions != 2:
            return super()._evict_device(v)
        release = self.dev_alloc.release
        self.dev_alloc.release = lambda pages: release(list(pages)[:-1])
        try:
            return super()._evict_device(v)
        finally:
            del self.dev_alloc.release


class FilesABadPageId(HiCache):
    """Bug: the 3rd insert writes, over the first device page of the node it filed (which
    it releases), a page id that is no device page (`page`: past the pool, or a boolean,
    which Python's dicts and sets take for 1), behind insert's own check of the pages it
    was given, before its DeviceInsert event."""
    inserts = 0
    page: object = None

    def _emit(self, action, **args):
        if action == "DeviceInsert":
            self.inserts += 1
            x = next((y for y in self.tree.nodes() if y.id == args.get("node")), None)
            if self.inserts == 3 and x is not None and x.device:
                self.dev_alloc.release([x.device[0]])
                x.device = [self.page, *x.device[1:]]
        return super()._emit(action, **args)


class FilesAPagePastThePool(FilesABadPageId):
    page = 10_000


class FilesABooleanPage(FilesABadPageId):
    page = True


FAULTS = {"shares_a_page": (SharesAPage, "DeviceInsert", 1),
          "frees_a_held_page": (FreesAHeldPage, "RequestFinish", 2),
          "loses_a_page": (LosesAPage, "DeviceEvict", 4)}
#: faults TypeOK's page-row conjunct (its third) catches, at the insert
TYPE_FAULTS = {"files_a_page_past_the_pool": (FilesAPagePastThePool, "DeviceInsert", 3),
               "files_a_boolean_page": (FilesABooleanPage, "DeviceInsert", 3)}


def _first_violation(fault: str, seed: int, tmp_path, cls):
    cache_cls = {**FAULTS, **TYPE_FAULTS}[fault][0]
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, "write_through", cls=cache_cls)
    mon = watch(cache, tmp_path, cls)
    try:
        for toks, what in reqs:
            serve_one(cache, toks, what)
            cache.drain()
    except ProtocolViolation as e:
        return e.step, e.action, e.property, e.failure.index
    finally:
        mon.detach()
        cache.close()
    return None


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_caught_at_its_step_by_both_maps(fault, tmp_path):
    """The conjunct of NoDoubleAllocation the fault breaks, at the event that does it, the
    same on the from-scratch and the incremental map."""
    _, action, k = FAULTS[fault]
    ref = _first_violation(fault, 1, tmp_path, DevicePagesMap)
    assert ref is not None and ref[1:] == (action, "NoDoubleAllocation", k), ref
    assert _first_violation(fault, 1, tmp_path, IncrementalDevicePagesMap) == ref


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("fault", sorted(TYPE_FAULTS))
def test_a_page_id_no_device_page_is_refused_by_typeok_on_both_maps(fault, tmp_path):
    """The incremental map decides TypeOK from the pages a row was built from, not the
    row's MaxLen entries (`type_ok_inc`): a page past the pool or a boolean page fails it at
    the insert that files it, with the conjunct the from-scratch map's generated check
    names."""
    _, action, k = TYPE_FAULTS[fault]
    ref = _first_violation(fault, 1, tmp_path, DevicePagesMap)
    assert ref is not None and ref[1:] == (action, "TypeOK", k), ref
    assert _first_violation(fault, 1, tmp_path, IncrementalDevicePagesMap) == ref


@pytest.mark.parametrize("seed", range(6))
def test_typeok_from_the_rows_agrees_with_the_generated_form(seed, tmp_path):
    """After every event of seeded workloads, on the maintained state with every chain and
    page taken as changed: `type_ok_inc` and the generated `inc_TypeOK` agree (both hold);
    with a chain's page row swapped for one holding a page past the pool (the map's own
    rows left as they are: the shortcut must not take the state's row for the one it
    built), or its length past MaxLen, or off by one (still within 0..MaxLen: TypeOK
    holds), they agree again."""
    from hicache.monitors.generated import cp_sharding as spec
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    mon = watch(cache, tmp_path, IncrementalDevicePagesMap)
    m = mon.rmap
    reads = spec.READS["TypeOK"]
    seen = []

    def compare(action, fields) -> None:
        if action == "LoadBackLayer":
            return
        C, s = mon.constants(), m.live()
        D = {"Chains": C["Chains"], "PageIds": C["PageIds"]}
        for V in (reads, None):
            assert m.type_ok_inc(C, s, D, V) is None and spec.inc_TypeOK(C, s, D, V) is None
        # (V None: a check of everything, after a new constants binding, which decides the
        # state's shape whole: a sequence one chain short, TRUE in the free set)
        for var, value in (("rot", s["rot"][:-1]), ("free", (s["free"] - {1}) | {True})):
            bad = {**s, var: value}
            mine, theirs = m.type_ok_inc(C, bad, D, None), spec.inc_TypeOK(C, bad, D, None)
            assert mine == theirs and mine is not None, (var, mine, theirs)
        # (V naming free: the dirty pages that are free, each an exact int of PageIds; a free
        # page past the pool, made dirty, fails)
        past = len(C["PageIds"])
        bad, dx = {**s, "free": s["free"] | {past}}, {**D, "PageIds": frozenset(D["PageIds"]) | {past}}
        mine, theirs = m.type_ok_inc(C, bad, dx, reads), spec.inc_TypeOK(C, bad, dx, reads)
        assert mine == theirs and mine is not None, (mine, theirs)
        used = [c for c in C["Chains"] if s["len"][c - 1]]
        if used:
            c = used[-1]
            n = s["len"][c - 1]
            for var, value, fails in (("page", m.row([10_000], C["MaxLen"]), True),
                                      ("len", C["MaxLen"] + 1, True), ("len", n + 1, n + 1 > C["MaxLen"])):
                bad = dict(s)
                bad[var] = tuple(value if i == c - 1 else v for i, v in enumerate(s[var]))
                for V in (reads, None):
                    mine, theirs = m.type_ok_inc(C, bad, D, V), spec.inc_TypeOK(C, bad, D, V)
                    assert mine == theirs and (mine is not None) == fails, (V, var, value, mine, theirs)
            # a page past the chain's length, its len as it was: NoDoubleAllocation's third
            # conjunct, found though the rows the map built skip its walk
            assert m.no_double_allocation_inc(C, s, D, frozenset({"page"})) is None
            if n < C["MaxLen"]:
                bad = dict(s)
                row = s["page"][c - 1]
                bad["page"] = tuple(Fcn({**row.d, n: 0}, KK_INT) if i == c - 1 else v for i, v in enumerate(s["page"]))
                failure = m.no_double_allocation_inc(C, bad, D, frozenset({"page"}))
                assert failure is not None and failure.property == "NoDoubleAllocation", failure
            seen.append(action)
    cache.bus.subscribe(compare)
    run_workload(cache, reqs)
    assert len(seen) > 20


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_host_tier_monitor_alone_misses_each_fault(fault, tmp_path):
    """What this monitor adds: the HostTier monitor (strict) passes the faulty step."""
    cache_cls, action, _ = FAULTS[fault]
    step = _first_violation(fault, 1, tmp_path, DevicePagesMap)[0]
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(1, wcfg)
    cache = make_cache(wcfg, "write_through", cls=cache_cls)
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    try:
        for toks, what in reqs:
            serve_one(cache, toks, what)
            cache.drain()
            if mon.steps > step:
                break
    except ProtocolViolation as e:      # a later consequence, if any, comes after the fault
        assert e.step > step
    assert mon.steps >= step
    cache.close()


def test_verified_mode_attaches_it_beside_the_host_tier_monitor(tmp_path):
    """Strict: a companion of the HostTier monitor, checked at every event (the fault is
    raised at its step); sample: not on the bus, its invariants on the state of each of
    HostTier's sampled steps (at rate 1, no budget: the same step as strict) and at each
    cache check (at rate 0: only there)."""
    from hicache import verified
    from hicache.monitors.attach import monitor_of, unmonitored
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(1, wcfg)
    with unmonitored():      # (the fault's step by this test's own monitor, whatever the run's mode)
        step = _first_violation("frees_a_held_page", 1, tmp_path, DevicePagesMap)[0]
    for mode, rate in (("strict", None), ("sample", 1.0), ("sample", 0.0)):
        verified.enable(mode, violation_dir=str(tmp_path),
                        **({} if rate is None else dict(sample_rate=rate, sample_budget=None)))
        try:
            cache = make_cache(wcfg, "write_through", cls=FreesAHeldPage)
            mon = monitor_of(cache)
            dev = [m for m in mon.companions if isinstance(m.rmap, DevicePagesMap)]
            assert len(dev) == 1
            assert isinstance(dev[0].rmap, IncrementalDevicePagesMap) == (mode == "strict")
            with pytest.raises(ProtocolViolation) as exc:
                for toks, what in reqs:
                    serve_one(cache, toks, what)
                    cache.drain()
                    verified.cache_check(cache)
            e = exc.value
            assert (e.spec, e.property, e.failure.index) == ("spec/CPSharding.tla", "NoDoubleAllocation", 2)
            if rate != 0.0:
                assert (e.step, e.action) == (step, "RequestFinish")
            else:
                assert e.action == "cache_check" and dev[0].checked == 0
            if mode == "sample":
                assert dev[0].steps == 0      # (no event reached it)
        finally:
            verified.disable()


def test_sample_modes_device_page_checks_are_numbered_as_host_tiers_steps(tmp_path):
    """In sample mode the device-page monitor has no events of its own: its sampled checks
    and its cache checks are numbered as HostTier's step (a fault found at close names the
    last step, not step 0), the samples HostTier's budget let go are its own let-go samples
    (report, trace), and a report taken before any cache check counts its sampled steps."""
    from hicache import verified
    from hicache.monitors.attach import describe, monitor_of, monitor_report
    from hicache.tla.itf import read_itf
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(1, wcfg)
    # (a bucket full after 1 us, so the first sample runs; its cost then keeps it in debt)
    verified.enable("sample", sample_rate=1.0, sample_budget=1e-9, budget_window=1e-6, violation_dir=str(tmp_path))
    try:
        cache = make_cache(wcfg, "write_through", cls=LosesAPage)
        mon = monitor_of(cache)
        (dev,) = mon.companions
        serve_one(cache, *reqs[0])
        report = monitor_report(cache)
        assert report[1]["checked"] == 1 and report[1]["budget_skipped"] == report[0]["budget_skipped"]
        assert describe(report[1]) == "spec/CPSharding.tla (device pages, CP = 1): at 1 sampled step and 0 cache checks"
        with pytest.raises(ProtocolViolation) as exc:
            for toks, what in reqs[1:]:
                serve_one(cache, toks, what)
                cache.drain()
            cache.close()
        e = exc.value
        assert (e.spec, e.action, e.step) == ("spec/CPSharding.tla", "cache_check", mon.steps)
        assert mon.budget_skipped > 0 and dev.let_go() == mon.budget_skipped
        seqs = [h.seq for h in e.history]
        assert seqs == sorted(seqs) and seqs[-1] == mon.steps
        assert e.trace_path.endswith(f"CPSharding-step{mon.steps}.itf.json") or \
            f"CPSharding-step{mon.steps}-" in e.trace_path
        assert read_itf(e.trace_path)["#meta"]["config"]["budget_skipped"] == mon.budget_skipped
    finally:
        verified.disable()


@pytest.mark.parametrize("seed", range(8))
def test_clean_workloads_raise_nothing_in_verified_mode(seed, tmp_path):
    """Every write policy, prefetches and aborts: no false alarm from either map."""
    from hicache import verified
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    for mode in ("strict", "sample"):
        verified.enable(mode, violation_dir=str(tmp_path))
        try:
            cache = make_cache(wcfg, policy)
            run_workload(cache, reqs, on_request=lambda i: verified.cache_check(cache))
        finally:
            verified.disable()


def test_only_the_invariants_a_single_pool_can_break_are_checked(tmp_path):
    """At CP = 1 the placement invariants hold in every state TypeOK allows: the monitor
    checks TypeOK and NoDoubleAllocation (and its fast path skips the others)."""
    wcfg = WorkloadConfig(requests=5)
    cache = make_cache(wcfg, "write_through")
    for cls in (DevicePagesMap, IncrementalDevicePagesMap):
        mon = Monitor(cls(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
        assert set(mon.invariants) == CHECKED == {"TypeOK", "NoDoubleAllocation"}
    assert {"PositionOwner", "ExtensionKeepsRotation", "ChainBalanced"} <= mon._fused_skip
    cache.close()


@pytest.mark.hicache_unmonitored
def test_a_page_released_twice_is_caught_when_a_node_holds_it(tmp_path):
    """A double release of a free page changes no set (the allocator's list holds it twice:
    its free count and the mirror's size differ, so the free set is read from the
    allocator); the first allocation that hands it out leaves it free as well, so the insert
    that puts it in a node breaks NoDoubleAllocation's second conjunct (a held page is not
    free), on both maps, before the second allocation hands it to a second node."""
    found = {}
    for cls in (DevicePagesMap, IncrementalDevicePagesMap):
        cache = make_cache(WorkloadConfig(requests=5), "write_through")
        mon = watch(cache, tmp_path, cls)
        page = cache.alloc(1)[0]
        cache.dev_alloc.release([page])
        cache.dev_alloc.release([page])      # the bug: released twice, no event between
        with pytest.raises(ProtocolViolation) as exc:
            for tokens in ([1, 2], [3, 4]):
                req = cache.match(tokens)
                got = cache.alloc(1)
                assert got == [page]
                cache.insert(req, got)
                cache.finish(req)
        e = exc.value
        found[cls] = (e.step, e.action, e.property, e.failure.index)
        mon.detach()
        cache.close()
    assert found[DevicePagesMap] == found[IncrementalDevicePagesMap]
    assert found[DevicePagesMap] == (2, "DeviceInsert", "NoDoubleAllocation", 2)     # (1: the match)


@pytest.mark.hicache_unmonitored
def test_the_allocator_journal_is_bounded_and_an_overflow_reads_the_allocator(tmp_path, monkeypatch):
    """A monitor that stops syncing (after a violation) leaves a journal that keeps at most
    LIMIT calls; a sync after an overflow takes the free set from the allocator, exactly."""
    monkeypatch.setattr(OpJournal, "LIMIT", 3)
    wcfg = WorkloadConfig(requests=5)
    cache = make_cache(wcfg, "write_through")
    inc = IncrementalDevicePagesMap(cache)
    dev = cache.dev_alloc
    for _ in range(5):
        dev.release(dev.alloc(1))
    assert len(inc.ops) == 3 and inc.ops.overflowed
    inc.sync()
    assert inc.s["free"] == frozenset(dev.free_set()) and not inc.ops and not inc.ops.overflowed
    second = IncrementalDevicePagesMap(cache)       # another map of the same cache journals too
    assert dev.journals == (inc.ops, second.ops)
    del inc
    import gc
    gc.collect()
    assert dev.journals == (second.ops,)            # a collected map's journal leaves the allocator
    cache.close()


def test_a_tripped_monitor_stops_journaling(tmp_path):
    """After a violation nothing syncs again: the maps of the tripped monitors (the HostTier
    one linked to it included) leave the node and allocator journals, so a cache that goes
    on serving keeps no record for them."""
    from hicache import verified
    from hicache.monitors.attach import monitor_of
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(1, wcfg)
    verified.enable("strict", violation_dir=str(tmp_path))
    try:
        cache = make_cache(wcfg, "write_through", cls=FreesAHeldPage)
    finally:
        verified.disable()
    mon = monitor_of(cache)
    dev_mon = mon.companions[0]
    with pytest.raises(ProtocolViolation):
        for toks, what in reqs:
            serve_one(cache, toks, what)
            cache.drain()
    assert mon.tripped and dev_mon.tripped
    journals = type(cache.tree.root)._hicache_journals
    assert all(js == [] for js in journals.values()) and cache.dev_alloc.journals == ()
    cache.evict_device(cache.cfg.device_pages)      # the cache goes on: nothing is recorded
    for i in range(10):
        cache.finish(cache.match([10_000 + i, 20_000 + i]))
        cache.dev_alloc.release(cache.alloc(1))
    assert not mon.rmap.journal and not dev_mon.rmap.journal and not dev_mon.rmap.ops
    cache.close()


@MAPS
def test_a_page_freed_and_allocated_again_belongs_to_the_newer_allocation(tmp_path, cls):
    """Two allocations pending at once, the first one's pages freed and handed out again
    before any event: each page is in one chain (the newer allocation's), no alarm, and the
    two maps agree."""
    cache = make_cache(WorkloadConfig(requests=5), "write_through")
    mon = watch(cache, tmp_path, cls)
    ref = DevicePagesMap(cache)
    first = cache.alloc(3)
    cache.dev_alloc.release(first)
    second = cache.alloc(3)
    assert set(first) & set(second)          # (LIFO: the same pages again)
    req = cache.match([1, 2])                # an event: both allocations are mapped
    s = mon.rmap.state()
    assert canonical(s) == canonical(ref.state())
    mapped = [p for row in s["page"] for p in row.d.values() if p >= 0]
    assert sorted(mapped) == sorted(second)
    cache.finish(req)
    cache.dev_alloc.release(second)
    mon.detach()
    cache.close()


@pytest.mark.hicache_unmonitored
@MAPS
def test_a_subtree_cut_loose_leaks_its_pages_at_the_next_step(tmp_path, cls):
    """A node detached with its children (the children keep their parent link and their
    pages): the subtree is out of the tree, so its pages are in no chain and not free, a
    leak (NoDoubleAllocation's last conjunct) at the next event, on both maps."""
    wcfg = WorkloadConfig(requests=40, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(3, wcfg)
    cache = make_cache(wcfg, "write_through")
    mon = watch(cache, tmp_path, cls)
    for toks, what in reqs:
        serve_one(cache, toks, what)
        cache.drain()
        x = next((x for x in cache.tree.nodes() if x.children and x.device and x.parent is cache.tree.root), None)
        if x is not None:
            break
    assert x is not None
    del cache.tree.root.children[x.key[:cache.tree.pb]]
    x.parent = None                          # the bug: the subtree leaves, its pages with it
    with pytest.raises(ProtocolViolation) as exc:
        cache.match([999_001, 999_002])
    e = exc.value
    assert (e.action, e.property, e.failure.index) == ("RequestMatch", "NoDoubleAllocation", 4)
    # every node of the subtree left the mapped state (the state the trace shows)
    assert canonical(mon.rmap.state()) == canonical(DevicePagesMap(cache).state())
    mon.detach()


def test_the_allocation_log_holds_what_callers_hold(tmp_path):
    """The cache forgets a logged allocation once its pages are the tree's (an insert, a
    load-back) or free again (evict_device's own): between an alloc and its insert the
    pages are pending, after it none is, and a long sample-mode run (whose device-page
    monitor maps only at cache checks) leaves no log behind."""
    from hicache import verified
    cache = make_cache(WorkloadConfig(requests=5), "write_through")
    DevicePagesMap(cache)                       # (a watching map turns the log on)
    req = cache.match([1, 2, 3, 4])
    pages = cache.alloc(2)
    assert list(cache.alloc_log.values()) == [(0, 0, pages)]
    cache.insert(req, pages)
    assert cache.alloc_log == {}
    cache.evict_device(cache.cfg.device_pages)
    assert cache.alloc_log == {}
    cache.finish(req)
    cache.close()
    cache = make_cache(WorkloadConfig(requests=5), "write_through")
    DevicePagesMap(cache)
    for _ in range(50):                 # a caller that frees what it allocated, never inserting
        cache.dev_alloc.release(cache.alloc(2))
    assert len(cache.alloc_log) == 1                # (a page handed out again leaves the older entry)
    cache.close()
    wcfg = WorkloadConfig(requests=200)
    policy, reqs = plan(5, wcfg)
    verified.enable("sample", violation_dir=str(tmp_path))
    try:
        cache = make_cache(wcfg, policy)
        sizes = []
        run_workload(cache, reqs, on_request=lambda i: sizes.append(len(cache.alloc_log)))
    finally:
        verified.disable()
    assert max(sizes) <= 1 and cache.metrics.requests == 200


@pytest.mark.hicache_unmonitored
def test_the_allocation_log_forgets_pages_entry_by_entry():
    """Two allocations held at once: the log forgets the pages it is told of in whichever
    entries hold them (part of the older one; the rest of it and part of the newer one in
    one call), drops an entry left with none, and a page freed and handed out again moves
    to the new allocation. (`_unlog` is what insert, load-back and evict_device call.)
    Unmonitored: it calls `_unlog` alone, with no insert to hold the pages, so at close the
    pages are in no node and not free, a leak a verified run's monitor names."""
    cache = make_cache(WorkloadConfig(requests=5), "write_through")
    DevicePagesMap(cache)
    a, b = cache.alloc(3), cache.alloc(2)
    first, second = list(cache.alloc_log)
    assert cache.alloc_log == {first: (0, 0, a), second: (0, 0, b)}
    cache._unlog(a[:1])
    assert cache.alloc_log == {first: (0, 0, a[1:]), second: (0, 0, b)}
    cache._unlog(b[1:] + a[1:])
    assert cache.alloc_log == {second: (0, 0, b[:1])}
    cache.dev_alloc.release(b[:1])
    c = cache.alloc(1)
    assert c == b[:1]                     # (the free list hands the last freed page out first)
    (third,) = cache.alloc_log
    assert third > second and cache.alloc_log[third] == (0, 0, c)
    cache._unlog(c)
    assert cache.alloc_log == {}
    cache.close()


def test_numpy_integer_pages_are_stored_as_ints(tmp_path):
    """insert takes numpy integers as pages; the tree (and so the allocator's free list
    after an eviction) holds ints: a free set of np.int64 failed TypeOK's free \\subseteq
    PageIds in both modes, and the violation's trace could not be encoded."""
    import numpy as np
    from hicache import verified
    for mode in ("strict", "sample"):
        verified.enable(mode, violation_dir=str(tmp_path))
        try:
            cache = make_cache(WorkloadConfig(requests=5), "write_through")
            req = cache.match([1, 2, 3, 4])
            cache.insert(req, [np.int64(p) for p in cache.alloc(2)])
            assert all(type(p) is int for p in req.node.device)
            cache.finish(req)
            cache.evict_device(cache.cfg.device_pages)
            verified.cache_check(cache)
            assert all(type(p) is int for p in cache.dev_alloc.free_set())
            cache.close()
        finally:
            verified.disable()


def _with(s: dict, var: str, i: int, value) -> dict:
    """s with entry i of the sequence `var` replaced by value."""
    out = dict(s)
    out[var] = tuple(value if j == i else v for j, v in enumerate(s[var]))
    return out


def _on_each_scratch_state(seed: int, tmp_path, check) -> int:
    """Run a seeded workload with `check(m, s, C)` after every event (but a loader's
    LoadBackLayer) on the state the from-scratch map m builds and its constants C (sample
    mode's monitor: what maps the states these tests compare forms on); how many of those
    calls returned True (compared something)."""
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    m = DevicePagesMap(cache)
    mon = Monitor(m, VerifyConfig(mode="sample", violation_dir=str(tmp_path)))
    compared = []

    def listener(action, fields) -> None:
        if action != "LoadBackLayer" and check(m, m.state(), mon.constants()):
            compared.append(action)
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    return len(compared)


@pytest.mark.parametrize("seed", range(6))
def test_typeok_of_a_state_built_from_scratch_agrees_with_the_generated_form(seed, tmp_path):
    """After every event of seeded workloads, on the state the from-scratch map builds (what
    sample mode's steps and every cache check check): `type_ok_built` and the generated
    `inv_TypeOK` agree (both hold); on that state with one value changed they agree again,
    failure and conjunct alike: a chain's row swapped for an equal copy (holds, by the
    generated form: not the row the map built), for one holding a page past the pool, or
    a boolean page (conjunct 3); a host row holding no rank (conjunct 4); rot TRUE or
    past the ranks (1); len past MaxLen (2); TRUE in the free set (5); mixed TRUE (holds)."""
    from hicache.monitors.generated import cp_sharding as spec

    def compare(m, s, C) -> bool:
        assert m.type_ok_built(C, s) is None and spec.inv_TypeOK(C, s) is None
        used = [c for c in C["Chains"] if s["len"][c - 1]]
        if not used:
            return False
        i, L = used[-1] - 1, C["MaxLen"]
        row = s["page"][i]
        changed = [(_with(s, "page", i, Fcn(dict(row.d), KK_INT)), None),
                   (_with(s, "page", i, m.row([10_000], L)), 3),
                   (_with(s, "page", i, m.row([True], L)), 3),
                   (_with(s, "host", i, m.row([5], L)), 4),
                   (_with(s, "rot", i, True), 1), (_with(s, "rot", i, 5), 1),
                   (_with(s, "len", i, L + 1), 2),
                   ({**s, "free": (s["free"] - {1}) | {True}}, 5), ({**s, "mixed": True}, None)]
        for bad, conjunct in changed:
            mine, theirs = m.type_ok_built(C, bad), spec.inv_TypeOK(C, bad)
            assert mine == theirs, (conjunct, mine, theirs)
            assert (None if mine is None else mine.index) == conjunct, (conjunct, mine)
        return True
    assert _on_each_scratch_state(seed, tmp_path, compare) > 20


@pytest.mark.parametrize("seed", range(2))
def test_no_double_allocation_from_the_rows_agrees_with_the_generated_form(seed, tmp_path, monkeypatch):
    """After every event of seeded workloads, on the state the from-scratch map builds: its
    NoDoubleAllocation (`no_double_allocation_built`: positions past a chain's length not
    read on the rows it built) and the generated form agree (both hold, no row walked);
    with a chain's length one short of its pages (on the row the map built, and on an equal
    copy of it) or a host copy past its length, they agree again (conjunct 3): those rows
    are walked."""
    from hicache.monitors.generated import cp_sharding as spec
    from hicache.monitors.maps import cp_sharding
    walked = []
    walk = cp_sharding.beyond_len_used

    def counted(row, hrow, ln):
        walked.append(ln)
        return walk(row, hrow, ln)
    monkeypatch.setattr(cp_sharding, "beyond_len_used", counted)
    seen, broken, blanks = [], [], []

    def compare(m, s, C) -> bool:
        walked.clear()
        assert m.no_double_allocation_built(C, s) is None
        assert walked == []           # (every row is one the map built for this state)
        if len(seen) % 8:
            seen.append(s)
            return True               # (the generated form, chains^2 x positions^2, at every 8th)
        assert spec.inv_NoDoubleAllocation(C, s) is None
        used = [c for c in C["Chains"] if 0 < s["len"][c - 1] < C["MaxLen"]
                and s["page"][c - 1].d[s["len"][c - 1] - 1] != NONE]       # (its last page on device)
        if not used:
            return False
        i, L = used[-1] - 1, C["MaxLen"]
        row, n = s["page"][i], s["len"][i]
        short = _with(s, "len", i, n - 1)       # (its last page now past its length)
        changed = [short, _with(short, "page", i, Fcn(dict(row.d), KK_INT)),
                   _with(s, "host", i, m.row([NONE] * n + [0], L))]
        for bad in changed:
            mine, theirs = m.no_double_allocation_built(C, bad), spec.inv_NoDoubleAllocation(C, bad)
            assert mine is not None and theirs is not None and mine.index == theirs.index == 3, (mine, theirs)
        # a chain of pages that all left the device has the state's shared all-NoPage row as
        # its page row too (not read at all): with its length 0 both forms still hold; with a
        # host copy at position 0 past that length (a row not the shared one: read) both name
        # conjunct 3
        blank = [c for c in C["Chains"] if s["len"][c - 1] and s["page"][c - 1] is s["host"][c - 1]]
        if blank:
            j = blank[0] - 1
            emptied = _with(s, "len", j, 0)
            assert m.no_double_allocation_built(C, emptied) is None and spec.inv_NoDoubleAllocation(C, emptied) is None
            hosted = _with(emptied, "host", j, m.row([0], L))
            mine, theirs = m.no_double_allocation_built(C, hosted), spec.inv_NoDoubleAllocation(C, hosted)
            assert mine is not None and theirs is not None and mine.index == theirs.index == 3, (mine, theirs)
            blanks.append(j)
        assert walked
        seen.append(s)
        broken.append(s)
        return True
    assert _on_each_scratch_state(seed, tmp_path, compare) > 20 and len(broken) >= 2 and blanks


def _quiet_run(seed: int, tmp_path, quiet: bool) -> tuple[Monitor, int]:
    """A seeded workload under a strict device-page monitor, its quiet path on or off;
    (the monitor, the steps the quiet path recorded)."""
    wcfg = WorkloadConfig(requests=40)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    mon, taken = _quiet_monitor(cache, tmp_path)
    if not quiet:
        mon._quiet = None
        if mon._native is not None:
            mon._native = mon._native_step()     # (the native step holds the quiet test it was made with)
    mon.detach = cache.bus.subscribe(mon)
    run_workload(cache, reqs)
    return mon, taken[0]


def _quiet_monitor(cache, tmp_path) -> tuple[Monitor, list]:
    """A strict device-page monitor whose quiet path counts the steps it took: (the
    monitor, [that count]). The monitor asks the map only once a first check has run."""
    rmap = IncrementalDevicePagesMap(cache)
    mon = Monitor(rmap, VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    assert mon._quiet is not None        # (no guard, effect, breach: the map's quiet() serves)
    taken = [0]

    def counted() -> bool:
        q = rmap.quiet()
        taken[0] += q
        return q
    mon._quiet = counted
    if mon._native is not None:
        mon._native = mon._native_step()
    return mon, taken


@pytest.mark.parametrize("seed", range(3))
def test_a_quiet_step_is_recorded_as_its_sync_would_have_left_it(seed, tmp_path):
    """The strict monitor records a step at which the map is quiet (nothing it maps was
    written: a request's match or finish, a host copy) without syncing or checking: the
    same history (steps, actions, deltas: empty) and counts as with every step synced, and
    most request events take that path."""
    fast, taken = _quiet_run(seed, tmp_path, quiet=True)
    slow, _ = _quiet_run(seed, tmp_path, quiet=False)
    assert [(h.seq, str(h.action), h.delta) for h in fast.history] == \
        [(h.seq, str(h.action), h.delta) for h in slow.history]
    assert (fast.steps, fast.checked) == (slow.steps, slow.checked) and fast.checked == fast.steps
    requests = sum(str(h.action) in ("RequestMatch", "RequestFinish") for h in fast.history)
    assert requests > 10 and taken >= requests // 2


def test_a_device_page_written_at_a_step_that_moves_none_is_caught_at_it(tmp_path):
    """A node's device pages written (an attribute write, journaled) while a request event
    is handled, an event at which the map is otherwise quiet: the monitor syncs and finds
    the page held twice at that very step, the RequestMatch."""
    wcfg = WorkloadConfig(requests=30, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    policy, reqs = plan(2, wcfg)
    cache = make_cache(wcfg, policy)
    matches = [0]
    hit: list = []

    def fault(action, fields) -> None:
        if str(action) != "RequestMatch":
            return
        matches[0] += 1
        held = [x for x in cache.tree.nodes() if x.device]
        if matches[0] >= 10 and len(held) >= 2 and not hit:
            x, y = held[0], held[1]
            pages = list(y.device)
            pages[0] = x.device[0]          # the bug: a page another node holds
            y.device = pages
            hit.append(fields["seq"])
    cache.bus.subscribe(fault)      # (before the monitor: the write lands inside the step)
    mon, quiet_steps = _quiet_monitor(cache, tmp_path)
    mon.detach = cache.bus.subscribe(mon)
    with pytest.raises(ProtocolViolation) as exc:
        run_workload(cache, reqs)
    e = exc.value
    assert hit and quiet_steps[0] > 0
    assert (e.action, e.property, e.failure.index) == ("RequestMatch", "NoDoubleAllocation", 1)
    assert mon.history[-1].args["seq"] == hit[0]


def _sync_run(seed: int, tmp_path, impl, shifted: bool = False) -> tuple[list, int]:
    """A seeded workload under a strict device-page monitor whose common-path sync is `impl`
    (loops' native device_sync or its Python twin): what each sync returned and left in the
    map, chain-numbered, and how many syncs took the common path. `shifted`: PageIds of the
    same size that is not 0..n_pids-1 (page 0 out, page n_pids in), which the map says
    (`pids_by_value` False), so no page's membership is decided by its value."""
    from hicache.monitors.maps import device_pages
    wcfg = WorkloadConfig(requests=60)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    outs, taken = [], [0]

    def step(m, ctx):
        out = impl(m, ctx)
        taken[0] += out is not None
        return out

    class Recorded(IncrementalDevicePagesMap):
        def __init__(self, cache):
            super().__init__(cache)
            if shifted:
                self.pid_set.discard(0)
                self.pid_set.add(self.n_pids)
                self.pids_by_value = self.pid_set == set(range(self.n_pids))

        def sync(self):
            delta, dirty = super().sync()
            outs.append((list(delta), {k: set(v) for k, v in dirty.items()}, canonical(self.state()),
                         sorted(self.mirror), self.free_moved, self.mirror_typed, dict(self.holders),
                         {self.cid[x]: p for x, p in self.node_pages.items()}, sorted(self.spare), self.next_id,
                         self.n_chains, self.max_len, dict(self.rows), dict(self.page_rows)))
            return delta, dirty
    saved = device_pages.device_sync
    device_pages.device_sync = step
    try:
        mon = Monitor(Recorded(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
        mon.detach = cache.bus.subscribe(mon)
        run_workload(cache, reqs)
    finally:
        device_pages.device_sync = saved
    return outs, taken[0]


@pytest.mark.parametrize("seed", range(6))
def test_the_native_sync_agrees_with_its_python_twin(seed, tmp_path):
    """loops.device_sync (native where it builds) and py_device_sync on the same seeded
    workloads (splits, evictions, load-backs, prefetches, aborts): every sync returns the
    same delta and dirty elements and leaves the same state, mirror, free-set bookkeeping,
    holder counts, chain numbering and rows; most syncs take the common path."""
    from hicache.monitors.maps import loops
    if loops._mod is None:
        pytest.skip("no native module: device_sync is its Python twin")
    native, taken = _sync_run(seed, tmp_path, loops.device_sync)
    twin, taken_py = _sync_run(seed, tmp_path, loops.py_device_sync)
    assert native == twin and taken == taken_py
    assert len(native) > 20 and taken > len(native) // 2


@pytest.mark.parametrize("seed", range(3))
def test_the_native_sync_agrees_on_page_ids_that_are_not_a_range(seed, tmp_path):
    """PageIds of n_pids pages that is not 0..n_pids-1: the native sync intersects the
    allocator's pages with the set, as its twin does, rather than deciding by value (a
    reviewer's case: with the decision by the set's size alone, the two disagreed)."""
    from hicache.monitors.maps import loops
    if loops._mod is None:
        pytest.skip("no native module: device_sync is its Python twin")
    native, taken = _sync_run(seed, tmp_path, loops.device_sync, shifted=True)
    twin, taken_py = _sync_run(seed, tmp_path, loops.py_device_sync, shifted=True)
    assert native == twin and taken == taken_py and taken > 0


@pytest.mark.parametrize("impl", ["device_sync", "py_device_sync"])
def test_the_common_path_sync_passes_on_a_failing_call_as_the_twin_does(impl, tmp_path):
    """A step that fails inside the common path (a new node's chain id counted on from a
    next id that is no int) propagates its error, the journal already taken (as the map's
    sync leaves it), the node given no id; a context of another form is refused."""
    from hicache.monitors.maps import loops
    f = getattr(loops, impl)
    wcfg = WorkloadConfig(requests=4)
    policy, reqs = plan(0, wcfg)
    cache = make_cache(wcfg, policy)
    rmap = IncrementalDevicePagesMap(cache)
    serve_one(cache, *reqs[0])
    assert rmap.journal and not cache.alloc_log and not rmap.pending
    new = [x for x in rmap.journal if x not in rmap.cid and x is not cache.tree.root]
    assert new and not rmap.spare
    rmap.next_id = "no id"
    with pytest.raises(TypeError):
        f(rmap, rmap._sync_ctx)
    assert not rmap.journal and new[0] not in rmap.cid
    with pytest.raises((TypeError, ValueError)):
        f(rmap, rmap._sync_ctx[:-1])


def test_a_map_class_with_a_property_of_a_synced_name_keeps_the_python_sync(tmp_path):
    """The native common-path sync reads and writes the map's attributes in its own dict, as
    Python's lookup would only while no class of the map makes one of those names a data
    descriptor: a subclass that does (a property over `next_id`, which the sync counts chain
    ids on) gets no native context, its property sees the sync's reads and writes, and after
    every event its state is the from-scratch map's (up to chain numbers), as the plain map's is
    with the native sync."""
    from hicache.monitors.maps import device_pages
    seen = collections.Counter()

    class Watched(IncrementalDevicePagesMap):
        @property
        def next_id(self):
            seen["read"] += 1
            return self.__dict__["_next"]

        @next_id.setter
        def next_id(self, v):
            seen["write"] += 1
            self.__dict__["_next"] = v

    assert not device_pages._plain_attrs(Watched, device_pages._SYNC_ATTRS)
    assert device_pages._plain_attrs(IncrementalDevicePagesMap, device_pages._SYNC_ATTRS)
    for cls in (IncrementalDevicePagesMap, Watched):
        wcfg = WorkloadConfig(requests=30)
        policy, reqs = plan(3, wcfg)
        cache = make_cache(wcfg, policy)
        mon = watch(cache, tmp_path, cls)
        assert (mon.rmap._sync_ctx is None) == (cls is Watched)
        ref = DevicePagesMap(cache)
        compared = []

        def compare(action, fields) -> None:
            if action != "LoadBackLayer":
                assert canonical(mon.rmap.state()) == canonical(ref.state()), (cls.__name__, action, fields)
                compared.append(action)
        cache.bus.subscribe(compare)
        run_workload(cache, reqs)
        assert len(compared) > 20 and mon.checked == mon.steps
    assert seen["read"] > 0 and seen["write"] > 0


def test_a_map_class_overriding_an_inlined_method_keeps_the_python_sync(tmp_path):
    """The native common-path sync does the work of `_enter`, `_leave_subtree`, `_id`,
    `_release_id`, `_free` and `_commit`'s same-shape branch itself: a map class that overrides
    one of them gets no native context, and its override is called at every sync that needs
    it."""
    calls = collections.Counter()

    class Counted(IncrementalDevicePagesMap):
        def _enter(self, x):
            calls["_enter"] += 1
            return super()._enter(x)

        def _free(self):
            calls["_free"] += 1
            return super()._free()

    wcfg = WorkloadConfig(requests=30)
    policy, reqs = plan(3, wcfg)
    cache = make_cache(wcfg, policy)
    mon = watch(cache, tmp_path, Counted)
    assert mon.rmap._sync_ctx is None
    run_workload(cache, reqs)
    assert mon.checked == mon.steps and calls["_enter"] > 20 and calls["_free"] > 20, calls


def test_the_map_and_its_cache_are_freed_without_the_collector(tmp_path):
    """Nothing the native sync is given refers back to the map's dict: a map dropped with its
    cache is freed by reference counts alone (with the collector off), the cache with it."""
    import gc
    wcfg = WorkloadConfig(requests=8)
    policy, reqs = plan(1, wcfg)
    cache = make_cache(wcfg, policy)
    rmap = IncrementalDevicePagesMap(cache)
    for r in reqs:
        serve_one(cache, *r)
        rmap.sync()
    import weakref
    gone_map, gone_ops = weakref.ref(rmap), weakref.ref(rmap.ops)
    was = gc.isenabled()
    gc.disable()
    try:
        del rmap
        assert gone_map() is None and gone_ops() is None
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("impl", ["device_sync", "py_device_sync"])
@pytest.mark.parametrize("seed", range(5))
def test_syncs_several_events_apart_keep_the_from_scratch_state(seed, impl, tmp_path, monkeypatch):
    """The common-path sync (native, or its Python twin) on syncs made several events apart:
    several nodes journaled and several allocator calls at one sync, and now and then a mirror
    whose size disagrees with the allocator's free count (a page added to it: the rebuild's
    branch). After every sync the state is the from-scratch map's up to chain numbers, and
    undoing its delta gives the state after the sync before."""
    from hicache.monitors.maps import device_pages, loops
    from hicache.monitors.runtime import snapshot
    if impl == "device_sync" and loops._mod is None:
        pytest.skip("no native module: device_sync is its Python twin")
    f = getattr(loops, impl)
    taken = collections.Counter()

    def step(m, ctx):
        out = f(m, ctx)
        taken[out is not None] += 1
        return out
    monkeypatch.setattr(device_pages, "device_sync", step)
    rng = random.Random(seed)
    wcfg = WorkloadConfig(requests=40)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    rmap = IncrementalDevicePagesMap(cache)
    every = rng.choice([2, 3, 5, 8])
    prev = [snapshot(rmap.state())]
    seen = collections.Counter()

    def event(action, fields) -> None:
        seen["events"] += 1
        if action == "LoadBackLayer" or seen["events"] % every:
            return
        if seen["syncs"] % 4 == 3 and rmap.mirror:
            rmap.mirror.add(10 ** 6 + seen["syncs"])
            seen["perturbed"] += 1
        delta, _ = rmap.sync()
        now = snapshot(rmap.state())
        assert undo(now, delta) == prev[0], (action, fields)
        assert canonical(rmap.state()) == canonical(DevicePagesMap(cache).state()), (action, fields)
        prev[0] = now
        seen["syncs"] += 1
    cache.bus.subscribe(event)
    run_workload(cache, reqs)
    assert seen["syncs"] > 15 and seen["perturbed"] > 0 and taken[True] > 2, (seen, taken)


def _subtree(x) -> list:
    out, stack = [], [x]
    while stack:
        y = stack.pop()
        out.append(y)
        stack.extend(y.children.values())
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_detached_subtree_with_children_syncs_as_the_twin_and_the_scratch_map(seed, monkeypatch):
    """The common-path sync's walk of a detached node (`_leave_subtree`) into its children:
    a mapped node cut from the tree with its subtree (its parent written None, a journaled
    write; its descendants' fields untouched, so a mapped child is unmapped only by that walk
    of the children), one or two at a sync, their pages released to the allocator or not,
    after seeded workloads. Two maps on one cache, one synced by the native device_sync and
    one by its Python twin, both taking the common path: the same delta and state (chain
    numbers too), the from-scratch map's state up to chain numbers, undoing the delta gives
    the state before, and every mapped node below a detached one is unmapped."""
    from hicache.monitors.attach import unmonitored
    from hicache.monitors.maps import device_pages, loops
    from hicache.monitors.runtime import snapshot
    if loops._mod is None:
        pytest.skip("no native module: device_sync is its Python twin")
    taken = collections.Counter()
    maps: list = []

    def dispatch(m, ctx):
        native = m is maps[0]
        out = (loops._mod.device_sync if native else loops.py_device_sync)(m, ctx)
        taken[native, out is not None] += 1
        return out
    monkeypatch.setattr(device_pages, "device_sync", dispatch)
    rng = random.Random(seed)
    wcfg = WorkloadConfig(requests=40)
    policy, reqs = plan(seed, wcfg)
    with unmonitored():
        cache = make_cache(wcfg, policy)
    maps += [IncrementalDevicePagesMap(cache), IncrementalDevicePagesMap(cache)]
    prev = [snapshot(maps[0].state())]

    def sync_both() -> list:
        outs = [m.sync() for m in maps]
        (native, _), (twin, _) = outs
        assert native == twin and maps[0].state() == maps[1].state()
        assert maps[0].node_pages == maps[1].node_pages and maps[0].cid == maps[1].cid
        now = snapshot(maps[0].state())
        assert undo(now, native) == prev[0]
        assert canonical(maps[0].state()) == canonical(DevicePagesMap(cache).state())
        prev[0] = now
        return outs

    def event(action, fields) -> None:
        if action != "LoadBackLayer" and rng.random() < 0.3:
            sync_both()
    cache.bus.subscribe(event)
    run_workload(cache, reqs)
    sync_both()
    cut = 0
    for _ in range(4):
        node_pages = maps[0].node_pages
        # mapped nodes in the tree with a mapped child
        roots = [x for x in node_pages if x.parent is not None and any(y in node_pages for y in x.children.values())]
        if not roots:
            break
        picks = rng.sample(roots, min(len(roots), rng.choice([1, 1, 2])))
        for x in picks:
            par = x.parent
            if par is None:
                continue        # (cut already, below the other pick)
            (key,) = [k for k, y in par.children.items() if y is x]
            del par.children[key]
            x.parent = None                      # (journaled: the sync sees the node detached)
        below = {y for x in picks for y in _subtree(x)[1:] if y not in picks}
        hidden = [y for y in below if y in node_pages]
        assert hidden and not any(y in m.journal for y in hidden for m in maps)
        assert all(y is cache.tree.root or y.parent is None for y in maps[0].journal)
        if rng.random() < 0.5:
            cache.dev_alloc.release([p for x in picks for y in _subtree(x) if y.device for p in y.device])
        before = taken.copy()
        sync_both()
        assert taken - before == {(True, True): 1, (False, True): 1}     # (both on the common path)
        assert not any(y in m.node_pages or y in m.cid for y in hidden for m in maps)
        cut += len(hidden)
    assert cut > 0
