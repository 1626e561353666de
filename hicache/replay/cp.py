"""Context-parallel page accounting for a single-process replay.

Every CP rank keeps the same logical radix tree and page IDs (the brief), so one process that
runs the real tree and allocator, and accounts each logical page to its owner rank, replays
exactly what each rank would hold. Two setups at equal device memory per rank:

  * replicate (`--no-shard`): every rank stores every cached page, so the engine's logical
    device capacity is one rank's memory: a plain `HiCache` with that many pages;
  * shard: logical page p lives only on rank `p mod K` (hicache.protocol.cp_layout), so the
    logical capacity is K x one rank's memory, but each owner class fills on its own: a chain's
    page at position P is allocated in class `(base + P) mod K` (rotation kept when a request
    extends a cached prefix; a new chain starts on the least-full class), and eviction runs
    until every class the allocation needs has room.

The host tier is one pool of the engine's host budget in both setups (equal host budget per
engine); rotation spreads each chain over the classes to within one page, so per-rank host
pools of budget/K fill evenly and are not modelled separately.
"""
from __future__ import annotations

from hicache.protocol.cp_layout import CPLayout, chain_owner_class, choose_rotation_base
from hicache.runtime.allocator import PageAllocator
from hicache.runtime.cache import HiCache, Request
from hicache.runtime.config import CacheConfig


class ShardedDeviceAllocator:
    """One O(1) free list per owner class (= per rank), handing out logical page IDs.

    Same placement contract as `hicache.protocol.cp_alloc.ShardedPageAllocator` (class of a
    chain position, all-or-nothing per chain), but LIFO free lists instead of heaps: the
    replay frees and allocates millions of pages. Invariant: logical page `l*K + c` is
    allocated iff local page l is not in class c's free list."""

    __slots__ = ("layout", "k", "pages_per_rank", "capacity", "classes")

    def __init__(self, layout: CPLayout, pages_per_rank: int) -> None:
        if pages_per_rank < 1:
            raise ValueError(f"pages_per_rank: must be >= 1, got {pages_per_rank}")
        self.layout = layout
        self.k = layout.cp_size
        self.pages_per_rank = pages_per_rank
        self.capacity = pages_per_rank * self.k
        self.classes = [PageAllocator(pages_per_rank) for _ in range(self.k)]

    @property
    def free(self) -> int:
        return sum(c.free for c in self.classes)

    def free_per_class(self) -> list[int]:
        return [c.free for c in self.classes]

    def new_chain_base(self) -> int:
        return choose_rotation_base(self.free_per_class())

    def need(self, base: int, start: int, count: int) -> list[int]:
        """Pages per class for chain positions start..start+count-1."""
        k = self.k
        q, r = divmod(count, k)
        out = [q] * k
        first = chain_owner_class(base, start, k)
        for i in range(r):
            out[(first + i) % k] += 1
        return out

    def fits(self, need: list[int]) -> bool:
        return all(n <= c.free for n, c in zip(need, self.classes))

    def alloc_chain(self, base: int, start: int, count: int) -> list[int] | None:
        """Logical pages for chain positions start..start+count-1, or None (nothing taken)."""
        need = self.need(base, start, count)
        if not self.fits(need):
            return None
        k = self.k
        out = [0] * count
        for i in range(min(k, count)):
            c = chain_owner_class(base, start + i, k)
            # positions i, i+k, ... share class c; logical page = local * K + c (cp_layout)
            out[i::k] = [local * k + c for local in self.classes[c].alloc(need[c])]
        return out

    def release(self, pages: list[int]) -> None:
        k = self.k
        back: list[list[int]] = [[] for _ in range(k)]
        for p in pages:
            back[p % k].append(p // k)
        for c, locals_ in zip(self.classes, back):
            if locals_:
                c.release(locals_)

    def free_set(self) -> set[int]:
        k = self.k
        out: set[int] = set()
        for c, cls in enumerate(self.classes):
            # local * k + c for each free local page, in C-level passes (a CP monitor reads
            # the free set of a whole device at every checked step)
            out.update(map(c.__add__, map(k.__mul__, cls.free_set())))
        return out


class ShardedCache(HiCache):
    """`HiCache` whose device pages are sharded over `cp` owner classes.

    `cfg.device_pages` is the logical capacity (cp x pages per rank). The allocation of a
    request's pages (its new pages, or a load-back of its host run) is a chain segment: it
    starts at the request's device-run length and keeps the rotation base of the request's
    root subtree. Every node below a root child was allocated with that child's base, so
    the tree never splices rotations (what the reference tree declines) by construction."""

    def __init__(self, cfg: CacheConfig, cp: int, storage=None, bus=None) -> None:
        if cp < 1 or cfg.device_pages % cp:
            raise ValueError(f"cp: device_pages {cfg.device_pages} must be a multiple of cp={cp}")
        # set before HiCache.__init__: it builds the allocator (_device_allocator) and, in
        # verified mode, attaches the monitors, which read all of this
        self.layout = CPLayout(cp_size=cp, page_size=cfg.page_size)
        self._bases: dict[bytes, int] = {}   # root-child first page -> rotation base
        self._current: Request | None = None  # the request whose pages `alloc` places
        # allocation provenance, kept only while a CPSharding monitor watches this cache
        # (hicache.monitors.maps.cp_replay sets it and prunes it): id -> (base, start, pages)
        self.alloc_log: dict[int, tuple[int, int, list[int]]] | None = None
        self._alloc_ids = 0
        super().__init__(cfg, storage=storage, bus=bus)

    def _device_allocator(self, cfg: CacheConfig) -> ShardedDeviceAllocator:
        return ShardedDeviceAllocator(self.layout, cfg.device_pages // self.layout.cp_size)

    def match(self, tokens, rid=None, n_tokens=None) -> Request:
        req = super().match(tokens, rid=rid, n_tokens=n_tokens)
        self._current = req
        return req

    def load_back(self, req: Request, _tier: str = "host"):
        self._current = req
        return super().load_back(req, _tier=_tier)

    def _chain(self, req: Request | None) -> tuple[int, int]:
        """(rotation base, first position) of the pages `req` allocates next."""
        if req is None or not req.key:
            return self.dev_alloc.new_chain_base(), 0
        first = req.key[:self.tree.pb]
        base = self._bases.get(first)
        if base is None or first not in self.tree.root.children:
            # a new chain (or one whose subtree was evicted): least-full class
            base = self.dev_alloc.new_chain_base()
            self._bases[first] = base
        return base, len(self.tree.device_pages_of(req.node))

    def alloc(self, n: int) -> list[int] | None:
        """n pages for the current request's chain, evicting LRU device leaves until every
        owner class it needs has room; None if locks pin too much. (HiCache's victim loop,
        with the per-class condition.)"""
        base, start = self._chain(self._current)
        alloc = self.dev_alloc
        need = alloc.need(base, start, n)
        if not self._make_room(lambda: alloc.fits(need)):
            return None
        pages = alloc.alloc_chain(base, start, n)
        if self.alloc_log is not None and pages:
            self._log_alloc(base, start, pages)
        return pages

    def evict_device(self, n: int) -> int:
        self._current = None
        return super().evict_device(n)

    def finish(self, req: Request) -> None:
        super().finish(req)
        if self._current is req:
            self._current = None

    def abort(self, req: Request) -> None:
        super().abort(req)
        if self._current is req:
            self._current = None

    def owner_pages(self) -> list[int]:
        """Device pages held per rank now (the per-class occupancy)."""
        return [self.dev_alloc.pages_per_rank - f for f in self.dev_alloc.free_per_class()]
