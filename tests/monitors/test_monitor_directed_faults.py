"""Faults outside the bug zoo that the HostTier monitors once missed, each injected by hand
into a tiny cache at one step: strict mode raises at that step (or the next), naming the
property. Found by a QA sweep; each was missed (or caught late) before its map fix."""
from __future__ import annotations

import threading

import pytest

from hicache.monitors.runtime import ProtocolViolation
from hicache.monitors.workload import failing_loads
from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from tiny_cache import SlowStore, serve, tiny_cache, to_storage_only


def _blocked_loads(c):
    """Load-backs stay in flight until the returned event is set."""
    gate = threading.Event()
    layer_fn = c._load_layer_fn

    def fn(op):
        copy = layer_fn(op)
        return lambda layer: (gate.wait(10), copy(layer))
    c._load_layer_fn = fn
    return gate


def _load_pending_after_its_request(c):
    """Pages [1, 2] served, evicted to host, matched again and loaded back under a blocked
    loader, the request finished: (the loader's gate, the load op still in flight, its node)."""
    serve(c, [1, 2])
    c.evict_device(2)
    gate = _blocked_loads(c)
    r = c.match([1, 2])
    op = c.load_back(r)
    c.finish(r)
    assert not op.done.is_set()
    return gate, op, op.nodes[0]


def _fetch_in_flight(tmp_path):
    """(cache, its store, a request) of a strict tiny cache whose request's fetch is in
    flight, the store's batch_get held until `store.gate` is set."""
    st = SlowStore()
    st.gate.set()
    c, _ = tiny_cache(tmp_path, dict(mode="strict"), storage=st, prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    st.gate.clear()
    r = c.match([1, 2, 3, 4])
    assert c.prefetch(r) and st.inside.wait(10)
    return c, st, r


def test_prefetch_slots_freed_while_the_worker_still_writes_them(tmp_path):
    """An abort that frees its prefetch's slots at once (bug 12's use-after-free on the
    prefetch path): the map took in-flight prefetches from the cache's own table, which
    the faulty abort cleared; it reads the prefetch worker's queue too."""
    c, st, r = _fetch_in_flight(tmp_path)
    op = r.prefetch
    # the fault: the slots go back to IDLE and the op is forgotten, the worker still running
    op.terminate = True
    r.prefetch = None
    c.tree.host_anchor(op.anchor, -1)
    c._prefetching.discard(op)
    c._prefetch_slots -= len(op.slots)
    c.host.move(op.slots, S.RESERVED, S.IDLE)
    c.tree.unlock(r.node)
    r.done = True
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.RequestAbort, rid=r.rid)
    assert e.value.property == "SlotInOneOwner" and e.value.action == "RequestAbort"
    st.gate.set()


@pytest.mark.parametrize("guards", [True, False], ids=["guard", "invariant"])
def test_a_pending_loads_slots_freed_after_its_request_finished(tmp_path, monkeypatch, guards):
    """Bug 10 after the request finished: the runtime polls the load's LoadBackFinish after
    the request's RequestFinish, and the map had dropped the request (and the loadReq of its
    pages) at RequestFinish, so freeing the load's PROTECTED slots went unseen. Now HostEvict's
    guard (the slot is not SYNCED) names it at the step; without the guards, the invariant
    the map fix restored still does."""
    if not guards:
        from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
        monkeypatch.setattr(IncrementalHostTierMap, "guard", None)
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4)
    gate, op, x = _load_pending_after_its_request(c)
    slots = c.tree.drop_host(x)                # the fault: the load's slots freed
    with c.host._lock:
        for h in slots:
            c.host.state[h] = int(S.IDLE)
        c.host._pages.release(slots)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.HostEvict, node=x.id, slots=slots)
    if guards:
        assert e.value.property == "HostEvict" and e.value.kind == "action"
        assert '"protected", not "synced"' in e.value.conjunct
    else:
        assert e.value.property == "PendingLoadLocked"
    gate.set()
    op.wait()


def test_a_node_left_marked_loading_after_its_load_finished(tmp_path):
    """LoadBackFinish that does not clear node.loading: its request has ended, so the page's
    loadReq names no request (it mapped to NoReq, and the stale mark went unseen)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    serve(c, [1, 2])
    c.evict_device(4)
    r = c.match([1, 2])
    op = c.load_back(r)
    op.wait()
    x = op.nodes[0]
    c.finish(r)
    c.poll()                                   # LoadBackFinish: the request ends here
    x.loading = op                             # the fault: the mark left behind
    with pytest.raises(ProtocolViolation) as e:
        serve(c, [5])                          # the next event
    assert e.value.property == "TypeOK" and "loadReq" in e.value.conjunct


def _backup_in_flight(c):
    """Serve [1, 2] with the device->host copy held: (its node, the gate that releases it)."""
    gate = threading.Event()
    copy = c._copy_to_host
    c._copy_to_host = lambda op: (gate.wait(10), copy(op))
    r = c.match([1, 2])
    c.insert(r, c.alloc(2))
    c.finish(r)
    (op,) = [op for op in c.writer.acks]
    return op.nodes[0], gate


def test_a_backups_slots_marked_readable_while_the_copy_runs(tmp_path):
    """SYNCED (readable, evictable) at the copy's start, not its end: the map inferred "a
    copy in flight" from the slots being RESERVED, the very state at fault, and mapped them
    as a readable host copy; it reads the writer's op attached to the node now."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, gate = _backup_in_flight(c)
    c.host.move(list(x.host), S.RESERVED, S.SYNCED)            # the fault
    with pytest.raises(ProtocolViolation) as e:
        c.match([7])
    assert e.value.property == "SlotInOneOwner"
    gate.set()


