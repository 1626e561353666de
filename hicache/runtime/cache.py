"""HiCache: one engine's tiered KV cache (device, host, storage) around the radix tree.

The scheduler thread owns the tree, the allocators and the slot states; transfer threads
only copy bytes (and talk to storage) and signal completion. Completions are applied by
`poll()` in issue order (ordered ack queues). Every protocol step emits the HostTier
event of the same name.

Request lifecycle (what the scheduler calls):
  req = cache.match(tokens)          RequestMatch   device run + host run, path locked
  cache.load_back(req)               LoadBackStart  host run -> device, per-layer events
  cache.prefetch(req) ...            PrefetchStart  storage -> host, in the background
  cache.finish_prefetch(req)         PrefetchFinish stop policy decides; hits join the tree
  pages = cache.alloc(n)             DeviceEvict    LRU device victims make room
  cache.insert(req, pages)           DeviceInsert   write policy may start BackupStart
  cache.finish(req) / abort(req)     RequestFinish / RequestAbort
  cache.poll()                       BackupFinish, LoadBackFinish (LoadBackFail), StorageBackupFinish
"""
from __future__ import annotations

import dataclasses
import enum
import numbers
import sys
import time
from typing import Any

from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlots, HostSlotState as S, PageAllocator
from hicache.runtime.config import CacheConfig, PrefetchPolicy, WritePolicy
from hicache.runtime.events import EventBus
from hicache.runtime.hashing import chain_hashes, namespace_seed, storage_key
from hicache.runtime.metrics import Metrics
from hicache.runtime.radix import Node, RadixTree, TOKEN_BYTES, encode
from hicache.runtime.transfer import FuncOp, LoadOp, Op, Worker, WorkerDied
from hicache.runtime.verify_hook import attach_verified

#: the policies under which host copies form a prefix from the root (HostTier's WriteThrough)
WRITE_THROUGH = frozenset({WritePolicy.WRITE_THROUGH, WritePolicy.WRITE_THROUGH_SELECTIVE})

#: hits a node needs before write-through backs it up to host
BACKUP_THRESHOLD: dict[WritePolicy, float] = {
    WritePolicy.WRITE_THROUGH: 1,
    WritePolicy.WRITE_THROUGH_SELECTIVE: 2,
    WritePolicy.WRITE_BACK: float("inf"),   # only on device eviction
}


def host_write_in_flight(v: Node) -> bool:
    """Whether a device->host copy of v's host slots is in flight (its backup op, tagged
    `writes_host`, still attached): v's host copy is not readable yet."""
    return bool(v.inflight) and any(getattr(op, "writes_host", False) for op in v.inflight)


def raise_check_failure(op) -> None:
    """Raise, on the scheduler's thread, a monitor's ProtocolViolation raised on the transfer
    thread that ran `op` (from an event the copy emitted): the worker keeps whatever its op
    raised as a miss, so a violation stayed on the op while the bytes it was about were read
    and the cache went on. Any other error stays what it was, a miss (a storage backend's
    failure is counted, not raised). Called once the op's completion is applied (its slots
    released), so the cache is consistent when the error propagates."""
    err = op.error
    if err is not None and is_violation(err):
        raise err


def is_violation(err: BaseException) -> bool:
    """Whether `err` is a monitor's ProtocolViolation (without importing the monitors: none
    loaded, no violation exists)."""
    monitors = sys.modules.get("hicache.monitors.runtime")
    return monitors is not None and isinstance(err, monitors.ProtocolViolation)


def close_after(cache, error: BaseException) -> None:
    """Close `cache` while `error` propagates. What close() raises then is about the state
    the error left (a monitor's violation stops an operation half done: slots reserved, no
    event yet), so it is noted on `error`, not raised in its place: the user sees the first
    error, and a second, misleading violation (with its own trace) is not the headline."""
    try:
        cache.close()
    except Exception as e:      # noqa: BLE001 - reported on the first error
        first = str(e).splitlines()[0] if str(e) else ""
        error.add_note(f"(close() then failed on the state this left: {type(e).__name__}: {first})")


def _is_page_id(p) -> bool:
    """An integer page index (an int or a numpy integer; not a bool)."""
    return isinstance(p, numbers.Integral) and not isinstance(p, bool)


class RequestPhase(enum.StrEnum):
    """Where a request is in its life, as HostTier's `req` names it: matched (its prefix
    locked), loading (its last step started a load-back of its own), running (its last
    step finished one, or inserted its pages). Set where the step's event is emitted, so it
    is the phase of the request's last event (the spec's phase after that step)."""
    MATCHED = "matched"
    LOADING = "loading"
    RUNNING = "running"


@dataclasses.dataclass(slots=True, eq=False)
class Request:
    """One request's view of the cache. Invariant: `node` is locked while not finished."""
    rid: int
    key: bytes                  # page-aligned token bytes
    tokens: int                 # prompt length in tokens (partial last page included)
    node: Node                  # deepest matched node (locked)
    device_hit: int = 0         # pages served from device at match
    host_hit: int = 0           # pages loaded back from host
    storage_hit: int = 0        # pages prefetched from storage (and loaded back)
    loads: list = dataclasses.field(default_factory=list)
    prefetch: Any = None
    done: bool = False
    phase: RequestPhase = RequestPhase.MATCHED


def own_loads(req: Request) -> int:
    """req's own load-backs (those it started, not joined) whose completion is not applied
    yet: what its LoadBackStart events opened and no LoadBackFinish or LoadBackFail closed."""
    return sum(1 for op in req.loads if op.rid == req.rid and not op.applied)


def _hold(req: Request, op: LoadOp) -> None:
    """req waits on load-back op and may read what it restores (`DependentSet.read`): op's
    transfer is not retired while req lives."""
    req.loads.append(op)
    op.holders += 1


def _live(req: Request) -> None:
    """A request that finished or aborted takes part in nothing more."""
    if req.done:
        raise ValueError(f"request {req.rid} has already finished or been aborted")


