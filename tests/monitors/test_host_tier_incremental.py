"""The incremental HostTier map against the from-scratch reference map.

After every event of seeded random workloads (splits, evictions, prefetches, aborts, all
three write policies) the maintained state must equal the reference state up to the
renaming of page positions and request slots, and the monitor's incremental invariant
checks must agree with the full checks on the reference state (no false alarm, no miss).
"""
from __future__ import annotations

import collections

import pytest

from hicache.monitors.maps.host_tier import HostTierMap
from hicache.monitors.generated import host_tier as spec
from hicache.monitors.maps.host_tier_inc import NODE_VARS, REQ_VARS, IncrementalHostTierMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig, undo
from hicache.monitors.workload import WorkloadConfig, failing_copies, make_cache, plan, run_workload, serve_one
from hicache.protocol.vocabulary import HostTier as A


def canonical(m, s: dict) -> tuple:
    """The state with nodes and requests renamed away: a multiset of per-page rows (the
    loading request named by its rid), the slot states, the request phases."""
    rid_of = {q: rid for rid, q in getattr(m, "qslot", {}).items()} if isinstance(m, IncrementalHostTierMap) \
        else {i + 1: rid for i, rid in enumerate(sorted(m.phase))}
    n = s["len"]
    rows = collections.Counter()
    for p in range(n):
        rows[(s["dev"].d[p], s["host"].d[p], s["stor"].d[p], s["hits"].d[p], s["backupOp"].d[p],
              rid_of.get(s["loadReq"].d[p], 0) if s["loadReq"].d[p] else 0)] += 1
    spare = tuple(s[v].d[n] for v in ("dev", "host", "stor", "hits", "backupOp", "loadReq", "loadDone"))
    live = sorted(x for x in s["req"] if x != "idle")
    pf = sorted(zip(s["pfSlot"], s["pfAbort"], s["reqLen"]))
    return (s["policy"], n, frozenset(rows.items()), spare, s["slot"], tuple(live), tuple(p for p in pf if p[0]))


#: the event emitted on the loader's thread, while the scheduler's may be mid-change: a
#: listener binds it and reads no state (as the monitor: a sync then reads a tree being
#: written). A listener's failed assert there failed the load (its raise is the copy's
#: error), and its dropped device copies showed in the next eviction's frame check: a
#: false alarm of the test's own making.
LOADER_EVENT = A.LoadBackLayer


class Compare:
    """A listener after the incremental monitor: compares with the reference map."""

    def __init__(self, cache, inc: IncrementalHostTierMap):
        self.ref = HostTierMap(cache)
        self.inc = inc
        self.events = 0

    def __call__(self, action, fields):
        self.ref.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        self.events += 1
        a, b = canonical(self.inc, self.inc.state()), canonical(self.ref, self.ref.state())
        assert a == b, f"after event {self.events} {action} {fields}:\n inc {a}\n ref {b}"
        # (the free count the last sync kept, which `_slots` compares, is the allocator's own)
        host = self.inc.cache.host
        assert host is None or self.inc.free_seen == host.free, (self.events, action, self.inc.free_seen, host.free)


@pytest.mark.parametrize("seed", range(24))
def test_incremental_state_equals_reference_after_every_event(seed):
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    inc = IncrementalHostTierMap(cache)
    mon = Monitor(inc, VerifyConfig(mode="strict", violation_dir="/nonexistent"))
    cache.bus.subscribe(mon)
    cmp = Compare(cache, inc)
    cache.bus.subscribe(cmp)
    run_workload(cache, reqs)
    assert cmp.events > 20 and mon.checked == mon.steps


@pytest.mark.parametrize("seed", range(6))
def test_deltas_rebuild_the_previous_states(seed):
    """undo(state after k, delta k) == state after k-1, for every event."""
    wcfg = WorkloadConfig(requests=15)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    inc = IncrementalHostTierMap(cache)
    states = [inc.state()]
    deltas = []

    def listener(action, fields):
        inc.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        delta, _ = inc.sync()
        deltas.append(delta)
        states.append(inc.state())
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert len(deltas) > 10
    for k in range(1, len(states)):
        assert undo(states[k], deltas[k - 1]) == states[k - 1]


