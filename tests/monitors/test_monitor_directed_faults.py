"""Faults outside the bug zoo that the HostTier monitors once missed, each injected by hand
into a tiny cache at one step: strict mode raises at that step (or the next), naming the
property. Found by a QA sweep; each was missed (or caught late) before its map fix."""
from __future__ import annotations

import threading

import pytest

from hicache.monitors.runtime import ProtocolViolation
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


def test_prefetch_slots_freed_while_the_worker_still_writes_them(tmp_path):
    """An abort that frees its prefetch's slots at once (bug 12's use-after-free on the
    prefetch path): the map took in-flight prefetches from the cache's own table, which
    the faulty abort cleared; it reads the prefetch worker's queue too."""
    st = SlowStore()
    st.gate.set()
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), storage=st, prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    st.gate.clear()
    r = c.match([1, 2, 3, 4])
    assert c.prefetch(r) and st.inside.wait(10)
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


def test_a_pending_loads_slots_freed_after_its_request_finished(tmp_path):
    """Bug 10 after the request finished: the runtime polls the load's LoadBackFinish after
    the request's RequestFinish, and the map had dropped the request (and the loadReq of its
    pages) at RequestFinish, so freeing the load's PROTECTED slots went unseen."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"), device_pages=2, host_pages=4)
    serve(c, [1, 2])
    c.evict_device(2)
    gate = _blocked_loads(c)
    r = c.match([1, 2])
    op = c.load_back(r)
    x = op.nodes[0]
    c.finish(r)
    assert not op.done.is_set()
    slots = c.tree.drop_host(x)                # the fault: the load's slots freed
    with c.host._lock:
        for h in slots:
            c.host.state[h] = int(S.IDLE)
        c.host._pages.release(slots)
    with pytest.raises(ProtocolViolation) as e:
        c._emit(A.HostEvict, node=x.id, slots=slots)
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


@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_a_live_requests_locked_node_deleted_from_the_tree(tmp_path, mode):
    """A host eviction that ignores a live request's lock deletes the node it matched: its
    locked prefix is beyond the tree (LockedNodesKept). The maps gave live requests reqLen
    0 whatever they locked, so only prefetch pseudo-requests were ever checked."""
    verify = dict(mode=mode) if mode == "strict" else dict(mode=mode, sample_rate=1.0)
    c, mon = tiny_cache(tmp_path, verify, device_pages=2, host_pages=4)
    serve(c, [1, 2])
    c.evict_device(2)
    r = c.match([1, 2])
    v = r.node
    assert v.lock_ref == 1 and not c.tree.host_evictable(v)
    with pytest.raises(ProtocolViolation) as e:
        c._evict_host(v)                                        # the fault: the lock ignored
    assert e.value.property == "LockedNodesKept" and e.value.action == "HostEvict"