def test_a_backup_finish_that_leaves_its_slots_reserved(tmp_path):
    """BackupFinish forgetting RESERVED -> SYNCED: caught at that BackupFinish (it was
    caught ten events later, by TreeCopiesConsistent at a device eviction)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, gate = _backup_in_flight(c)
    move = c.host.move

    def forgetful(slots, src, dst):
        if (src, dst) != (S.RESERVED, S.SYNCED):
            move(slots, src, dst)
    c.host.move = forgetful                                     # the fault
    gate.set()
    with pytest.raises(ProtocolViolation) as e:
        c.drain()
    assert e.value.property == "SlotInOneOwner" and e.value.action == "BackupFinish"


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_a_live_requests_locked_node_deleted_from_the_tree(tmp_path, mode):
    """A host eviction that ignores a live request's lock deletes the node it matched: its
    locked prefix is beyond the tree (LockedNodesKept). The maps gave live requests reqLen
    0 whatever they locked, so only prefetch pseudo-requests were ever checked."""
    verify = dict(mode=mode) if mode == "strict" else dict(mode=mode, sample_rate=1.0, sample_budget=None)
    c, mon = tiny_cache(tmp_path, verify, device_pages=2, host_pages=4)
    serve(c, [1, 2])
    c.evict_device(2)
    r = c.match([1, 2])
    v = r.node
    assert v.lock_ref == 1 and not c.tree.host_evictable(v)
    with pytest.raises(ProtocolViolation) as e:
        c._evict_host(v)                                        # the fault: the lock ignored
    if mode == "strict":
        # strict: HostEvict's guard names it at the step, on the state before it
        assert e.value.property == "HostEvict" and e.value.kind == "action"
        assert "locked prefix (dev[n] \\/ ~Locked(n))" in e.value.conjunct
    else:
        # sample mode checks no guard (its map keeps no state before an event)
        assert e.value.property == "LockedNodesKept" and e.value.action == "HostEvict"


# --- eviction guards (hicache/monitors/maps/host_tier_guards.py): faults that leave a
# legal-looking state, so no invariant sees them afterwards; strict mode checks the spec
# action's guard in tree form on the state before the event

def test_a_locked_nodes_device_copy_evicted_keeping_its_host_copy(tmp_path, monkeypatch):
    """A device eviction that ignores a live request's lock: the node keeps its host copy,
    so it stays in the tree and every invariant holds after it; the request then reads
    device pages that were freed. DevEvictable's ~Locked(n), in tree form."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4)
    serve(c, [1, 2])
    r = c.match([1, 2])
    v = r.node
    assert v.lock_ref == 1 and v.host is not None and v.device is not None
    with pytest.raises(ProtocolViolation) as e:
        c._evict_device(v)                                      # the fault: the lock ignored
    assert (e.value.property, e.value.kind, e.value.action) == ("DeviceEvict", "action", "DeviceEvict")
    assert f"live request {r.rid}'s locked prefix (~Locked(n))" in e.value.conjunct
    assert e.value.location.startswith("spec/HostTier.tla:")
    # without the guard the same fault passes every invariant: the guard is what sees it
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    monkeypatch.setattr(IncrementalHostTierMap, "guard", None)
    c2, mon2 = tiny_cache(tmp_path / "unguarded", dict(mode="strict"), device_pages=2, host_pages=4)
    serve(c2, [1, 2])
    r2 = c2.match([1, 2])
    c2._evict_device(r2.node)
    assert r2.node.device is None and r2.node.host is not None and not mon2.tripped
    assert mon2.checked == mon2.steps > 0          # every event checked, every invariant held
    c2.finish(r2)
    c2.close()


def test_write_back_dropping_a_pages_only_copy(tmp_path):
    """write_back evicts a device copy that was never backed up (its blocking copy skipped):
    the node leaves the tree with its KV, a state the invariants accept (a cold cache).
    DeviceEvict's second conjunct: no host copy only when policy # "write_back"."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4, write_policy="write_back")
    r = serve(c, [1, 2])
    v = r.node
    assert v.host is None and v.device is not None and v.lock_ref == 0
    c._backup_sync = lambda v: True                             # the fault: the copy skipped
    with pytest.raises(ProtocolViolation) as e:
        c._evict_device(v)
    assert e.value.property == "DeviceEvict"
    assert "write_back dropped node" in e.value.conjunct and e.value.failure.index == 2


def test_a_device_copy_evicted_while_its_load_back_fills_it(tmp_path):
    """A device eviction of a node whose load-back is still in flight (its request ended):
    the load writes into device pages the allocator already handed back. DevEvictable's
    loadReq[n] = NoReq."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4)
    gate, op, x = _load_pending_after_its_request(c)
    assert x.loading is op and x.lock_ref == 0
    try:
        with pytest.raises(ProtocolViolation) as e:
            c._evict_device(x)                                  # the fault: the load ignored
        assert e.value.property == "DeviceEvict" and "load-back into node" in e.value.conjunct
    finally:
        gate.set()
        op.wait()