def expected_dirty(before: dict, after: dict, keys0: list, keys1: list) -> dict:
    """The elements whose predicates (of HostTier's element-local conjuncts) can have changed
    value between two states, derived from the states alone. Nodes: an in-tree position
    whose page (keys: position -> (node, index)) is new, or whose page's row (its values
    and slot[host]) differs from that page's row before, wherever it sat (the map moves
    pages between positions, a renaming under which the checked predicates keep their
    values); a position outside the tree whose row or InTree status changed. Slots: a
    slot whose state or whose number of tree, backup or prefetch references changed.
    Requests: a request whose row changed, or every request when len changed
    (LockedNodesKept reads len)."""
    L0, L1 = before["len"], after["len"]
    node_vars = ("dev", "host", "stor", "hits", "backupOp", "loadReq", "loadDone")

    def row(s, p):
        h = s["host"].d[p]
        return tuple(s[v].d[p] for v in node_vars) + (s["slot"][h - 1] if h else None,)
    was = {k: p for p, k in enumerate(keys0)}
    nodes = set()
    for p in after["dev"].d:
        if p < L1:
            q = was.get(keys1[p])
            if q is None or row(before, q) != row(after, p):
                nodes.add(p)
        elif p < L0 or row(before, p) != row(after, p):
            nodes.add(p)

    def refs(s):
        c = collections.Counter()
        for p, h in s["host"].d.items():
            if h and p < s["len"]:
                c[("tree", h)] += 1
        for p, h in s["backupOp"].d.items():
            if h:
                c[("backup", h)] += 1
        for h in s["pfSlot"]:
            if h:
                c[("fetch", h)] += 1
        return c
    r0, r1 = refs(before), refs(after)
    slots = {h + 1 for h in range(len(after["slot"])) if before["slot"][h] != after["slot"][h]}
    slots |= {h for _, h in (r0.keys() | r1.keys()) if r0[(_, h)] != r1[(_, h)]}
    rows0 = list(zip(*(before[v] for v in REQ_VARS)))
    rows1 = list(zip(*(after[v] for v in REQ_VARS)))
    reqs = set(range(1, len(rows1) + 1)) if L0 != L1 else \
        {q + 1 for q in range(len(rows1)) if q >= len(rows0) or rows0[q] != rows1[q]}
    return {"Nodes": nodes, "HSlots": slots, "Reqs": reqs}


#: the variables whose writes make a host slot dirty, and those that make a page dirty
_SLOT_VARS = frozenset({"slot", "host", "backupOp", "pfSlot"})
_PAGE_WRITES = frozenset(NODE_VARS) | {"len", "slot"}


