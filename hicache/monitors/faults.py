"""Fault switches for the bug zoo: subclasses of the real runtime cache, one per bug class.

The production classes carry no fault code at all (a fault is a subclass the zoo picks),
so "off" costs nothing. Each fault fires once, at the first opportunity, performs the
faulty step the reference system's bug performed, and emits the event of that step (the
runtime names every protocol step). `fault_seq` is the bus sequence number of that event.
"""
from __future__ import annotations

import threading

import numpy as np

from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import HiCache
from hicache.runtime.hashing import storage_key
from hicache.runtime.transfer import Worker


class FaultyCache(HiCache):
    fault_seq: int | None = None

    @property
    def fired(self) -> bool:
        return self.fault_seq is not None

    def _fire(self, action, **args) -> None:
        """Emit the faulty step's event and remember its sequence number."""
        self.fault_seq = self.bus.seq + 1
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

    def _backup_start(self, v, requested: bool = False) -> bool:
        ok = super()._backup_start(v, requested)
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


class _UnguardedWorker(Worker):
    """The reference system's prefetch thread: no handler around an operation, so the first
    exception ends the thread's loop (the op is never done, its slots stay RESERVED).
    `settle(op)` is the zoo's hook (not part of the bug): it returns once `op` is done or
    the thread has ended, and joins a thread that ended, so what the scheduler observes
    next does not depend on thread timing."""

    def __init__(self, name: str) -> None:
        self.cond = threading.Condition()
        self.ended = False
        self.died_of: BaseException | None = None
        super().__init__(name)

    def _loop(self) -> None:
        try:
            while True:
                op = self._q.get()
                if op is None:
                    return
                op.run()            # the bug: an exception here ends the thread
                op.finish()
                with self.cond:
                    self.cond.notify_all()
        except Exception as exc:  # noqa: BLE001 - recorded; the loop (the thread) is over
            self.died_of = exc
        finally:
            with self.cond:
                self.ended = True
                self.cond.notify_all()

    def settle(self, op) -> None:
        with self.cond:
            self.cond.wait_for(lambda: op.done.is_set() or self.ended)
        if self.ended:
            self._thread.join()

    def close(self) -> None:
        if not self.ended:
            super().close()


class UncheckedPrefetch(FaultyCache):
    """The reference system's prefetch thread (half of bug 14): no handler around an
    operation and an unchecked read of each page `batch_get` returns, so a `None` (a miss,
    or a failing backend's whole answer) raises and the thread dies with the prefetch's
    slots RESERVED. The faulty step is the scheduler's first step after the death (the
    prefetch it now finishes or aborts can never be completed by anyone)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = _UnguardedWorker("prefetch")

    def _exists_keys(self, op) -> list[str]:
        return op.keys

    def _fetch_pages(self, op) -> int:
        be = self.storage
        ekeys = self._exists_keys(op)
        hit = min(be.batch_exists(ekeys), len(op.keys))
        op.announced = hit
        op.skewed = ekeys[:hit] != op.keys[:hit]     # get asks for keys exists did not see
        done = 0
        for v in be.batch_get(op.keys[:hit]) if hit else []:
            v.numel()               # the unchecked read: a None (a miss) raises
            done += 1
            op.completed = done
        return done

    def _settle(self, req) -> None:
        op = req.prefetch
        if op is None or not isinstance(self.prefetcher, _UnguardedWorker):
            return
        self.prefetcher.settle(op)
        died = not op.done.is_set()
        if (died or getattr(op, "skewed", False)) and not self.fired:
            self.fault_seq = self.bus.seq + 1      # the event the caller emits next

    def finish_prefetch(self, req) -> int:
        self._settle(req)
        return super().finish_prefetch(req)

    def abort(self, req) -> None:
        self._settle(req)
        super().abort(req)


class PrefetchThreadDies(UncheckedPrefetch):
    """Bug 14, both halves: `batch_exists` is asked with keys of a second derivation (the
    chain restarted one page early: the cached page before the fetch counts as its first
    hit), so it announces one page more than storage holds under the keys `batch_get` and
    `batch_set` use; that page comes back as None and the unchecked read kills the thread.
    The fault fires at the first fetch whose get follows the skewed exists (the page may
    be there, then nothing dies yet); the faulty step is the scheduler's step that ends
    that prefetch, the first after the worker's calls."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._prev: dict[int, bytes] = {}   # rid -> digest of the page before its fetch

    def prefetch(self, req) -> bool:
        # written before the op is queued (the queue orders it before the worker's read)
        self._prev[req.rid] = self.tree.path_hash(req.node)
        return super().prefetch(req)

    def _exists_keys(self, op) -> list[str]:
        return [storage_key(self._prev[op.rid]), *op.keys[:-1]]      # the second derivation


#: bug class (REFERENCE.md number) -> fault class on the single-engine runtime
RUNTIME_FAULTS = {
    6: PrefetchRecordDropped,
    7: EvictAnchorNode,
    8: AbortKeepsSlots,
    9: HiddenRetention,
    10: EvictDuringLoad,
    12: FreeCopyDestination,
    14: PrefetchThreadDies,
}