@pytest.mark.parametrize("cut_loose", [False, True], ids=["children-kept", "children-cleared"])
def test_an_eviction_that_deletes_a_whole_subtree_is_judged_on_the_children_it_had(tmp_path, cut_loose):
    """One DeviceEvict event for a device-only parent whose device-only child the same
    faulty eviction deleted: the guard read the node's children from the live tree (after
    the event), so clearing `children` with the subtree hid the child, and the state after
    is legal (QA). It reads the map's shape as of the last sync now (~dev[n + 1])."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=4, host_pages=8,
                        write_policy="write_through_selective")
    serve(c, [1, 2, 3, 4])
    c.abort(c.match([1, 2, 5]))                      # split: a = [1, 2] above b = [3, 4]
    a = next(iter(c.tree.root.children.values()))
    b = next(iter(a.children.values()))
    assert a.host is None and b.host is None and a.device and b.device and a.lock_ref == 0
    pages = a.device + b.device
    del c.tree.root.children[a.key[:c.tree.pb]]      # the fault: the subtree goes with a
    c.tree.root.dev_children -= 1
    for x in (b, a):
        x.parent = None
        x.device = None
    c.tree.device_pages -= a.n + b.n
    if cut_loose:
        a.children.clear()
    c.dev_alloc.release(pages)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.DeviceEvict, node=a.id, pages=len(pages), kept_host=False)
    assert e.value.property == "DeviceEvict" and f"child node {b.id} keeps a device copy" in e.value.conjunct


# --- the other guards in tree form: a backup, a load-back, a storage write started where
# the spec's action may not start (host_tier_guards.py); each fault leaves a state some or
# every invariant accepts, so only the guard, on the state before the event, sees it

def _split(c):
    """[1, 2, 3, 4] served, then split by a match of [1, 2, 5]: (a = [1, 2], b = [3, 4]
    below it), neither backed up (write_through_selective: one hit each)."""
    serve(c, [1, 2, 3, 4])
    c.abort(c.match([1, 2, 5]))
    a = next(iter(c.tree.root.children.values()))
    b = next(iter(a.children.values()))
    assert a.host is None and b.host is None and a.device and b.device
    return a, b


def test_a_backup_before_the_write_policy_asks_for_it(tmp_path):
    """write_through_selective backs a node up on its second hit; a policy backup of a node
    hit once (a threshold off by one) leaves a legal state. BackupDue(n), named with the
    hits the node had; the same backup asked for by the engine (`backup()`: the PD
    handoff's) is not the policy's and passes."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), write_policy="write_through_selective")
    r = serve(c, [1, 2])
    v = r.node
    assert v.host is None and v.hit_count == 1
    with pytest.raises(ProtocolViolation) as e:
        c.backup(v, 1, requested=False)                     # the fault: the policy's threshold 1, not 2
    assert (e.value.property, e.value.kind, e.value.action) == ("BackupStart", "action", "BackupStart")
    assert e.value.failure.index == 5 and "BackupDue(n)" in e.value.conjunct
    assert "has 1 hit (min(hits, 2)); write_through_selective backs up at 2" in e.value.conjunct
    c2, mon2 = tiny_cache(tmp_path / "asked", dict(mode="strict"), write_policy="write_through_selective")
    v2 = serve(c2, [1, 2]).node
    assert c2.backup(v2) == 1 and not mon2.tripped          # the engine's own request
    c2.drain()
    assert v2.host is not None and not mon2.tripped
    c2.close()


@pytest.mark.hicache_unmonitored
def test_a_write_through_backup_of_a_child_before_its_parent(tmp_path):
    """Write-through host copies form a prefix from the root: a child's backup may start
    only once its parent's has (ParentBackedOrGoing). Started out of order, the state after
    it is legal (a copy in flight is no host copy yet)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=4, host_pages=8,
                        write_policy="write_through_selective")
    a, b = _split(c)
    with pytest.raises(ProtocolViolation) as e:
        c._backup_start(b, requested=True)                  # the fault: b first, a never
    assert e.value.property == "BackupStart" and e.value.failure.index == 6
    assert f"parent node {a.id} has no host copy and none being written" in e.value.conjunct
    c.drain()


def test_a_backup_into_slots_another_node_holds(tmp_path):
    """A backup whose slots were not IDLE (an allocator that hands out a held slot): the
    event names them. `\\E h \\in IdleSlots` on the slots' states before it."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), write_policy="write_through_selective")
    v = serve(c, [1, 2]).node
    w = serve(c, [3, 4]).node
    assert c.backup(v) == 1
    c.drain()
    held = list(v.host)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.BackupStart, node=w.id, slots=held, blocking=False, requested=True)
    assert e.value.property == "BackupStart" and e.value.failure.index == 7
    assert f"(runtime slot {held[0]}) is \"synced\", not \"idle\"" in e.value.conjunct


def test_a_backup_of_a_node_with_no_device_copy(tmp_path):
    """A backup of a host-only node (its device pages were freed: the copy would read
    pages another node owns now). dev[n]."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    c._evict_device(v)
    assert v.device is None and v.host is not None
    slots = c.host.reserve(v.n)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.BackupStart, node=v.id, slots=slots, blocking=False)
    assert e.value.property == "BackupStart" and e.value.failure.index == 2
    assert "no device copy to back up (dev[n])" in e.value.conjunct


def test_a_load_back_of_a_node_that_has_its_device_copy(tmp_path):
    """A load-back of a node that is not host-only (its device copy would be overwritten
    while requests read it): not in ToLoad(q)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    r = c.match([1, 2])
    assert v.device is not None and v.host is not None
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.LoadBackStart, rid=r.rid, nodes=[v.id], slots=list(v.host), pages=list(v.device))
    assert e.value.property == "LoadBackStart" and e.value.failure.index == 3
    assert "has a device copy: not host-only, not in ToLoad(q)" in e.value.conjunct


@pytest.mark.hicache_unmonitored
def test_a_storage_write_of_a_node_already_stored(tmp_path):
    """A storage write of a node storage already holds (its `stored` flag lost): ~stor[n]."""
    from hicache.monitors.workload import MemStore
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    v = serve(c, [1, 2]).node
    assert v.stored and v.host is not None
    v.stored = False                                        # the fault: the flag forgotten
    with pytest.raises(ProtocolViolation) as e:
        c._storage_backup_start(v)
    assert e.value.property == "StorageBackupStart" and e.value.failure.index == 4
    assert "already in storage (~stor[n])" in e.value.conjunct
    c.drain()


def test_a_storage_write_ending_on_slots_it_never_held(tmp_path):
    """A StorageBackupFinish for a node whose slots were SYNCED, not BACKUP (an ack of a
    write that never started, or popped twice): slot[host[n]] = "backup"."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.StorageBackupFinish, node=v.id, ok=True)
    assert e.value.property == "StorageBackupFinish" and e.value.failure.index == 3
    assert "is \"synced\", not \"backup\"" in e.value.conjunct


# the request actions' guards and the acks' (host_tier_guards.py, REQUEST_GUARDS and
# BackupFinish): an event of a request that has ended, or an ack of a copy that never ran

def _no_finished_check(monkeypatch):
    """The fault: the runtime's "this request has ended" check removed (`_live`)."""
    import hicache.runtime.cache as runtime_cache
    monkeypatch.setattr(runtime_cache, "_live", lambda req: None)


def test_a_request_finished_twice_releases_another_requests_lock(tmp_path, monkeypatch):
    """A double finish with a second request on the same prefix: the lock count stays >= 0
    (the other request's lock is the one released), so the runtime's own assertion is
    silent and the state after it is legal; only later would the unlocked prefix be evicted.
    The request was not live: RequestFinish's req[q] = "running", at that step."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    serve(c, [1, 2])
    r1, r2 = c.match([1, 2]), c.match([1, 2])
    c.finish(r1)
    _no_finished_check(monkeypatch)
    with pytest.raises(ProtocolViolation) as e:
        c.finish(r1)                                         # the fault: r1 again
    assert (e.value.property, e.value.kind, e.value.failure.index) == ("RequestFinish", "action", 1)
    assert f"request {r1.rid} is not live" in e.value.conjunct and 'req[q] = "running"' in e.value.conjunct
    assert r2.node.lock_ref == 0                              # r2's lock is gone: what the step broke


def test_an_insert_by_a_request_that_has_finished(tmp_path):
    """Pages inserted for a request after its finish (a use after finish: its finished flag
    lost): the tree grows below a prefix nobody locks any more, a legal-looking state.
    DeviceInsert's req[q] = "running"."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r = c.match([1, 2])
    c.finish(r)
    r.done = False                                           # the fault: the flag lost
    with pytest.raises(ProtocolViolation) as e:
        c.insert(r, c.alloc(2))                              # the fault: r has ended
    assert (e.value.property, e.value.failure.index) == ("DeviceInsert", 1)
    assert f"request {r.rid} is not live" in e.value.conjunct