@pytest.mark.parametrize("seed", range(16))
def test_dirty_elements_cover_every_change(seed):
    """The incremental checks are sound only if the map reports dirty every element whose
    predicate can have changed: after every event, what `domains` hands the checks must
    contain what the two mapped states say changed (steps that change the constants
    binding are checked over whole domains by the monitor and are skipped here)."""
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy, prefetch_policy=("best_effort", "wait_complete")[seed % 2])
    inc = IncrementalHostTierMap(cache)
    prev = [inc.state(), inc.constants(), list(inc.keys)]
    compared = [0]

    def listener(action, fields):
        inc.bind(str(action), fields)
        if action == LOADER_EVENT:
            return
        delta, acc = inc.sync()
        # (each sync's dirty sets are its own: the map clears them in place at every sync, so a
        # set left filled would carry an earlier event's elements into this one's checks; a
        # sync that wrote no variable a slot's or a page's predicate reads reports none dirty)
        wrote = set(delta[0::3])       # (a delta is flat: variable, key, old value a write)
        assert not acc["HSlots"] or wrote & _SLOT_VARS, (action, sorted(acc["HSlots"]), sorted(wrote))
        assert not acc["Nodes"] or wrote & _PAGE_WRITES, (action, sorted(acc["Nodes"]), sorted(wrote))
        # (what `domains` hands on unsearched under the map's own binding: every dirty
        # position one of its positions, every dirty request a row of its req)
        assert all(0 <= p < inc.cap for p in acc["Nodes"]), (action, sorted(acc["Nodes"]), inc.cap)
        assert acc["Reqs"] is None or all(1 <= q <= len(inc.s["req"]) for q in acc["Reqs"]), (action, acc["Reqs"])
        # (the monitor reads the key and the domains from what the sync kept: synced_key the
        # key constants_key() makes, own_domains whether domains under the map's own
        # binding is the dict itself, and that dict's sets the map's own dirty sets)
        assert inc.synced_key == inc.constants_key(), (action, inc.synced_key, inc.constants_key())
        own = spec.constants(inc.constants())
        assert inc.own_domains == (inc.domains(own, acc) is acc), action
        assert acc["Nodes"] is inc.dirty_nodes and acc["HSlots"] is inc.dirty_slots, action
        # (the monitor skips the effect check of an action the sync leaves out of effect_due:
        # on this sync's state that check, of any action, finds nothing)
        assert inc.effect_due <= inc.effect_actions
        for a in inc.effect_actions - inc.effect_due:
            assert inc.effect(a, fields) is None, (action, a)
        after, consts, keys = inc.state(), inc.constants(), list(inc.keys)
        if consts == prev[1]:
            C = spec.constants(consts)
            D = inc.domains(C, acc)
            for dom, want in expected_dirty(prev[0], after, prev[2], keys).items():
                missing = want - set(D[dom])
                assert not missing, f"{action} {fields}: {dom} {sorted(missing)} changed but not dirty"
            compared[0] += 1
        prev[:] = [after, consts, keys]
    cache.bus.subscribe(listener)
    run_workload(cache, reqs)
    assert compared[0] > 20


def test_a_violation_found_incrementally_has_the_full_history(tmp_path):
    from hicache.monitors.faults import RUNTIME_FAULTS
    wcfg = WorkloadConfig()
    for seed in range(30):
        policy, reqs = plan(seed, wcfg)
        cache = make_cache(wcfg, policy, cls=RUNTIME_FAULTS[8])
        mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
        cache.bus.subscribe(mon)
        try:
            run_workload(cache, reqs)
        except ProtocolViolation as e:
            assert e.property == "SlotInOneOwner" and e.trace_path
            states = [h.state for h in e.history]
            assert all(st is not None for st in states)
            assert e.diff, "the violating step changed the mapped state"
            # the failure names its witness slot, and the last state agrees with what it says
            import re
            m = re.search(r'\[h = (\d+) \(runtime slot (\d+)\): slot\[h\] = "(\w+)" with t = (\d+) tree', e.conjunct)
            assert m, e.conjunct
            h, runtime_slot, st, t = int(m[1]), int(m[2]), m[3], int(m[4])
            last = states[-1]
            assert runtime_slot == h - 1 and last["slot"][h - 1] == st
            assert t == sum(1 for n in range(last["len"]) if last["host"].d[n] == h)
            return
    pytest.fail("bug 8 never fired")


def test_hicache_verify_env_attaches_a_monitor_without_importing_verified(monkeypatch, tmp_path):
    """HICACHE_VERIFY=strict alone: the cache carries the incremental monitor, checks every
    event, and runs the final cache check at close; off attaches nothing."""
    import sys

    from hicache.monitors import attach
    wcfg = WorkloadConfig(requests=12)
    policy, reqs = plan(3, wcfg)
    if "hicache.verified" in sys.modules:
        # (the run's own verified mode, --hicache-verify: its attaching __init__ off for this
        # test, restored by tests/conftest.py after it)
        sys.modules["hicache.verified"].disable()
    monkeypatch.setattr(attach, "_chosen", [None])        # no verified mode chosen in code
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    cache = make_cache(wcfg, policy)
    mon = attach.monitor_of(cache)
    assert mon is not None and isinstance(mon.rmap, IncrementalHostTierMap)
    assert attach.attach(cache, mon.cfg) is mon          # idempotent: one monitor per cache
    checks = []
    real = mon.cache_check
    mon.cache_check = lambda: (checks.append(1), real())[1]
    run_workload(cache, reqs)                            # closes the cache
    assert mon.steps > 10 and mon.checked == mon.steps and checks == [1]
    monkeypatch.setenv("HICACHE_VERIFY", "off")
    assert attach.monitor_of(make_cache(wcfg, policy)) is None


