"""Fault switches for the bug zoo: subclasses of the real runtime cache, one per bug class.

The production classes carry no fault code at all (a fault is a subclass the zoo picks),
so "off" costs nothing. Each fault fires once, at the first opportunity, performs the
faulty step the reference system's bug performed, and emits the event of that step (the
runtime names every protocol step). `fault_seq` is the bus sequence number of that event.
"""
from __future__ import annotations

import numpy as np

from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import HiCache


class FaultyCache(HiCache):
    fault_seq: int | None = None

    @property
    def fired(self) -> bool:
        return self.fault_seq is not None

    def _fire(self, action, **args) -> None:
        """Emit the faulty step's event and remember its sequence number."""
        self.fault_seq = self.bus._seq + 1
        self._emit(action, **args)

    def _force_idle(self, slots: list[int], release: bool = True) -> None:
        """Set slots IDLE bypassing the guarded transition table (the bug's own write)."""
        h = self.host
        with h._lock:
            h.state[np.asarray(slots, dtype=np.int64)] = int(S.IDLE)
            if release:
                h._pages.release(list(slots))


class AbortKeepsSlots(FaultyCache):
    """Bug 8: an aborted request's prefetch record is dropped; its host slots stay RESERVED
    forever (nobody frees them)."""

    def abort(self, req) -> None:
        op = req.prefetch
        if op is None or self.fired:
            return super().abort(req)
        op.terminate = True
        op.done.wait()
        req.prefetch = None
        self._prefetching.discard(op)          # the record goes ...
        self._prefetch_slots -= len(op.slots)  # ... and the slots are never released
        self.tree.host_anchor(op.anchor, -1)
        self.tree.unlock(req.node)
        req.done = True
        self._fire(A.RequestAbort, rid=req.rid)


class PrefetchRecordDropped(FaultyCache):
    """Bug 6: a prefetch's record is dropped before its pages are validated: the request
    forgets the prefetch, but nobody returns or validates its slots (the occupancy
    accounting leaks)."""

    def finish_prefetch(self, req) -> int:
        op = req.prefetch
        if op is None or self.fired:
            return super().finish_prefetch(req)
        op.terminate = True
        op.done.wait()
        req.prefetch = None
        self._prefetching.discard(op)
        self._prefetch_slots -= len(op.slots)
        self.tree.host_anchor(op.anchor, -1)
        self._fire(A.PrefetchFinish, rid=req.rid, fetched=0, joined=0)
        return 0


class EvictAnchorNode(FaultyCache):
    """Bug 7: eviction deletes the node a prefetch is anchored at (ignoring its host
    reference): the fetched pages have nowhere to go and their slots leak."""

    def prefetch(self, req) -> bool:
        ok = super().prefetch(req)
        v = req.node
        if not ok or self.fired or v.children or v.inflight or v.parent is None:
            return ok
        tree = self.tree
        pages = v.device
        if v.host is not None:
            if not self.host.all_in(v.host, S.SYNCED):
                return ok
            self._force_idle(v.host)
        if pages is not None:
            self.dev_alloc.release(pages)
        parent = v.parent
        del parent.children[v.key[:tree.pb]]
        if v.device is not None:
            tree.device_pages -= v.n
            parent.dev_children -= 1
        if v.host is not None:
            tree.host_pages -= v.n
        v.parent = None
        v.device = v.host = None
        self._fire(A.DeviceEvict, node=v.id, pages=len(pages or ()), kept_host=False)
        return ok


class EvictDuringLoad(FaultyCache):
    """Bug 10: host pages of an in-flight load-back are evicted (and reusable) before the
    load's ack."""

    def load_back(self, req, _tier: str = "host"):
        op = super().load_back(req, _tier)
        if op is None or self.fired or not op.nodes:
            return op
        x = op.nodes[0]
        slots = x.host
        self._force_idle(slots)
        x.host = None
        self.tree.host_pages -= x.n
        self._fire(A.HostEvict, node=x.id, slots=slots)
        return op


class FreeCopyDestination(FaultyCache):
    """Bug 12: the destination slots of a device->host copy already launched are freed
    (use after free: the copy then writes into slots someone else may own)."""

    def _backup_start(self, v) -> bool:
        ok = super()._backup_start(v)
        if ok and not self.fired:
            self._force_idle(v.host)
            self._fire(A.HostEvict, node=v.id, slots=list(v.host))
        return ok


class HiddenRetention(FaultyCache):
    """Bug 9: host eviction marks slots free but something still pins them: they never
    return to the free list (host memory in use exceeds the slots accounted)."""

    def _evict_host(self, v) -> None:
        if self.fired:
            return super()._evict_host(v)
        slots = list(v.host)
        self.tree.delete(v)
        self._force_idle(slots, release=False)
        self._fire(A.HostEvict, node=v.id, slots=slots)


#: bug class (REFERENCE.md number) -> fault class on the single-engine runtime
RUNTIME_FAULTS = {
    6: PrefetchRecordDropped,
    7: EvictAnchorNode,
    8: AbortKeepsSlots,
    9: HiddenRetention,
    10: EvictDuringLoad,
    12: FreeCopyDestination,
}