def test_two_live_requests_under_one_id(tmp_path):
    """A match under the id of a request still live: the monitor follows requests by id,
    so the two would be one spec request (one's finish unlocking the other's prefix in the
    map). RequestMatch's req[q] = "idle"."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r = c.match([1, 2])
    c.insert(r, c.alloc(2))                                  # r runs
    with pytest.raises(ProtocolViolation) as e:
        c.match([3], rid=r.rid)
    assert (e.value.property, e.value.failure.index) == ("RequestMatch", 1)
    assert f"request {r.rid} is matched again while live (running)" in e.value.conjunct


def test_a_prefetch_into_slots_another_node_holds(tmp_path):
    """A prefetch whose slots were not IDLE (an allocator handing out a held slot): the
    fetched bytes would overwrite a readable host copy. PrefetchStart's \\E h \\in IdleSlots."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    r = c.match([3])
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.PrefetchStart, rid=r.rid, slots=list(v.host), pages=1)
    assert (e.value.property, e.value.failure.index) == ("PrefetchStart", 7)
    assert f"request {r.rid}'s prefetch slot {v.host[0] + 1} (runtime slot {v.host[0]}) is \"synced\"" \
        in e.value.conjunct


def test_a_load_ack_for_slots_no_load_holds(tmp_path):
    """A LoadBackFinish releasing slots that no load-back held (an ack applied twice, or one
    of a load that never started): LoadEnd(q)'s req[q] = "loading", in tree form."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    r = c.match([1, 2])
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.LoadBackFinish, rid=r.rid, nodes=[v.id], slots=list(v.host))
    assert (e.value.property, e.value.failure.index) == ("LoadBackFinish", 1)
    assert "load-back slot" in e.value.conjunct and 'is "synced", not "protected"' in e.value.conjunct


def test_a_backup_ack_with_no_copy_in_flight(tmp_path):
    """A BackupFinish of a node whose copy already ended (an ack applied twice): its slots
    are SYNCED either way, so the state after it is legal. backupOp[n] # NoSlot."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.BackupFinish, node=v.id, slots=list(v.host))
    assert (e.value.property, e.value.failure.index) == ("BackupFinish", 1)
    assert f"no device->host copy of node {v.id}'s page" in e.value.conjunct


def test_a_write_through_childs_ack_before_its_parents(tmp_path):
    """Write-through: a child's copy acknowledged while its parent's is still running (the
    runtime drops such a copy, `_below_no_host_copy`; acks applied out of order would not).
    BackupFinish's ParentBacked(n); the parent's copy ending in the same ack is fine."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=4, host_pages=8,
                        write_policy="write_through_selective")
    a, b = _split(c)
    gate = threading.Event()
    copy = c._copy_to_host
    c._copy_to_host = lambda op: (gate.wait(10), copy(op))
    c._backup_start(a, requested=True)
    c._backup_start(b, requested=True)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.BackupFinish, node=b.id, slots=list(b.host))   # the fault: b's ack before a's
    assert (e.value.property, e.value.failure.index) == ("BackupFinish", 2)
    assert f"parent node {a.id} has no host copy yet (ParentBacked(n)" in e.value.conjunct
    gate.set()
    c.drain()


@pytest.mark.parametrize("action, fields, phase", [
    (A.RequestAbort, {}, "matched"),
    (A.LoadBackStart, dict(nodes=[], slots=[], pages=[]), "matched"),
    (A.PrefetchStart, dict(slots=[], pages=0), "matched"),
    (A.RequestFinish, {}, "running"),
])
def test_a_step_of_a_request_that_has_ended(tmp_path, action, fields, phase):
    """Each request action's first conjunct (req[q] = <phase>) on a request that finished:
    its event fails the guard at once, whatever it moves."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r = serve(c, [1, 2])
    with pytest.raises(ProtocolViolation) as e:
        c._emit(action, rid=r.rid, **fields)
    assert (e.value.property, e.value.failure.index) == (str(action), 1)
    assert f'request {r.rid} is not live' in e.value.conjunct and f'req[q] = "{phase}"' in e.value.conjunct


def test_an_abandoned_fetchs_end_freeing_slots_it_did_not_hold(tmp_path):
    """The end of an abandoned fetch (`orphan`) freeing slots that were not RESERVED (a
    fetch reaped twice, or one whose slot list was another op's): its pfSlot[q] # NoSlot,
    in tree form."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    v = serve(c, [1, 2]).node
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.PrefetchFinish, rid=7, fetched=0, joined=0, slots=list(v.host), orphan=True)
    assert (e.value.property, e.value.failure.index) == ("PrefetchFinish", 1)
    assert "request 7's abandoned fetch slot" in e.value.conjunct and 'is "synced", not "reserved"' in e.value.conjunct


def test_a_second_fetch_of_a_request_whose_first_is_in_flight(tmp_path):
    """A prefetch started for a request whose own fetch is still running (a runtime that
    forgot its `req.prefetch` test): the request's record now names the second, so nothing
    would ever settle the first or free its RESERVED slots, and every state after it is
    legal (two fetch rows, each holding its slots). PrefetchStart's pfSlot[q] = NoSlot."""
    c, st, r = _fetch_in_flight(tmp_path)
    try:
        r.prefetch = None            # the fault: the request's fetch in flight forgotten
        with pytest.raises(ProtocolViolation) as e:
            c.prefetch(r)
    finally:
        st.gate.set()
    assert (e.value.property, e.value.failure.index) == ("PrefetchStart", 2)
    assert f"request {r.rid} already has a fetch in flight" in e.value.conjunct