@pytest.mark.parametrize("chosen", ["sample", "off"])
def test_verified_mode_chosen_in_code_wins_over_hicache_verify(monkeypatch, tmp_path, chosen):
    """HICACHE_VERIFY=strict in the environment, another mode chosen in code (enable, or the
    pytest option): the code's choice holds, with its violation directory; the environment
    attached its own strict monitor first, and the code's config was silently dropped."""
    from hicache import verified
    from hicache.monitors import attach
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    wcfg = WorkloadConfig(requests=12)
    policy, reqs = plan(3, wcfg)
    try:
        verified.enable(chosen, violation_dir=str(tmp_path / "mine"))
        cache = make_cache(wcfg, policy)
        mon = attach.monitor_of(cache)
        if chosen == "off":
            assert mon is None
        else:
            assert mon is not None and mon.cfg.mode.value == "sample"
            assert mon.cfg.violation_dir == str(tmp_path / "mine")
            checks = []
            real = mon.cache_check
            mon.cache_check = lambda: (checks.append(1), real())[1]
        run_workload(cache, reqs)                        # closes the cache
        if chosen != "off":
            assert checks == [1]                         # one final check, not one per attacher
        verified.disable()
        assert attach.monitor_of(make_cache(wcfg, policy)) is None
    finally:
        verified.disable()


def test_sample_mode_defers_the_map_and_still_catches(tmp_path):
    """Sample mode syncs the map only at sampled steps; the sampled check covers every change
    since the last one, so a leak is still reported (at a later step), and the trace's
    states are those of the synced steps."""
    from hicache.monitors.faults import RUNTIME_FAULTS
    wcfg = WorkloadConfig()
    for seed in range(30):
        policy, reqs = plan(seed, wcfg)
        cache = make_cache(wcfg, policy, cls=RUNTIME_FAULTS[8])
        mon = Monitor(IncrementalHostTierMap(cache),
                      VerifyConfig(mode="sample", sample_rate=0.2, seed=seed, sample_budget=None,
                                   violation_dir=str(tmp_path)))
        cache.bus.subscribe(mon)
        try:
            run_workload(cache, reqs)
        except ProtocolViolation as e:
            assert e.property == "SlotInOneOwner"
            assert 0 < mon.checked < mon.steps
            synced = [h for h in e.history if h.delta is not None]
            assert synced and all(h.state is not None for h in synced)
            assert all(h.state is None for h in e.history if h.delta is None)
            return
    pytest.fail("bug 8 never fired or was never caught in sample mode")


@pytest.mark.hicache_unmonitored
def test_two_incremental_maps_of_one_cache_both_stay_exact():
    """Verified mode's map and a test's own map on the same cache: the tracked node class is
    shared, each map gets every write (the second map must not blind the first)."""
    import gc
    wcfg = WorkloadConfig()
    policy, reqs = plan(5, wcfg)
    cache = make_cache(wcfg, policy)
    pairs = [(m, Compare(cache, m)) for m in (IncrementalHostTierMap(cache), IncrementalHostTierMap(cache))]

    def both(action, fields):
        for m, c in pairs:
            m.bind(str(action), fields)
            if action != LOADER_EVENT:
                m.sync()
            c(action, fields)
    cache.bus.subscribe(both)
    run_workload(cache, reqs)
    assert pairs[0][1].events == pairs[1][1].events > 20
    journals = type(cache.tree.root)._hicache_journals
    assert all(len(js) == 2 for js in journals.values())      # each watched field: both maps
    pairs.clear()
    cache.bus.listeners = []
    gc.collect()
    assert all(js == [] for js in journals.values())     # a collected map's journal leaves the tree's class