def _count(n, what: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n: must be a non-negative int ({what}), got {n!r}")


#: how long close() waits, in all, for storage calls in flight (a dead backend's calls never end)
CLOSE_STORAGE_WAIT_S = 5.0


class HiCache:
    """The tiered cache of one engine. Not thread-safe: one scheduler thread calls it;
    its own worker threads only copy bytes and call storage (see the module docstring)."""

    # device allocation provenance, kept only while a device-page monitor watches this
    # cache (hicache.monitors.maps.device_pages sets it and prunes it): id -> (rotation
    # base, first position, pages), the pages `alloc` handed out that no node may hold yet
    alloc_log: dict[int, tuple[int, int, list[int]]] | None = None
    _alloc_ids = 0

    def __init__(self, cfg: CacheConfig, storage=None, bus: EventBus | None = None,
                 deps=None) -> None:
        self.cfg = cfg
        self.bus = bus or EventBus()
        self.metrics = Metrics()
        # the namespace names the bytes a page holds (with a packed draft pool, the host
        # page carries the draft's layers too): engines that differ there share no key
        page_cfg = deps.cfg.host_config() if deps is not None and not cfg.metadata_only else cfg
        self.tree = RadixTree(cfg.page_size, namespace_seed(cfg.model, cfg.salt, page_cfg.page_format()))
        self.dev_alloc = self._device_allocator(cfg)
        self.host = HostSlots(cfg.host_pages) if cfg.host_pages else None
        self.storage = storage
        self.device_pool = self.host_pool = None
        if not cfg.metadata_only:
            from hicache.runtime.pools import DevicePool, HostPool
            self.device_pool = DevicePool(cfg)
            self.host_pool = HostPool(cfg) if self.host else None
        # dependent pools of speculative decoding (hicache.runtime.draft): their copies ride
        # in every transfer below, and each transfer's completion covers them
        self.deps = deps
        if deps is not None:
            deps.attach(self)       # (first: a set attached elsewhere is refused before anything)
            if self.host and not cfg.metadata_only:
                self.host_pool = deps.host_pool()
        self._threshold = BACKUP_THRESHOLD[cfg.write_policy]
        self._rid = 0
        # the requests by id: each live one (matched, not finished nor aborted), and each
        # ended one while a load-back it started is still to be applied (its load still
        # reads host slots: HostTier's request stays "loading" until then). Entered at the
        # match, dropped at the end or at that load's completion (`_forget`); a request
        # matched again under a live id takes its place. The sample-mode monitor reads its
        # requests here at a sampled step instead of following them through every event
        self.requests: dict[int, Request] = {}
        # a blocking device->host copy in flight (write_back's, `_backup_sync`): (node id,
        # its slots) from its BackupStart to its BackupFinish, else None
        self.sync_backup: tuple[int, list[int]] | None = None
        # one worker per direction: completions of one direction stay in issue order
        self.loader = Worker("load") if self.host else None
        self.writer = Worker("write") if self.host else None
        self.prefetcher = Worker("prefetch") if (self.host and storage) else None
        self.backuper = Worker("storage-backup") if (self.host and storage) else None
        # abandoned prefetches (aborted, or stopped while the backend had not answered),
        # reaped by poll once their worker is done; `op.slots` = the slots they still hold
        self._orphans: list[FuncOp] = []
        self._prefetching: set[FuncOp] = set()  # prefetches whose slots are RESERVED, not in tree
        self._prefetch_slots = 0   # Invariant: == RESERVED slots of live prefetches + orphans
        self._backup_slots = 0     # Invariant: == slots in BACKUP (storage backups in flight)
        self._closed = False
        # verified mode (hicache.verified's choice in code, else HICACHE_VERIFY=sample|strict)
        # attaches the HostTier monitor here, last, so a test suite or canary turns it on
        # with one flag or variable; off costs a lookup or two per cache (verify_hook)
        self._verified = attach_verified(self)

    # ------------------------------------------------------------------ helpers
    def _device_allocator(self, cfg: CacheConfig):
        """The device page allocator (a subclass may place pages otherwise: the CP replay's
        sharded cache, by owner class); built here so that a cache is complete when its
        constructor attaches a monitor."""
        return PageAllocator(cfg.device_pages)

    def _emit(self, action: A, **args: Any) -> None:
        bus = self.bus
        if bus.listeners:
            bus.publish(action, args)

    def _launch(self, worker: Worker, op: Op, action: A, **args: Any) -> None:
        """`action`'s event, then `op` to its worker, also when a listener raised at the event
        (a monitor's violation, which the caller then sees). The op is already recorded where
        its waiters look (its nodes' `inflight` and `loading`, the request's loads or
        prefetch, its reserved slots): one never submitted would never finish, so a later
        match of its prefix would wait for it forever and its slots would stay reserved."""
        try:
            self._emit(action, **args)
        finally:
            worker.submit(op)

    def _attach(self, op: Op, nodes: list[Node]) -> None:
        for x in nodes:
            x.inflight.append(op)
            op.nodes.append(x)

    def _detach(self, op: Op) -> None:
        tree = self.tree
        for x in op.nodes:
            x.inflight.remove(op)
            if x.loading is op:
                x.loading = None
            if x.parent is not None:
                tree.offer_device(x)
                tree.offer_host(x)
        op.nodes = []

    # ------------------------------------------------------------------ misuse
    def _open(self, what: str) -> None:
        """Nothing new starts on a closed cache: its workers are gone, so a load or a
        prefetch queued now would never finish and whoever waits on it would hang."""
        if self._closed:
            raise RuntimeError(f"cache is closed: {what} after close()")

    def _usable(self, req: Request) -> None:
        self._open("a transfer")
        _live(req)      # (a prefetch for an ended request locked its host leaf for good)

    # ------------------------------------------------------------------ match
    def match(self, tokens: Any, rid: int | None = None, n_tokens: int | None = None) -> Request:
        """RequestMatch: longest cached prefix; locks its path until finish/abort.

        `tokens`: token ids, or key bytes from `radix.encode`; `n_tokens` the prompt
        length for the hit-rate denominator (default: the length of `tokens`)."""
        self._open("match")
        key = tokens if isinstance(tokens, bytes) else encode(tokens, self.cfg.page_size)
        if n_tokens is None:
            n_tokens = len(tokens) // TOKEN_BYTES if isinstance(tokens, bytes) else len(tokens)
        m = self.tree.match(key)
        self.tree.lock(m.node)
        if rid is None:
            self._rid += 1
            rid = self._rid
        req = Request(rid, key, n_tokens, m.node, device_hit=m.device_pages)
        for op in m.loads or ():
            _hold(req, op)
        self.requests[rid] = req
        met = self.metrics
        met.requests += 1
        met.input_tokens += n_tokens
        met.device_hit_tokens += m.device_pages * self.cfg.page_size
        self._emit(A.RequestMatch, rid=rid, device_pages=m.device_pages, host_pages=m.host_pages,
                   node=m.node.id)
        return req

    def prefix_pages(self, req: Request) -> list[int]:
        """Device pages of the request's cached prefix (wait on req.loads before reading).
        A load-back that failed (its copy raised) is no prefix: the device run ends before
        the nodes it was to fill (their device copies are dropped here, `_drop_failed_load`),
        so the caller computes those pages again instead of reading pages never written.
        Call it again after waiting: a load that fails later shortens the prefix then."""
        self._join_loads(req)
        for op in req.loads:
            if op.done.is_set() and op.error is not None:
                self._drop_failed_load(op)
        return self.tree.device_pages_of(req.node)

    def _drop_failed_load(self, op: LoadOp) -> None:
        """The device copies a failed load-back was to fill hold no KV of theirs (pages
        allocated at its start, never or partly written): each is dropped and its pages
        freed, deepest node first, so no match nor prefix hands them out (a silent wrong
        hit, before this, for every later request). The nodes keep their host copies, which
        a later load-back may read again. Once per op: at the first look after the failure
        (prefix_pages, `_settle_path`) or when the ack queue applies it (_load_finish). A node
        that still has a device child keeps its copy (drop_device needs a device leaf);
        insert and load_back wait on the loads into their path before building below them,
        so no library call leaves one there: counted in `metrics.load_failed_pages_kept`,
        0 in every test and fuzz run."""
        if op.dropped:
            return
        op.dropped = True
        if op.hit is not None:      # the hit it counted at its start was none
            req, tier = op.hit
            n = len(op.pages)
            if tier == "host":
                req.host_hit -= n
                self.metrics.host_hit_tokens -= n * self.cfg.page_size
            else:
                req.storage_hit -= n
                self.metrics.storage_hit_tokens -= n * self.cfg.page_size
        tree = self.tree
        # deepest first: a node drops once its device children did (op.nodes is not in path
        # order: a node split while loading appends its upper half); rounds until none drops
        todo = [x for x in dict.fromkeys(op.nodes)      # (each once)
                if x.loading is op and x.device is not None and x.parent is not None]
        while todo:
            dropped = False
            for x in todo:
                if not x.dev_children:
                    self.dev_alloc.release(tree.drop_device(x))
                    dropped = True
            todo = [x for x in todo if x.device is not None]
            if todo and not dropped:
                self.metrics.load_failed_pages_kept += sum(x.n for x in todo)
                break

    def _join_loads(self, req: Request) -> None:
        """Every load-back in flight into req's prefix is one req waits on: also those
        another request started after req matched (they fill pages req's prefix already
        lists; without them req.loads said nothing was pending and the pages were read
        before their bytes landed)."""
        if req.done:
            return          # an ended request holds nothing (its holds were released)
        loads = req.loads
        for x in self.tree.path(req.node):
            op = x.loading
            if op is not None and op not in loads:
                _hold(req, op)

    # ------------------------------------------------------------------ device room
    def alloc(self, n: int) -> list[int] | None:
        """n device pages, evicting LRU device leaves; None if locks pin too much."""
        _count(n, "pages")
        self._open("alloc")
        alloc = self.dev_alloc
        if not self._make_room(lambda: alloc.free >= n):
            return None
        pages = alloc.alloc(n)
        if self.alloc_log is not None and pages:
            self._log_alloc(0, 0, pages)
        return pages

    def _log_alloc(self, base: int, start: int, pages: list[int]) -> None:
        """Record an allocation the caller holds (only while a device-page monitor watches).
        A page handed out again was freed since: it belongs to this allocation, not to the
        older one (which forgets it), so every page is in at most one entry and the log
        stays within the device's pages, whatever callers free themselves."""
        log = self.alloc_log
        if log:
            self._unlog(pages)
        self._alloc_ids += 1
        log[self._alloc_ids] = (base, start, list(pages))

    def _unlog(self, pages) -> None:
        """The pages of a logged allocation are the tree's now (an insert, a load-back) or
        free again: the log forgets them (so it holds what callers still hold, and a page an
        insert then loses is in no chain: a leak, not a pending page)."""
        log = self.alloc_log
        if not log or not pages:
            return
        # the common case, an insert of what its request allocated last, whole: one list
        # comparison (no page is in two entries, so no other entry holds one of them)
        aid, (_, _, newest) = next(reversed(log.items()))
        if newest == pages:
            del log[aid]
            return
        # (the log holds what callers hold between an alloc and its insert: an entry or two;
        # each entry rebuilt once, linear in its pages)
        gone = set(pages)
        for aid, (base, start, held) in list(log.items()):
            if not gone.isdisjoint(held):
                left = [q for q in held if q not in gone]
                if left:
                    log[aid] = (base, start, left)
                else:
                    del log[aid]

    def _make_room(self, fits) -> bool:
        """Evict LRU device victims until `fits()`; False if locks pin too much.

        Victims that cannot go now (pinned by an in-flight copy) go back on the heap
        afterwards; when the heap runs dry, one pending transfer is awaited and they retry."""
        tree = self.tree
        kept: list[Node] = []
        try:
            while not fits():
                victim = tree.pop_device_victim()
                if victim is None:
                    for x in kept:
                        tree.offer_device(x)
                    kept.clear()
                    if not self._wait_one():
                        return False
                    continue
                if not self._evict_device(victim):
                    kept.append(victim)
            return True
        finally:
            for x in kept:
                tree.offer_device(x)

    def evict_device(self, n: int) -> int:
        """Make at least n device pages free if victims allow; returns the free count."""
        pages = self.alloc(n)
        if pages is not None:
            self.dev_alloc.release(pages)
            self._unlog(pages)
        return self.dev_alloc.free

    def evict_host(self, n: int) -> int:
        """Make at least n host slots free if victims allow; returns the free count."""
        _count(n, "slots")
        self._open("evict_host")
        if self.host is None:
            return 0
        slots = self._reserve_host(n)
        if slots is not None:
            self.host.move(slots, S.RESERVED, S.IDLE)
        return self.host.free

    def _wait_one(self) -> bool:
        """Wait for the oldest device-pinning transfer and apply completions; False if
        none. Backups and loads pin their device pages, so room may appear when they end."""
        for w in (self.writer, self.loader):
            if w is not None and w.acks:
                self._wait_for(w, w.acks[0])
                self.poll()
                return True
        return False

    def _evict_device(self, v: Node) -> bool:
        """DeviceEvict: drop v's device copy, keeping (or first making) a host copy.
        False when v must stay for now: write_back found no host room for its only copy,
        or a host-only descendant is in use."""
        ps = self.cfg.page_size
        if v.host is None and self.host is not None and self.cfg.write_policy is WritePolicy.WRITE_BACK:
            if not self._backup_sync(v):
                return False    # write_back never drops a device copy without a host copy
        if v.host is not None:
            pages = self.tree.drop_device(v)
        else:
            if v.children and not self._drop_host_subtree(v):
                return False
            pages = v.device
            self.tree.delete(v)
        self.dev_alloc.release(pages)
        self.metrics.device_evicted_tokens += len(pages) * ps
        self._emit(A.DeviceEvict, node=v.id, pages=len(pages), kept_host=v.parent is not None)
        return True

    def _drop_host_subtree(self, v: Node) -> bool:
        """Free the host-only descendants of v (prefetched below a device-only node)."""
        below = []
        stack = list(v.children.values())
        while stack:
            x = stack.pop()
            if x.inflight or x.host_ref or x.lock_ref:
                return False
            below.append(x)
            stack.extend(x.children.values())
        for x in reversed(below):  # children before parents
            self._evict_host(x)
        return True

    # ------------------------------------------------------------------ host room
    def _reserve_host(self, n: int) -> list[int] | None:
        host = self.host
        tree = self.tree
        while host.free < n:
            victim = tree.pop_host_victim()
            if victim is None:   # never wait for host room: the caller skips instead
                return None
            self._evict_host(victim)
        return host.reserve(n)

    def _evict_host(self, v: Node) -> None:
        """HostEvict: a host-only leaf leaves the tree; its slots go SYNCED -> IDLE."""
        slots = v.host
        self.tree.delete(v)
        self.host.move(slots, S.SYNCED, S.IDLE)
        self.metrics.host_evicted_tokens += len(slots) * self.cfg.page_size
        self._emit(A.HostEvict, node=v.id, slots=slots)

    # ------------------------------------------------------------------ insert + write policy
    def insert(self, req: Request, pages: list[int]) -> None:
        """DeviceInsert: the request's new pages (after its prefix) join the tree.

        `pages` are fresh pages from `alloc` holding the KV of the pages after the
        request's device prefix. Pages the tree already holds are freed here."""
        self._open("insert")
        if req.done:
            raise ValueError(f"request {req.rid} has finished: it inserts nothing")
        # loads in flight into the path first (a failed one's pages leave it), then the
        # prefix the caller's pages follow: taken before the wait, it listed pages the wait
        # then freed, and the tree took them back as the failed nodes' copies
        self._settle_loads(req.key)
        prefix = self.prefix_pages(req)
        full = prefix + pages
        n = len(req.key) // self.tree.pb
        if len(full) != n:
            failed = [op for op in req.loads if op.error is not None]
            why = (f" (a load-back into req's prefix failed: {failed[0].error!r}; wait on req.loads, "
                   f"then take prefix_pages again before computing)") if failed else ""
            raise ValueError(f"pages: expected {n - len(prefix)} new pages, got {len(pages)}{why}")
        if pages:
            # device pages of this pool, each once: a bogus id would enter the tree's accounting
            # (a later alloc could hand the same page out again: two owners of one page's KV)
            cap = self.dev_alloc.capacity
            # (ints, or numpy's integers; the common all-int case is tested first, at C speed)
            if not (all(type(p) is int for p in pages) or all(_is_page_id(p) for p in pages)) \
                    or min(pages) < 0 or max(pages) >= cap:
                bad = next(p for p in pages if not _is_page_id(p) or not 0 <= p < cap)
                raise ValueError(f"pages: {bad!r} is not a device page of this pool (0..{cap - 1})")
            if len(set(pages)) != len(pages):
                raise ValueError("pages: a page is listed twice")
            if not all(type(p) is int for p in pages):
                # numpy integers: the tree, the allocator and the monitors' states hold ints
                # (a free list of np.int64 failed TypeOK's free \subseteq PageIds, and the
                # ITF encoder, where a plain int passes both)
                pages = [int(p) for p in pages]
                full = prefix + pages
        self._unlog(pages)               # (the caller's pages are the tree's, or freed below)
        node, dup = self.tree.insert(req.key, full)
        if dup > len(prefix):            # someone inserted the same pages meanwhile
            self.dev_alloc.release(full[len(prefix):dup])
        self.tree.lock(node)
        self.tree.unlock(req.node)
        req.node = node
        req.phase = RequestPhase.RUNNING
        self._emit(A.DeviceInsert, rid=req.rid, node=node.id, new_pages=n - dup)
        if self.host is not None and self._threshold != float("inf"):
            self._write_through(node)

    def _settle_loads(self, key: bytes) -> None:
        """`_settle_path` the nodes on key's path (an insert's: beyond the inserting request's
        prefix too, where another request may have started a load after this one matched)."""
        tree, pb = self.tree, self.tree.pb
        node, off, n = tree.root, 0, len(key)
        path = []
        while off < n:
            child = node.children.get(key[off:off + pb])
            if child is None:
                break
            path.append(child)
            if not key.startswith(child.key, off):
                break
            off += child.n * pb
            node = child
        self._settle_path(path)

    def _settle_path(self, path: list[Node]) -> None:
        """Wait on the load-backs in flight into `path`'s nodes, and drop the device copies
        of those that failed (`_drop_failed_load`), before something is built below them: an
        insert adopts a loading node's pages as cached (and frees the caller's copy of
        them), a load-back fills the host-only run below it. A failed load's node with a
        device child could not drop its unwritten pages; it kept them, and every later match
        read them. The wait is on copies already running (host to device), and only where a
        load into the path is in flight."""
        for x in path:
            op = x.loading
            if op is not None:
                op.wait()
                if op.error is not None:
                    self._drop_failed_load(op)

    def _write_through(self, node: Node) -> None:
        self.backup(node, self._threshold, requested=False)

    def backup(self, node: Node, min_hits: float = 0, *, requested: bool = True) -> int:
        """BackupStart for the nodes without a host copy on node's path, top-down, while
        they have `min_hits` hits: host copies of backups form a prefix from the root.
        Returns the number of nodes whose backup started. `requested`: the engine asked for
        it (the PD handoff's prefill side), not the write policy; its events say so, and
        HostTier's BackupDue, the policy's rule, is not checked against them."""
        self._open("backup")
        if self.host is None:
            return 0
        path = []
        x = node
        while x is not self.tree.root and x.host is None:
            path.append(x)
            x = x.parent
        started = 0
        for y in reversed(path):
            if (y.hit_count < min_hits or y.device is None or y.parent is None
                    or not self._backup_start(y, requested)):
                break
            started += 1
        return started

    def _backup_start(self, v: Node, requested: bool = False) -> bool:
        """BackupStart: device -> host copy of v in the background (slots IDLE->RESERVED)."""
        slots = self._reserve_host(v.n)
        if slots is None:
            self.metrics.backup_skipped_tokens += v.n * self.cfg.page_size
            return False
        pages = list(v.device)
        self.tree.set_host(v, slots)
        # writes_host: the op is a device->host write of its nodes' host slots (what a
        # monitor reads to tell a copy in flight from a readable host copy)
        op = FuncOp(self._copy_to_host, pins_device=True, pages=pages, slots=slots,
                    t0=time.perf_counter(), writes_host=True)
        if self.deps is not None:
            op.draft_tid = self.deps.launch(_draft_kind("backup"), pages, slots)
        self._attach(op, [v])
        self._launch(self.writer, op, A.BackupStart, node=v.id, slots=slots, blocking=False, requested=requested)
        return True

    def _copy_to_host(self, op: FuncOp) -> None:
        if self.deps is not None:
            self.deps.copy_all(op.draft_tid, True, op.pages, op.slots)
            return
        if self.host_pool is not None:
            from hicache.runtime.copy import copy_pages
            copy_pages(self.host_pool, op.slots, self.device_pool, op.pages)

    def _backup_finish(self, op: FuncOp) -> None:
        """BackupFinish: RESERVED -> SYNCED; the node's host copy is now readable.

        Not when the copy failed, nor (write-through) when the node's parent has no readable
        host copy: its own copy failed after this one was issued (and may be running again),
        and write-through keeps host copies a prefix of every path (HostTier's
        WriteThroughPrefix; its BackupFinish needs ParentBacked), so a copy landing below it
        is released like a failed one (`_below_no_host_copy`)."""
        orphaned = op.error is None and self._below_no_host_copy(op.nodes)
        if op.error is not None or orphaned:   # a copy cannot half-fail silently: the slots are released
            self._abort_draft(op)
            if orphaned:
                self.metrics.backup_dropped += 1
            else:
                self.metrics.backup_failures += 1
            nodes = list(op.nodes)
            self._detach(op)
            for x in nodes:
                if x.host is not None and x.parent is not None:
                    self.tree.drop_host(x)
            self.host.move(op.slots, S.RESERVED, S.IDLE)
            # (the step that ends it, as a failed write_back copy reports its end)
            self._emit(A.BackupFinish, node=nodes[0].id if nodes else None, slots=op.slots, ok=False,
                       held=[x.id for x in nodes])
            return
        self.host.move(op.slots, S.RESERVED, S.SYNCED)
        nodes = list(op.nodes)
        self._detach(op)
        met = self.metrics
        met.backup_tokens += len(op.slots) * self.cfg.page_size
        met.backup_seconds += time.perf_counter() - op.t0
        if self.host_pool is not None:
            met.backup_bytes += len(op.slots) * self.host_pool.page_nbytes
        # (`held`: every node the op held as it ended, the upper half of a split of its node
        # while in flight included: what the ack may change, the frame a strict monitor checks)
        self._emit(A.BackupFinish, node=nodes[0].id if nodes else None, slots=op.slots, held=[x.id for x in nodes])
        if self.storage is not None:
            for x in nodes:
                if x.parent is not None:
                    self._storage_backup_start(x)

    def _below_no_host_copy(self, nodes: list[Node]) -> bool:
        """Write-through: a node of `nodes` whose parent (not the root, not one of `nodes`)
        has no readable host copy: none, or one still being written. Acks apply in issue
        order, so a parent copy still in flight when a child's ends was issued after it: the
        parent's first copy failed and was issued again (HostTier's BackupFinish needs
        ParentBacked: the parent's copy finished, not started)."""
        if self.cfg.write_policy not in WRITE_THROUGH:
            return False
        root = self.tree.root
        for x in nodes:
            par = x.parent
            if par is None or par is root or any(par is y for y in nodes):
                continue
            if par.host is None or host_write_in_flight(par):
                return True
        return False

    def _backup_sync(self, v: Node) -> bool:
        """write_back: v is leaving the device; copy it to host first, synchronously.
        False when the host has no room (v then stays on device)."""
        slots = self._reserve_host(v.n)
        if slots is None:
            return False
        # blocking: the node's host copy is recorded when the copy ends, not before it
        self.sync_backup = (v.id, slots)
        self._emit(A.BackupStart, node=v.id, slots=slots, blocking=True)
        tid = self.deps.launch(_draft_kind("backup"), v.device, slots) if self.deps is not None else None
        try:
            if self.deps is not None:
                self.deps.copy_all(tid, True, v.device, slots)
            elif self.host_pool is not None:
                from hicache.runtime.copy import copy_pages
                copy_pages(self.host_pool, slots, self.device_pool, v.device)
        except Exception as e:  # noqa: BLE001 - a failed copy: v keeps its only copy, on device
            if is_violation(e):
                raise               # (a monitor stopped the step: the state stays as it found it)
            if self.deps is not None:
                self.deps.abort(tid)
            self.host.move(slots, S.RESERVED, S.IDLE)
            self.metrics.backup_failures += 1
            self.sync_backup = None
            self._emit(A.BackupFinish, node=v.id, slots=slots, ok=False)
            return False
        self.tree.set_host(v, slots)
        self.host.move(slots, S.RESERVED, S.SYNCED)
        self.metrics.backup_tokens += v.n * self.cfg.page_size
        self.sync_backup = None
        self._emit(A.BackupFinish, node=v.id, slots=slots)
        if self.storage is not None:
            self._storage_backup_start(v)
        return True

    # ------------------------------------------------------------------ load-back
    def load_back(self, req: Request, _tier: str = "host") -> LoadOp | None:
        """LoadBackStart: the host run of req's path goes to device, layer by layer.

        Loads whole nodes, top-down, while device room and idle slots last; a node whose
        slots are busy (storage backup) ends the run. Returns the op (or None)."""
        self._usable(req)
        if self.host is None:
            return None
        self._join_loads(req)
        path = self.tree.path(req.node)
        if any(x.device is None for x in path):
            self._settle_path(path)     # (what this load would build on: only then)
        nodes = [x for x in path if x.device is None]
        take = []
        total = 0
        for x in nodes:
            if x.inflight:
                break
            take.append(x)
            total += x.n
        pages = None
        while take:
            pages = self.alloc(total)   # req's lock keeps its path off the victim heap
            if pages is not None:
                break
            total -= take.pop().n
        if not take:
            return None
        slots = [s for x in take for s in x.host]
        self.host.move(slots, S.SYNCED, S.PROTECTED)
        cfg = self.cfg
        op = LoadOp(cfg.layers, None, None)
        op.slots, op.pages, op.t0, op.rid = slots, pages, time.perf_counter(), req.rid
        op.node_ids = [x.id for x in take]
        if self.deps is not None:
            op.draft_tid = self.deps.launch(_draft_kind("load"), slots, pages)
        op._copy_layer = self._load_layer_fn(op)
        op._on_layer = self._layer_event_fn(op)
        off = 0
        for x in take:
            self.tree.set_device(x, pages[off:off + x.n])
            x.loading = op
            off += x.n
        self._unlog(pages)
        self._attach(op, take)
        _hold(req, op)
        loaded = len(pages) * cfg.page_size
        op.hit = (req, _tier)       # whose hit it counts, in which tier (a failure takes it back)
        if _tier == "host":
            req.host_hit += len(pages)
            self.metrics.host_hit_tokens += loaded
        else:
            req.storage_hit += len(pages)
            self.metrics.storage_hit_tokens += loaded
        req.phase = RequestPhase.LOADING
        self._launch(self.loader, op, A.LoadBackStart, rid=req.rid, nodes=op.node_ids, slots=slots, pages=pages)
        return op

    def _load_layer_fn(self, op: LoadOp):
        if self.deps is not None:
            return self.deps.load_layer_fn(op)
        if self.device_pool is None:
            return lambda layer: None
        from hicache.runtime.copy import copy_layer
        dev, host = self.device_pool, self.host_pool
        return lambda layer: copy_layer(dev, op.pages, host, op.slots, layer)

    def _layer_event_fn(self, op: LoadOp):
        return lambda layer: self._emit(A.LoadBackLayer, rid=op.rid, nodes=op.node_ids, layer=layer)

    def _load_finish(self, op: LoadOp) -> None:
        """LoadBackFinish: PROTECTED -> SYNCED; the ack is popped in issue order. LoadBackFail
        instead when its copy failed: its device copies are dropped (`_drop_failed_load`) and
        its dependent transfer aborted; its requests' prefixes end before its nodes."""
        if op.error is not None:
            self._drop_failed_load(op)
            self._abort_draft(op)
            self.metrics.load_failures += 1
        self.host.move(op.slots, S.PROTECTED, S.SYNCED)
        held = [x.id for x in op.nodes]    # (node_ids and the upper halves of splits while in flight)
        self._detach(op)
        op.applied = True       # no request joins it from here on (its nodes' `loading` is cleared)
        self._release_load(op)
        req = self.requests.get(op.rid)
        if req is not None:
            if not req.done:
                req.phase = RequestPhase.RUNNING
            else:
                self._forget(req)
        met = self.metrics
        if op.error is None:       # (a failed one moved nothing: counted in load_failures)
            met.load_tokens += len(op.pages) * self.cfg.page_size
            met.load_seconds += time.perf_counter() - op.t0
            if self.host_pool is not None:
                met.load_bytes += len(op.pages) * self.host_pool.page_nbytes
        self._emit(A.LoadBackFinish if op.error is None else A.LoadBackFail, rid=op.rid, nodes=op.node_ids,
                   slots=op.slots, held=held)

    # ------------------------------------------------------------------ storage backup
    def _storage_backup_start(self, v: Node) -> None:
        """StorageBackupStart: SYNCED -> BACKUP while the slots are written to storage."""
        if v.stored or v.inflight or v.host is None or self.backuper is None:
            return
        if self._backup_slots + v.n > self.cfg.storage_backup_host_fraction * self.host.capacity:
            self.metrics.storage_backup_skipped_tokens += v.n * self.cfg.page_size
            return
        keys = [storage_key(h) for h in self.tree.hashes_to(v)]
        slots = list(v.host)
        self._backup_slots += len(slots)
        self.host.move(slots, S.SYNCED, S.BACKUP)
        op = FuncOp(self._store_pages, keys=keys, slots=slots)
        if self.deps is not None:
            op.draft_tid = self.deps.launch(_draft_kind("store"), slots, slots)
        self._attach(op, [v])
        self._launch(self.backuper, op, A.StorageBackupStart, node=v.id, keys=len(keys))

    def _store_pages(self, op: FuncOp) -> list[bool]:
        import torch
        if self.deps is not None and self.host_pool is not None:
            tid = getattr(op, "draft_tid", None)
            values = [self.deps.read_value(s, tid) for s in op.slots]
        elif self.host_pool is not None:
            values = [self.host_pool.read_page(s) for s in op.slots]
        else:  # metadata-only: a one-byte marker stands for the page
            values = [torch.ones(1, dtype=torch.uint8) for _ in op.slots]
        try:
            ok = self.storage.batch_set(op.keys, values)
        except Exception:  # noqa: BLE001 - a failing backend is a miss, counted
            ok = None
        if self.deps is not None:
            self.deps.finish_storage(getattr(op, "draft_tid", None))
        if not isinstance(ok, list) or len(ok) != len(op.keys):
            with self.metrics.lock:
                self.metrics.storage_failures += 1
            return [False] * len(op.keys)
        return [bool(x) for x in ok]

    def _storage_backup_finish(self, op: FuncOp) -> None:
        """StorageBackupFinish: BACKUP -> SYNCED; the node is in storage if every page was."""
        self.host.move(op.slots, S.BACKUP, S.SYNCED)
        self._backup_slots -= len(op.slots)
        ok = op.error is None and op.result is not None and all(op.result)
        self._abort_draft(op)
        nodes = list(op.nodes)
        self._detach(op)
        for x in nodes:
            x.stored = x.stored or ok
        met = self.metrics
        if ok:
            met.storage_backup_tokens += len(op.slots) * self.cfg.page_size
            if self.host_pool is not None:
                met.storage_backup_bytes += len(op.slots) * self.host_pool.page_nbytes
        else:
            met.storage_backup_failures += 1
        self._emit(A.StorageBackupFinish, node=nodes[0].id if nodes else None, ok=ok, held=[x.id for x in nodes])

    # ------------------------------------------------------------------ storage prefetch
    def prefetch(self, req: Request) -> bool:
        """PrefetchStart: fetch the pages after req's cached prefix from storage into
        reserved host slots, in the background. False when declined (no storage, too
        short, host too full: the rate limit)."""
        self._usable(req)
        cfg = self.cfg
        if self.prefetcher is None or req.prefetch is not None:
            return False
        tree = self.tree
        if not self._host_tail(req.node):
            self.metrics.prefetch_unbacked_anchor += 1
            return False
        off = sum(x.n for x in tree.path(req.node)) * tree.pb
        want = (len(req.key) - off) // tree.pb
        if want < cfg.prefetch_min_pages:
            return False
        # rate limit: slots held by prefetches in flight stay under a share of the host
        # (cached host pages do not count: they are evictable)
        room = int(cfg.prefetch_host_fraction * self.host.capacity) - self._prefetch_slots
        want = min(want, room)
        if want < cfg.prefetch_min_pages:
            self.metrics.prefetch_rate_limited += 1
            return False
        slots = self._reserve_host(want)
        if slots is None:
            self.metrics.prefetch_rate_limited += 1
            return False
        prev = tree.path_hash(req.node)
        hashes = chain_hashes(prev, req.key[off:off + want * tree.pb], cfg.page_size)
        op = FuncOp(self._fetch_pages, keys=[storage_key(h) for h in hashes], hashes=hashes,
                    slots=slots, off=off, anchor=req.node, terminate=False, completed=0,
                    announced=0, t0=time.monotonic(), rid=req.rid)
        if self.deps is not None:
            op.draft_tid = self.deps.launch(_draft_kind("prefetch"), slots, slots)
        tree.host_anchor(req.node, +1)  # the anchor path is never deleted (bug 7)
        req.prefetch = op
        self._prefetching.add(op)
        self._prefetch_slots += len(slots)
        self.metrics.prefetch_requests += 1
        self._launch(self.prefetcher, op, A.PrefetchStart, rid=req.rid, slots=slots, pages=want)
        return True

    def _host_tail(self, v: Node) -> bool:
        """Whether host-only pages may join below v (HostTier's HostTail, the guard of
        PrefetchStart and of PrefetchFinish's join): under write-through the host copies
        form a prefix from the root (WriteThroughPrefix), so v must be the root or hold a
        readable host copy, not one whose backup is still in flight or was skipped for want
        of host room (a prefix broken for good: backups stop at the first node with a host
        copy). write_back keeps such pages: evicting v drops them first."""
        if self.cfg.write_policy not in WRITE_THROUGH or v is self.tree.root:
            return True
        return v.host is not None and not host_write_in_flight(v)

    def _fetch_pages(self, op: FuncOp) -> int:
        """Worker side: exists (stops at the first miss), then get, batch by batch.
        Any backend failure ends the fetch at the pages already written; never raises."""
        be = self.storage
        batch = self.cfg.storage_batch_pages
        keys = op.keys
        slots = op.slots   # the scheduler may shrink op.slots when it abandons the tail
        hit = 0
        while hit < len(keys) and not op.terminate:
            chunk = keys[hit:hit + batch]
            try:
                k = be.batch_exists(chunk)
            except Exception:  # noqa: BLE001
                k = None
            if not isinstance(k, int):
                self._storage_failed()
                break
            hit += max(0, min(k, len(chunk)))
            if k < len(chunk):
                break
        op.announced = hit
        pool = self.host_pool
        deps = self.deps if pool is not None else None
        tid = getattr(op, "draft_tid", None)
        nbytes = deps.value_nbytes() if deps is not None else (pool.page_nbytes if pool is not None else 0)
        done = 0
        while done < hit and not op.terminate:
            chunk = keys[done:min(done + batch, hit)]
            try:
                # (a sized read where the page size is known: the backend counts a page of
                # another size corrupt, not a hit, and it is dropped below as a failure)
                values = be.batch_get_sized(chunk, nbytes) if pool is not None else be.batch_get(chunk)
            except Exception:  # noqa: BLE001
                values = None
            if not isinstance(values, list) or len(values) != len(chunk):
                self._storage_failed()
                break
            stop = False
            for v in values:
                if v is None or (pool is not None and v.numel() != nbytes):
                    self._storage_failed()
                    stop = True
                    break
                if deps is not None:
                    deps.write_value(slots[done], v, tid)
                elif pool is not None:
                    pool.write_page(slots[done], v)
                done += 1
                op.completed = done   # monotone; read by the scheduler after `done` is set
            if stop:
                break
        if self.deps is not None:
            # the fetched prefix is the transfer's page list: the monitor checks each pool
            # moved that many pages
            self.deps.finish_storage(getattr(op, "draft_tid", None), fetched=done)
        return done

    def _storage_failed(self) -> None:
        with self.metrics.lock:
            self.metrics.storage_failures += 1

    def finish_prefetch(self, req: Request) -> int:
        """PrefetchFinish: apply the stop policy, then fetched pages join the tree as host
        copies and the rest of the slots go back to IDLE. Returns pages now loadable."""
        _live(req)
        op = req.prefetch
        if op is None:
            return 0
        if not self._closed:
            STOP[self.cfg.prefetch_policy](self, op)
        # (after close the prefetch was terminated there: its stop policy waits no more, or a
        # request finished after close on a backend that never answers would wait for good)
        req.prefetch = None
        self.tree.host_anchor(op.anchor, -1)
        if op.done.is_set():
            got = op.result if (op.error is None and isinstance(op.result, int)) else 0
            self._abort_draft(op)
            self._prefetching.discard(op)
            self._prefetch_slots -= len(op.slots)
            fetched, rest = op.slots[:got], op.slots[got:]
            self.host.move(rest, S.RESERVED, S.IDLE)
        else:
            # terminated but the backend has not returned (slow or hung): take the pages
            # already written (the worker never touches slots before `completed` again)
            # and leave the rest RESERVED to the worker until it finishes (reaped by poll)
            got = op.completed
            fetched, rest = op.slots[:got], op.slots[got:]
            self._prefetch_slots -= got
            op.slots = rest        # the worker indexes its own reference to the full list
            self._orphans.append(op)
        met = self.metrics
        met.prefetch_unfulfilled_tokens += max(op.announced - got, 0) * self.cfg.page_size
        joined = 0
        if fetched:
            self.host.move(fetched, S.RESERVED, S.SYNCED)
            tree = self.tree
            end = op.off + got * tree.pb
            node, off2 = tree.walk(op.anchor, req.key[:end], op.off)
            dup = (off2 - op.off) // tree.pb
            if dup < got and not self._host_tail(node):
                # the pages would join below a node whose host copy is not there (yet):
                # HostTier's PrefetchFinish then frees the slots instead (a miss)
                dup = got
            if dup:
                self.host.move(fetched[:dup], S.SYNCED, S.IDLE)   # arrived meanwhile
            if dup < got:
                leaf = tree.add_host_leaf(node, req.key[off2:end], fetched[dup:], op.hashes[dup:got])
                tree.lock(leaf)
                tree.unlock(req.node)
                req.node = leaf
                joined = got - dup
            met.prefetch_hit_tokens += joined * self.cfg.page_size
        self._emit(A.PrefetchFinish, rid=req.rid, fetched=got, joined=joined, node=req.node.id)
        raise_check_failure(op)
        return joined

    # Stop policies: each decides, on the scheduler thread, how long to wait for the fetch;
    # whatever has not arrived when it returns is abandoned (see finish_prefetch).
    def _stop_best_effort(self, op: FuncOp) -> None:
        op.terminate = True

    def _stop_wait_complete(self, op: FuncOp) -> None:
        self._wait_for(self.prefetcher, op)

    def _stop_timeout(self, op: FuncOp) -> None:
        left = op.t0 + self.cfg.prefetch_timeout(len(op.keys)) - time.monotonic()
        if not op.done.wait(max(left, 0.0)):
            op.terminate = True

    # ------------------------------------------------------------------ end of a request
    def finish(self, req: Request) -> None:
        """RequestFinish: release the request's lock (its pages stay cached)."""
        _live(req)
        if req.prefetch is not None:
            self.finish_prefetch(req)
        self.tree.unlock(req.node)
        req.done = True
        self._release_loads(req)
        self._forget(req)
        self._emit(A.RequestFinish, rid=req.rid)

    def abort(self, req: Request) -> None:
        """RequestAbort: release the in-flight prefetch slots and the lock."""
        _live(req)
        op = req.prefetch
        if op is not None:
            op.terminate = True
            req.prefetch = None
            self.tree.host_anchor(op.anchor, -1)
            self._orphans.append(op)
            self._reap_orphans()
        self.tree.unlock(req.node)
        req.done = True
        self._release_loads(req)
        self._forget(req)
        self._emit(A.RequestAbort, rid=req.rid)

    def _abort_draft(self, op) -> None:
        """TransferAbort of a failed op's dependent transfer, once its worker is done with it
        (`DependentSet.abort`: one that fired already retires). Not after a violation: the
        monitors stopped there, and the records stay as the violation left them."""
        err = op.error
        if err is not None and self.deps is not None and not is_violation(err):
            self.deps.abort(getattr(op, "draft_tid", None))

    def _forget(self, req: Request) -> None:
        """An ended request leaves `requests` once no load-back of its own is still to be
        applied (else that load's completion calls this again)."""
        if not own_loads(req) and self.requests.get(req.rid) is req:
            del self.requests[req.rid]

    def _release_loads(self, req: Request) -> None:
        """req reads its load-backs no more (it ended)."""
        for op in req.loads:
            op.holders -= 1
            self._release_load(op)

    def _release_load(self, op: LoadOp) -> None:
        """TransferRetire of op's dependent transfer once nobody can read it: op applied (no
        request joins it later) and every request that held it ended."""
        if op.applied and op.holders == 0 and self.deps is not None:
            self.deps.retire(getattr(op, "draft_tid", None))

    def _reap_orphans(self) -> None:
        """Free the slots of abandoned prefetches whose worker has finished with them: the
        end of each is HostTier's PrefetchFinish of an aborted fetch (`orphan`: its slots
        go back IDLE, nothing joins the tree), emitted as each op is settled (and out of
        the list: a listener that raises leaves no op to free twice)."""
        for op in [op for op in self._orphans if op.done.is_set()]:
            self._orphans.remove(op)
            self._abort_draft(op)
            self._prefetching.discard(op)
            self._prefetch_slots -= len(op.slots)
            self.host.move(op.slots, S.RESERVED, S.IDLE)
            self._emit(A.PrefetchFinish, rid=op.rid, fetched=0, joined=0, slots=list(op.slots), orphan=True)

    # ------------------------------------------------------------------ completions
    def poll(self) -> int:
        """Apply every completion at the front of each ack queue, in issue order."""
        n = 0
        if self.writer is not None:
            for op in self.writer.ready():
                self._backup_finish(op)
                n += 1
                raise_check_failure(op)
            for op in self.loader.ready():
                self._load_finish(op)
                n += 1
                raise_check_failure(op)
        if self.backuper is not None:
            for op in self.backuper.ready():
                self._storage_backup_finish(op)
                n += 1
                raise_check_failure(op)
            if self.prefetcher is not None:
                for _ in self.prefetcher.ready():    # prefetch acks are consumed per request
                    pass
        if self._orphans:
            self._reap_orphans()
        if self.host is not None:
            self.metrics.host_occupancy = self.host.used / self.host.capacity
        return n

    def drain(self, storage_deadline: float | None = None) -> None:
        """Wait for every transfer in flight and apply its completion. With a deadline
        (time.monotonic()), storage operations (backups to storage, abandoned prefetches)
        are waited for only until then; memory copies always complete."""
        def wait(w, op, storage: bool) -> bool:
            if not storage or storage_deadline is None:
                return self._wait_for(w, op)
            return self._wait_for(w, op, max(0.0, storage_deadline - time.monotonic()))
        while True:
            busy = False
            for w in (self.writer, self.loader, self.backuper):
                if w is not None and w.acks and wait(w, w.acks[0], w is self.backuper):
                    busy = True
            # (orphans are abandoned prefetches: the prefetcher's)
            stuck = [op for op in self._orphans if not wait(self.prefetcher, op, True)]
            if not busy and len(stuck) == len(self._orphans):
                break
            self.poll()
        self.poll()

    def _wait_for(self, worker, op, timeout: float | None = None) -> bool:
        """`worker.wait_for(op, timeout)`; when the worker's thread has died with it
        unfinished (WorkerDied, not a hang), the cache check of its verified-mode monitor
        (if one is attached) runs first, so the monitor names the property
        (InFlightOpsHaveWorker, or the breach that killed the thread) and writes its trace."""
        try:
            return worker.wait_for(op, timeout)
        except WorkerDied:
            from hicache.monitors.attach import cache_check    # (a no-op with none attached)
            cache_check(self)
            raise

    def __enter__(self) -> HiCache:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
        else:
            close_after(self, exc)

    def close(self) -> None:
        """Apply every transfer in flight, then stop the worker threads. Idempotent.

        Prefetches still live end as an abort ends them (terminated, reaped when they
        return); storage calls are waited for at most CLOSE_STORAGE_WAIT_S in all: a backend
        that never answers leaves its worker behind (counted in metrics.close_abandoned)
        instead of hanging the caller. Memory copies are always waited for."""
        if self._closed:
            return
        self._closed = True
        for op in self._prefetching:
            op.terminate = True
        deadline = time.monotonic() + CLOSE_STORAGE_WAIT_S
        try:
            self.drain(deadline)
        finally:
            # (also when a completion raised: a violation a transfer thread found surfaces in
            # this drain, and the workers still stop, the cache being closed for good)
            for w in (self.loader, self.writer):
                if w is not None:
                    w.close()
            # (both storage workers are told to stop before either is waited for: a healthy
            # one ends while a stuck one uses up the wait, and is not counted as left behind
            # for being joined with no time left)
            storage = [w for w in (self.prefetcher, self.backuper) if w is not None]
            for w in storage:
                w.stop()
            for w in storage:
                if not w.join(max(0.0, deadline - time.monotonic())):
                    self.metrics.close_abandoned += 1
        for op in self._prefetching:
            if op.done.is_set():
                self._abort_draft(op)   # a live request's failed prefetch (finish would have)
        if self.deps is not None:  # every transfer applied: the dependent pools' end of use too
            self.deps.close()
        if self._verified:         # the final cache check of verified mode
            from hicache.monitors.attach import final_check
            final_check(self)

    # ------------------------------------------------------------------ introspection
    def host_partition(self) -> tuple[set[int], set[int], set[int]]:
        """(free, tree, in-flight) host slots; tests check they partition all slots."""
        free = self.host.free_set()
        tree_slots: set[int] = set()
        for x in self.tree.nodes():
            if x.host is not None:
                tree_slots.update(x.host)
        inflight: set[int] = set()
        for op in self._prefetching:       # orphans stay in _prefetching until reaped
            inflight.update(op.slots)
        return free, tree_slots, inflight


def _draft_kind(name: str):
    from hicache.runtime.draft import Kind
    return Kind(name)


#: prefetch stop policy -> what finish_prefetch does before waiting for the worker
STOP = {
    PrefetchPolicy.BEST_EFFORT: HiCache._stop_best_effort,
    PrefetchPolicy.WAIT_COMPLETE: HiCache._stop_wait_complete,
    PrefetchPolicy.TIMEOUT: HiCache._stop_timeout,
}