def test_a_write_through_fetch_below_a_node_whose_host_copy_is_in_flight(tmp_path):
    """Write-through: a prefetch anchored at a node whose backup to host has not landed (a
    runtime that skipped its HostTail test, `_host_tail`). The runtime's join tests HostTail
    again when the fetch ends (pages below a node still without a host copy are freed, not
    joined), so no state after it is illegal: the fetch's slots and storage reads went to
    pages the spec would not fetch. PrefetchStart's HostTail, on the state before it."""
    from hicache.monitors.workload import MemStore
    from hicache.runtime.cache import host_write_in_flight
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    r1 = c.match([1, 2])
    c.insert(r1, c.alloc(2))
    c.finish(r1)                     # (not drained: the node's device->host copy is in flight)
    v = r1.node
    assert host_write_in_flight(v)
    r2 = c.match([1, 2, 3, 4])
    assert r2.node is v
    c._host_tail = lambda node: True     # the fault
    with pytest.raises(ProtocolViolation) as e:
        c.prefetch(r2)
    assert (e.value.property, e.value.failure.index) == ("PrefetchStart", 6)
    assert f"prefix ends at node {v.id}, whose last page has no host copy" in e.value.conjunct


def test_a_write_back_fetch_below_a_device_only_node_is_legal(tmp_path):
    """write_back keeps no HostTail (its host copies are no prefix: a device-only node's
    eviction drops the pages fetched below it first), so the runtime's prefetch below a
    device-only node is no violation there (applied under every policy, the HostTail test
    raises here); the guard's other conjuncts hold."""
    from hicache.monitors.workload import MemStore
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore(), write_policy="write_back")
    serve(c, [1, 2])
    r = c.match([1, 2, 3, 4])
    assert r.node.host is None
    assert c.prefetch(r)
    c.finish_prefetch(r)
    c.finish(r)
    c.drain()
    assert mon.checked == mon.steps and not mon.tripped


def test_a_requests_fetch_settled_twice(tmp_path):
    """A request's PrefetchFinish when its fetch was already settled (a finish_prefetch
    run twice, or an ack delivered twice): it ends nothing, and nothing in the state after
    it shows that. PrefetchFinish's pfSlot[q] # NoSlot, on the state before it."""
    from hicache.monitors.workload import MemStore
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore(), prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    r = c.match([1, 2, 3, 4])
    assert c.prefetch(r)
    assert c.finish_prefetch(r) == 4
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.PrefetchFinish, rid=r.rid, fetched=0, joined=0, node=r.node.id)
    assert (e.value.property, e.value.failure.index) == ("PrefetchFinish", 1)
    assert f"request {r.rid} has no fetch in flight" in e.value.conjunct


def test_a_requests_pages_filed_under_another_prefix(tmp_path):
    """An insert that files a request's new pages under a prefix the request did not match
    (a key mixed up between requests): the tree stays legal, every page in one place, and
    the pages now hold tokens 1-4's KV under tokens 5-8, which the next match of 5-8 reads.
    DeviceInsert's reqLen[q] = len, in tree form: the pages extend the chain the request holds."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=8, host_pages=16)
    held = serve(c, [1, 2]).node
    other = serve(c, [5, 6]).node
    r = c.match([1, 2, 3, 4])
    assert r.node is held
    r.key = c.match([5, 6, 7, 8]).key      # the fault: the key of another request
    with pytest.raises(ProtocolViolation) as e:
        c.insert(r, c.alloc(2))
    assert (e.value.property, e.value.failure.index) == ("DeviceInsert", 2)
    assert f"not below node {held.id} where its prefix ended" in e.value.conjunct
    assert r.node.parent is other


def _load_with_layers(c, layers):
    """Pages [1, 2] served, evicted to host, matched again and loaded back by a loader that
    copies and reports the layers `layers(n)` of its n (the fault: not each of 0..n-1 once);
    the load's ack is polled by `finish`'s drain: (the request, its load op)."""
    from hicache.runtime.transfer import LoadOp
    serve(c, [1, 2])
    c.evict_device(4)
    run = LoadOp.run

    def faulty_run(op):
        for layer in layers(op.layers):
            op._copy_layer(layer)
            with op._cond:
                op.layers_done = max(op.layers_done, layer + 1)
                op._cond.notify_all()
            op._on_layer(layer)
    LoadOp.run = faulty_run
    try:
        r = c.match([1, 2])
        op = c.load_back(r)
        op.wait()
    finally:
        LoadOp.run = run
    return r, op


@pytest.mark.parametrize("layers, missing", [(lambda n: range(n - 1), "missing [1]"),
                                             (lambda n: [0] * n, "missing [1]"),
                                             (lambda n: [*range(n - 1), n], "missing [1]")],
                         ids=["last-layer-skipped", "a-layer-reported-twice", "a-layer-out-of-range"])
def test_a_load_acknowledged_before_its_last_layer_landed(tmp_path, layers, missing):
    """A load-back whose loader stops a layer short (an off-by-one in its layer loop), reports
    one layer twice, or one that does not exist: the ack lets the forward pass read a layer
    that is not on device, and leaves a legal-looking state (every invariant holds after it).
    LoadBackFinish's `\\A n \\in Loading(q) : loadDone[n] = NLayers`, in tree form, names it
    at the ack: loadDone is the layers the load's LoadBackLayer events reported, each once."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, layers)
    with pytest.raises(ProtocolViolation) as e:
        c.finish(r)
        c.drain()
    assert (e.value.property, e.value.failure.index, e.value.action) == ("LoadBackFinish", 2, "LoadBackFinish")
    assert f"of NLayers = {c.cfg.layers}" in e.value.conjunct and missing in e.value.conjunct


def test_a_load_acknowledged_early_passes_every_invariant(tmp_path, monkeypatch):
    """Without the ack's layer check the same fault goes through: nothing after the ack
    sees it (the reason the check is a guard on the state before the event)."""
    from hicache.monitors.maps import host_tier_guards as G
    monkeypatch.setitem(G.REQUEST_GUARDS, "LoadBackFinish", G._load_end)
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, lambda n: range(n - 1))
    c.finish(r)
    c.drain()
    serve(c, [3])
    c.close()
    assert op.layers_done == c.cfg.layers - 1 and mon.checked > 0