def test_the_domain_grows_when_the_tree_outgrows_it(tmp_path):
    """When the tree holds more pages than the domain has positions, the map doubles the
    domain (forced here by starting from two positions), stays equal to the reference map
    and raises nothing."""
    wcfg = WorkloadConfig(requests=20)
    policy, reqs = plan(7, wcfg)
    cache = make_cache(wcfg, policy)
    inc = IncrementalHostTierMap(cache)
    inc._grow(inc.cap)          # no-op growth keeps the domain
    assert inc.cap == wcfg.device_pages + wcfg.host_pages + 1
    # shrink the domain to its minimum so that the workload forces growth
    for d in inc.funcs.values():
        for q in range(2, inc.cap):
            del d[q]
    inc.cap = 2
    mon = Monitor(inc, VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    cmp = Compare(cache, inc)
    cache.bus.subscribe(cmp)
    run_workload(cache, reqs)
    assert inc.cap > 2 and cmp.events > 10


def _wt_cases(seeds):
    """(cache, incremental map) after write-through workloads, with nothing pending."""
    wcfg = WorkloadConfig(storage=False)
    for seed in seeds:
        policy, reqs = plan(seed, wcfg)
        if policy != "write_through":
            continue
        cache = make_cache(wcfg, policy)
        inc = IncrementalHostTierMap(cache)
        run_workload(cache, reqs)
        cache.drain()
        yield cache, inc


def test_write_through_prefix_tree_form_finds_a_broken_prefix():
    """The incremental tree form of WriteThroughPrefix checks the pages of every node with a
    dirty page and the first pages of its children: a node whose host copy is not a copy
    any more (a device->host write in flight on it again: backupOp, not host) breaks the
    prefix for the first page of a child node that keeps one; found from the dirty pages
    the map reports, as the reference tree form finds it on the whole state. (A break
    inside one node cannot arise: a node's pages are written by one op.)"""
    from hicache.monitors.maps.host_tier import write_through_prefix_tree

    class Writing:                  # a device->host write of the node's slots, in flight
        writes_host = True
    found = 0
    for cache, inc in _wt_cases(range(40)):
        C = spec.constants(inc.constants())
        inc.sync()
        nodes = [x for x in cache.tree.nodes() if x.host is not None]
        for x in [x.parent for x in nodes if x.parent in nodes][:4]:
            op = Writing()
            x.inflight.append(op)
            inc.requeue.add(x)      # (what the BackupStart event does)
            _, acc = inc.sync()
            got = inc.write_through_prefix_inc(C, inc.live(), inc.domains(C, acc))
            ref = write_through_prefix_tree(spec.constants(inc.reference_constants()), inc.reference_state())
            assert got is not None and ref is not None, x.id
            assert got.property == "WriteThroughPrefix"
            found += 1
            x.inflight.remove(op)
            inc.requeue.add(x)
            _, acc = inc.sync()
            assert inc.write_through_prefix_inc(C, inc.live(), inc.domains(C, acc)) is None
    assert found >= 3, found


@pytest.mark.parametrize("seed", range(8))
def test_workloads_whose_copies_fail_raise_no_false_alarm(seed, tmp_path):
    """Copies that fail, each a miss the cache counts: every third load-back's copy at its
    second layer (the load counted failed, its device copies dropped, `_drop_failed_load`,
    with no event of their own before its LoadBackFail), every fourth device->host backup
    copy, every fifth storage write (no fetch of these workloads gets as far as a storage
    read). Strict mode raises nothing. Without the frame check's exception for a failed
    load's drops (host_tier_guards._dropped_by_failed_load) 7 of these 8 seeds raised."""
    wcfg = WorkloadConfig()
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy)
    backups, sets = failing_copies(cache)        # every third load, fourth backup, fifth storage write
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    run_workload(cache, reqs)
    m = cache.metrics
    assert m.load_failures > 0 and mon.checked == mon.steps > 20
    assert m.backup_failures == backups.raised and m.storage_backup_failures == sets.raised > 0


#: seeds of the small workload below whose fetches join pages to the tree (most do not:
#: a fetch hits only where the host evicted what storage still holds)
_JOINING_SEEDS = (0, 1, 5, 6, 9, 10, 11)


@pytest.mark.parametrize("seed", _JOINING_SEEDS)
def test_workloads_whose_fetches_join_raise_no_false_alarm(seed, tmp_path):
    """A small tree (6 device pages, 6 host slots, one-token pages) whose fetches wait for
    storage (`wait_complete`), so some join host-only nodes below their request's node, with
    the copies failing as above: strict mode raises nothing. The steps' frames and the node
    actions' own writes (host_tier_guards.FRAMES, WRITES) are judged at each event; 800
    runs of this and three other workload shapes, clean and failing, raised nothing (the
    frames' sweep in docs/monitors.md)."""
    wcfg = WorkloadConfig(requests=60, device_pages=6, host_pages=6, max_pages=6, page_size=1)
    policy, reqs = plan(seed, wcfg)
    cache = make_cache(wcfg, policy, prefetch_policy="wait_complete")
    failing_copies(cache)
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    joined = []
    cache.bus.subscribe(lambda action, f: joined.append(f["joined"]) if action == "PrefetchFinish" and f.get("joined")
                        else None)
    run_workload(cache, reqs)
    assert joined and mon.checked == mon.steps > 20 and not mon.tripped


def test_the_node_guards_name_the_page_that_breaks_them():
    """The node guards' per-page conjuncts, each broken at one page of a node's positions
    (the map's state written directly, as a runtime bug would leave it): DeviceEvict's
    DevEvictable (a copy to host still reading a page), BackupStart's host[n] = NoSlot (a
    page already holding a slot) and backupOp[n] = NoSlot (a copy in flight), and its
    IdleSlots (the event's slot not idle), each naming the page; on the untouched state
    the same guards hold."""
    from hicache.monitors.maps.host_tier_guards import check
    wcfg = WorkloadConfig(requests=12, storage=False, prefetch_rate=0.0, abort_rate=0.0)
    _, reqs = plan(1, wcfg)
    cache = make_cache(wcfg, "write_back")
    for toks, what in reqs:
        serve_one(cache, toks, what)
        cache.drain()
    m = IncrementalHostTierMap(cache)
    f = m.funcs
    # a node with a device copy, no host copy (write_back: none before its eviction),
    # nothing in flight, more than one page
    x = next(y for y, pos in m.npos.items() if len(pos) >= 2 and f["dev"][pos[-1]]
             and not any(f["host"][q] or f["backupOp"][q] for q in pos) and not y.children)
    pos = m.npos[x]
    idle = [h for h, name in enumerate(m.slot_names) if name == "idle"][:len(pos)]
    start = {"node": x.id, "slots": idle, "requested": True}
    assert check(m, "BackupStart", start) is None
    # (DevEvictable, conjunct 1, holds: a leaf no request locks; conjunct 2 fails, write_back
    # never drops a node's only copy)
    assert check(m, "DeviceEvict", {"node": x.id}).index == 2

    def broken(action: str, fields: dict, var: str, value) -> object:
        old = f[var][pos[1]]
        f[var][pos[1]] = value
        try:
            return check(m, action, fields)
        finally:
            f[var][pos[1]] = old
    got = broken("BackupStart", start, "host", 3)
    assert (got.property, got.index) == ("BackupStart", 3) and f"position {pos[1]} already has host slot 3" in got.text
    got = broken("BackupStart", start, "backupOp", 4)
    assert (got.property, got.index) == ("BackupStart", 4) and f"page at position {pos[1]} is already" in got.text
    got = broken("DeviceEvict", {"node": x.id}, "backupOp", 4)
    assert (got.property, got.index) == ("DeviceEvict", 1) and f"position {pos[1]} (backupOp" in got.text
    busy = [h for h, name in enumerate(m.slot_names) if name != "idle"]     # (other nodes' host copies)
    got = check(m, "BackupStart", {**start, "slots": [*idle[:-1], busy[0]]})
    assert (got.property, got.index) == ("BackupStart", 7) and f"slot {busy[0] + 1} (runtime slot {busy[0]})" in got.text
    got = check(m, "BackupStart", {**start, "slots": [*idle[:-1], len(m.slot_names)]})
    assert (got.property, got.index) == ("BackupStart", 7) and "not a host slot" in got.text