def test_every_layer_of_a_load_landing_is_legal_in_any_order(tmp_path):
    """The check counts the layers that landed, not their order."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), layers=3)
    r, op = _load_with_layers(c, lambda n: reversed(range(n)))
    c.finish(r)
    c.drain()
    c.close()
    assert mon.checked > 0 and not mon.tripped and mon.rmap._layers == {}


def _late_layer(c, op):
    """A layer of `op` reported after its ack (a straggling loader, emitting on its thread
    as the cache's layer callback does)."""
    op._on_layer(0)


def _layer_of_no_load(c, op):
    """A layer of a load-back no LoadBackStart began (nodes the loader was never given)."""
    c._emit(A.LoadBackLayer, rid=op.rid, nodes=[10_000], layer=0)


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("fault", [_late_layer, _layer_of_no_load], ids=["after-its-ack", "of-no-load"])
def test_a_layer_of_a_load_not_in_flight(tmp_path, fault):
    """A loader still copying after its load's ack (the cache gave it up: the device pages
    it writes may hold another node's KV by now), or one reporting a layer of nodes it was
    never given: LoadBackLayer's `loadReq[n] # NoReq`. Judged where the event comes, on the
    loader's thread, from the loads the events started and acknowledged (no state read),
    and reported at the monitor's next step, before that step is judged, with the layer's
    event as the trace's last step."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, range)
    c.finish(r)
    c.drain()
    steps = mon.steps
    fault(c, op)
    assert mon.rmap.breach is not None and not mon.tripped       # (nothing raised on that thread)
    with pytest.raises(ProtocolViolation) as e:
        serve(c, [3])
    v = e.value
    assert (v.action, v.property, v.failure.index) == ("LoadBackLayer", "LoadBackLayer", 1)
    assert "not in flight" in v.conjunct and v.conjunct.startswith("loadReq[n] # NoReq")
    assert v.history[-1].action == "LoadBackLayer" and v.history[-1].args["layer"] == 0
    assert mon.steps == steps + 1 and mon.tripped


def test_a_layer_of_a_load_not_in_flight_at_a_cache_check(tmp_path):
    """With no step after it, the cache check reports it."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, range)
    c.finish(r)
    c.drain()
    _late_layer(c, op)
    with pytest.raises(ProtocolViolation) as e:
        mon.cache_check()
    assert e.value.action == "LoadBackLayer"


def test_a_late_layer_passes_every_invariant(tmp_path, monkeypatch):
    """Without the report the same late layer goes through to the end: no invariant, no
    other guard sees a layer event (the reason it is judged where it comes)."""
    from hicache.monitors.runtime import Monitor

    def forget(self):
        self.rmap.breach = None
    monkeypatch.setattr(Monitor, "_report_breach", forget)
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, range)
    c.finish(r)
    c.drain()
    _late_layer(c, op)
    serve(c, [3])
    c.close()
    assert mon.checked > 0 and not mon.tripped


def test_the_layers_of_loads_in_flight_leave_nothing_behind(tmp_path):
    """Each load's layers and its place among the loads in flight end with its ack."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    r, op = _load_with_layers(c, range)
    assert mon.rmap._loads and mon.rmap._layers
    c.finish(r)
    c.drain()
    c.close()
    assert mon.rmap._loads == set() and mon.rmap._layers == {} and mon.rmap.breach is None


# an eviction's frame (host_tier_guards.effect): the step changes node n's values alone.
# Each fault below carries the eviction out on another node than its event names, both
# nodes fit for it: the guard (on the named node) and every invariant hold

def _two_served_nodes(c):
    """Two unlocked nodes with device and host copies, under the root: (x, y)."""
    x, y = serve(c, [1, 2]).node, serve(c, [3, 4]).node
    assert x is not y and x.device and y.device and x.host and y.host
    return x, y


def _renamed(c, action, real, named) -> None:
    """The fault: `action`'s event for node `real` names node `named` instead."""
    emit = c._emit

    def renamed(act, **args):
        if act == action and args.get("node") == real.id:
            args["node"] = named.id
        emit(act, **args)
    c._emit = renamed


def _wrong_eviction(c, fault: str):
    """Two nodes fit for the eviction (`fault` "device": both with device and host copies;
    "host": both host-only), the event of y's eviction naming x: (x, y, the eviction of y)."""
    x, y = _two_served_nodes(c)
    if fault == "device":
        _renamed(c, A.DeviceEvict, y, x)
        return x, y, lambda: c._evict_device(y)
    c._evict_device(x)
    c._evict_device(y)
    assert x.device is None and y.device is None and x.host and y.host
    _renamed(c, A.HostEvict, y, x)
    return x, y, lambda: c._evict_host(y)


def test_a_device_eviction_of_another_node_than_its_event_names(tmp_path):
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, y, evict = _wrong_eviction(c, "device")
    with pytest.raises(ProtocolViolation) as e:
        evict()
    # the conjunct that writes dev' (`dev' = [dev EXCEPT ![n] = FALSE]`, the second)
    assert (e.value.property, e.value.kind, e.value.failure.index) == ("DeviceEvict", "action", 2)
    assert f"a step of node {x.id} changed node {y.id}'s values: dev;" in e.value.conjunct
    assert e.value.location.startswith("spec/HostTier.tla:240:")


def test_a_host_eviction_of_another_node_than_its_event_names(tmp_path):
    """y, host-only, leaves the tree: no page of it is left to be dirty, so what left the
    tree is asked apart (HostEvict's `len'`)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, y, evict = _wrong_eviction(c, "host")
    with pytest.raises(ProtocolViolation) as e:
        evict()
    assert (e.value.property, e.value.failure.index) == ("HostEvict", 4)
    assert f"a step of node {x.id} took node {y.id} out of the tree" in e.value.conjunct


@pytest.mark.parametrize("fault", ["device", "host"])
def test_evictions_of_another_node_than_named_pass_every_invariant(tmp_path, monkeypatch, fault):
    """Without the frame check the same faults run clean: it is what sees them."""
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    monkeypatch.setattr(IncrementalHostTierMap, "effect_actions", frozenset())
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, y, evict = _wrong_eviction(c, fault)
    evict()
    assert (y.device if fault == "device" else y.host) is None
    assert x.device is not None if fault == "device" else x.host is not None
    assert not mon.tripped and mon.checked == mon.steps > 0
    c.close()


def test_a_failed_loads_dropped_device_copies_are_no_change_of_the_next_eviction(tmp_path):
    """A failed load-back's device copies are dropped at the first look after the failure
    (`prefix_pages`), before its LoadBackFail is applied, with no event of their own: the
    spec's dev of a loading node is FALSE until LoadBackFinish (LoadBackStart leaves dev
    UNCHANGED; LoadBackFail too: nothing of it reached the device), so the drop is a
    stutter. The next eviction's sync sees it; its frame check must not lay it on the
    eviction (it did, a false alarm found by the incremental map's seeded sweep, whose
    listener failed a load by raising on the loader thread)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, y = _two_served_nodes(c)
    c._evict_device(x)
    failing_loads(c)
    r = c.match([1, 2])
    op = c.load_back(r)
    assert op is not None and op.wait(30) and op.error is not None and x.device is not None
    assert c.prefix_pages(r) == [] and x.device is None      # dropped: no event said so
    pages = c.alloc(c.cfg.device_pages)                      # evicts y: DeviceEvict(y)
    assert pages is not None and y.device is None
    c.dev_alloc.release(pages)
    c.finish(r)
    c.poll()
    assert not mon.tripped and mon.checked == mon.steps > 0 and c.metrics.load_failures == 1
    c.close()


def test_a_failed_loads_dropped_page_moved_by_the_next_eviction_is_no_change_of_it(tmp_path):
    """The same drop, with the eviction taking a node out of the tree whose removal moves a
    page of the dropped node into its position (a renaming: the map fills a hole with the
    last position's page). The frame compares each node's values before and after the
    sync, not the values at a position: read per position, the moved page's host, hits and
    stor showed as changed beside its dropped dev (a false alarm, 1 in 60 seeded workloads
    with failing loads)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), write_policy="write_through_selective")
    y = serve(c, [3]).node                   # position 0, device only (one hit: no backup)
    x = serve(c, [1, 2]).node                # positions 1 and 2, then backed up (the engine asks)
    assert c.backup(x) == 1
    c.drain()
    assert y.host is None and x.host and mon.rmap.npos[y] == [0] and mon.rmap.npos[x] == [1, 2]
    c._evict_device(x)
    failing_loads(c)
    r = c.match([1, 2])
    op = c.load_back(r)
    assert op is not None and op.wait(30) and op.error is not None
    assert c.prefix_pages(r) == [] and x.device is None      # dropped: no event said so
    c._evict_device(y)                       # DeviceEvict(y): y leaves, x's last page moves to 0
    assert y not in mon.rmap.npos                # (unmapped: it left the tree)
    assert mon.rmap.keys[0][0] is x
    c.finish(r)
    c.poll()
    assert not mon.tripped and mon.checked == mon.steps > 0 and c.metrics.load_failures == 1
    c.close()


# the frames of the copies and the request steps (host_tier_guards.FRAMES): a storage write
# carried out on another node than its event names, and an eviction with no event of its
# own inside a request's finish; both leave a legal state, and the named node's guard holds

def _two_unstored_nodes(c):
    """`_two_served_nodes`, neither in storage: the write policy's storage writes held back
    while they are served."""
    c._storage_backup_start = lambda v: None
    x, y = _two_served_nodes(c)
    del c._storage_backup_start
    assert not x.stored and not y.stored
    return x, y


def _storage_write_of_another_node(c):
    """Two host-backed nodes not in storage; y's storage write, its event naming x: (x, y,
    the write)."""
    x, y = _two_unstored_nodes(c)
    _renamed(c, A.StorageBackupStart, y, x)
    return x, y, lambda: c._storage_backup_start(y)


def _silent_eviction(c, action=A.RequestFinish):
    """A request's step (`action`: its finish, or its match) that also evicts another
    node's device copy (it keeps its host copy), the eviction's event lost: (x, y, the step
    of the request on y's tokens)."""
    x, y = _two_served_nodes(c)
    r = c.match([3, 4]) if action == A.RequestFinish else None
    emit = c._emit

    def fault(act, **args):
        if act == action and x.device is not None:
            c._emit = lambda *a, **k: None          # the eviction's own event is lost
            c._evict_device(x)
            c._emit = fault
        emit(act, **args)
    c._emit = fault
    return x, y, (lambda: c.finish(r)) if r is not None else (lambda: c.match([3, 4]))


@pytest.mark.hicache_unmonitored
def test_a_storage_write_of_another_node_than_its_event_names(tmp_path):
    from hicache.monitors.workload import MemStore
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    x, y, write = _storage_write_of_another_node(c)
    with pytest.raises(ProtocolViolation) as e:
        write()
    assert (e.value.property, e.value.kind) == ("StorageBackupStart", "action")
    assert f"a step of node {x.id} changed node {y.id}'s values: the state of its host slot" in e.value.conjunct
    assert "slot' =" in e.value.conjunct
    c.drain()


@pytest.mark.parametrize("action", [A.RequestFinish, A.RequestMatch])
def test_an_eviction_with_no_event_inside_a_request_step(tmp_path, action):
    """A finish changes no node; a match only the nodes of its key's path (a split): here
    y's, not x's."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    x, y, step = _silent_eviction(c, action)
    with pytest.raises(ProtocolViolation) as e:
        step()
    assert (e.value.property, e.value.kind) == (action, "action")
    who = "no node" if action == A.RequestFinish else f"nodes {y.id}, 0"
    assert f"a step of {who} changed node {x.id}'s values: dev;" in e.value.conjunct
    assert "UNCHANGED" in e.value.conjunct and "dev" in e.value.conjunct


@pytest.mark.parametrize("fault", ["storage write", "silent eviction"])
def test_copies_and_request_steps_changing_another_node_pass_every_invariant(tmp_path, monkeypatch, fault):
    """Without the frame check the same faults run clean: it is what sees them."""
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.monitors.workload import MemStore
    monkeypatch.setattr(IncrementalHostTierMap, "effect_actions", frozenset())
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    setup = _storage_write_of_another_node if fault == "storage write" else _silent_eviction
    x, y, step = setup(c)
    step()
    c.drain()
    assert y.stored if fault == "storage write" else x.device is None
    assert not mon.tripped and mon.checked == mon.steps > 0
    c.close()


def test_a_backup_whose_node_split_in_flight_acks_both_halves(tmp_path):
    """A node split while its device->host copy is in flight: the op holds both halves, its
    ack names the first (`node`) and carries both (`held`), and the frame takes both as
    the ack's own (read off `node` alone, the other half's change raised: the strict
    sweep's stateful test found it, on a storage write's ack)."""
    from hicache.runtime.events import Recorder
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    rec = Recorder()
    c.bus.subscribe(rec)
    v, gate = _backup_in_flight(c)           # [1, 2], its copy held
    r = c.match([1, 9])                      # splits v: [1] | [2]
    assert v.parent is r.node and v.n == 1 and v.inflight and r.node.inflight
    c.insert(r, c.alloc(1))
    c.finish(r)
    gate.set()
    c.drain()
    acks = [e.args for e in rec.events if e.action == A.BackupFinish]
    assert sorted(acks[0]["held"]) == sorted([v.id, v.parent.id]) and v.host and v.parent.host
    assert not mon.tripped and mon.checked == mon.steps > 0
    c.close()


def test_a_fetch_joining_new_nodes_below_its_anchor_is_its_own_change(tmp_path):
    """A fetch from storage hangs a new host-only node below the node it was anchored at,
    and its event names that leaf: PrefetchFinish's frame takes the leaf's path as its
    own, and nothing else changes."""
    from hicache.monitors.workload import MemStore
    from hicache.runtime.events import Recorder
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore(), prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    anchor = serve(c, [1]).node              # cached again: the fetch hangs [2, 3, 4] below it
    rec = Recorder()
    c.bus.subscribe(rec)
    r = c.match([1, 2, 3, 4])
    assert r.node is anchor and c.prefetch(r) and c.finish_prefetch(r) == 3
    (fin,) = [e.args for e in rec.events if e.action == A.PrefetchFinish]
    assert fin["joined"] == 3 and fin["node"] == r.node.id and r.node.parent is anchor   # (the leaf it hung)
    c.finish(r)
    c.drain()
    assert not mon.tripped and mon.checked == mon.steps > 0
    c.close()


# what a node action writes to its own node (host_tier_guards.WRITES): an event whose step
# was not carried out, or only half, leaves the state unchanged or legal; the guard (on the
# state before it), the frame and every invariant hold

def _unkept_step(c, fault: str):
    """The fault `fault` on a served node x: (x, the step). x has device and host copies and
    is not in storage (the write policy's storage writes held back while it is served), but
    for "backup", whose x is device-only (its write-through copy failed)."""
    if fault == "backup":                   # a requested backup's event, no copy started
        def failing(op):
            raise RuntimeError("copy failed (injected)")
        c._copy_to_host = failing
        x = serve(c, [5, 6]).node            # device only: its write-through copy failed
        del c._copy_to_host
        assert x.host is None and x.device is not None and c.metrics.backup_failures == 1
        idle = sorted(c.host.free_set())[:x.n]
        return x, lambda: c._emit(A.BackupStart, node=x.id, slots=idle, blocking=False, requested=True)
    x, y = _two_unstored_nodes(c)
    if fault == "device eviction":          # its event, the eviction not carried out
        return x, lambda: c._emit(A.DeviceEvict, node=x.id, pages=x.n, kept_host=True)
    if fault == "host eviction":            # of a host-only node, which would leave the tree
        c._evict_device(x)
        return x, lambda: c._emit(A.HostEvict, node=x.id, slots=list(x.host))
    if fault == "storage write":            # its event, no write started: the slots stay SYNCED
        return x, lambda: c._emit(A.StorageBackupStart, node=x.id, keys=x.n)
    if fault == "load-back":                # its event for a host-only node, no load started
        c._evict_device(x)
        r = c.match([1, 2])
        return x, lambda: c._emit(A.LoadBackStart, rid=r.rid, nodes=[x.id], slots=list(x.host), pages=[0, 1])
    # "storage flag": a storage write that succeeded, the node's flag lost before its ack
    emit = c._emit

    def lost(act, **args):
        if act == A.StorageBackupFinish and args.get("ok"):   # (x alone: `held` is [x.id])
            x.stored = False
        emit(act, **args)

    def step():
        c._emit = lost
        c._storage_backup_start(x)
        c.drain()
    return x, step


_UNKEPT = {"device eviction": ("DeviceEvict", 2, "device copy is still there after its eviction"),
           "host eviction": ("HostEvict", 3, "host copy (slots"),
           "backup": ("BackupStart", 7, "has no copy in flight after its backup started"),
           "load-back": ("LoadBackStart", 5, "is not loading after its load-back started"),
           "storage write": ("StorageBackupStart", 5, "are synced after its storage write started, not \"backup\""),
           "storage flag": ("StorageBackupFinish", 5, "is not in storage after its storage write's ack")}


@pytest.mark.parametrize("fault", sorted(_UNKEPT))
def test_an_event_whose_step_was_not_carried_out(tmp_path, fault):
    from hicache.monitors.workload import MemStore
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    x, step = _unkept_step(c, fault)
    with pytest.raises(ProtocolViolation) as e:
        step()
    action, index, why = _UNKEPT[fault]
    assert (e.value.property, e.value.kind, e.value.failure.index) == (action, "action", index)
    assert f"node {x.id}" in e.value.conjunct and why in e.value.conjunct


@pytest.mark.parametrize("fault", sorted(_UNKEPT))
def test_events_whose_step_was_not_carried_out_pass_every_invariant(tmp_path, monkeypatch, fault):
    """Without the own-node writes' check the same faults run clean: it is what sees them."""
    from hicache.monitors.maps import host_tier_guards
    from hicache.monitors.workload import MemStore
    monkeypatch.setattr(host_tier_guards, "WRITES", {})
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=MemStore())
    x, step = _unkept_step(c, fault)
    step()
    assert not mon.tripped and mon.checked == mon.steps > 0


def test_a_load_whose_node_split_in_flight_acks_both_halves(tmp_path):
    """A loading node split by another request's match while its load is in flight: the
    op holds both halves, and its ack carries both (`held`; `nodes`, the load's key, stays
    as at its start). Read off `nodes`, the upper half's loadReq and slots, released by the
    ack, raised in the frame."""
    from hicache.runtime.events import Recorder
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4)
    rec = Recorder()
    c.bus.subscribe(rec)
    gate, op, v = _load_pending_after_its_request(c)
    r = c.match([1, 9])                      # splits v: [1] | [2]
    assert v.parent is r.node and r.node.loading is op
    gate.set()
    assert op.wait(10) and op.error is None
    c.poll()
    c.abort(r)
    (ack,) = [e.args for e in rec.events if e.action == A.LoadBackFinish]
    assert ack["nodes"] == [v.id] and sorted(ack["held"]) == sorted([v.id, v.parent.id])
    assert not mon.tripped and mon.checked == mon.steps > 0
    c.close()
