"""Rotation-preserving page allocator for CP sharding (replicated metadata, identical on every rank).

Every CP rank runs the same allocator on the same inputs, so all ranks hand out the same
logical page IDs without talking; only the owner rank stores the page's bytes.
A chain (one request's run of pages) has a rotation base b: its page at position P is
allocated in owner class (b + P) mod N. Extending a cached prefix keeps the prefix's base;
a new chain starts on the least-full class. Restoring a page gives it a new logical page in
the same owner class (same owner rank, possibly another local address).
Pure: no torch, no I/O. Lowest free local page first, so the order is deterministic.
"""
from __future__ import annotations

import heapq

from hicache.validate import integral_in

from .cp_layout import CPLayout, chain_owner_class, choose_rotation_base


class ShardedPageAllocator:
    """Invariant: a logical page is either free (in its class heap) or allocated, never both;
    free_count(c) + allocated pages of class c == pages_per_rank for every class c."""

    __slots__ = ("layout", "pages_per_rank", "_free", "_allocated")

    def __init__(self, layout: CPLayout, pages_per_rank: int) -> None:
        if not isinstance(layout, CPLayout):
            raise ValueError(f"layout: must be a CPLayout, got {layout!r}")
        # (True passed as 1 page; a float failed later in range() with a nameless TypeError)
        pages_per_rank = integral_in("pages_per_rank", pages_per_rank, 1)
        self.layout = layout
        self.pages_per_rank = pages_per_rank
        self._free: list[list[int]] = [list(range(pages_per_rank)) for _ in range(layout.cp_size)]
        self._allocated: set[int] = set()

    def free_per_class(self) -> list[int]:
        return [len(h) for h in self._free]

    def new_chain_base(self) -> int:
        return choose_rotation_base(self.free_per_class())

    def alloc_chain(self, rotation_base: int, start_position: int, count: int) -> list[int] | None:
        """Logical pages for positions start..start+count-1 of a chain, or None (shortage:
        nothing is allocated). All-or-nothing, so every rank fails or succeeds together."""
        if type(rotation_base) is not int:
            rotation_base = integral_in("rotation_base", rotation_base)
        if type(start_position) is not int or start_position < 0:
            start_position = integral_in("start_position", start_position, 0)
        if type(count) is not int or count < 0:
            count = integral_in("count", count, 0)
        # Shortage first, by arithmetic: positions start..start+count-1 cover every class
        # count // n times and r = count % n classes from the first one once more. (Counting
        # position by position made a huge count hang instead of answering None.)
        n = self.layout.cp_size
        q, r = divmod(count, n)
        need = [q] * n
        first = chain_owner_class(rotation_base, start_position, n)
        for i in range(r):
            need[(first + i) % n] += 1
        if any(need[c] > len(self._free[c]) for c in range(n)):
            return None
        pages = []
        for i in range(count):
            cls = (first + i) % n                # = chain_owner_class(base, start + i, n)
            page = self.layout.logical_page(cls, heapq.heappop(self._free[cls]))
            self._allocated.add(page)
            pages.append(page)
        return pages

    def free(self, page: int) -> None:
        # checked before the lookup: True and 1.0 hash like page 1, so they would free it
        # and then fail half-way, leaving the page in neither the heap nor the allocated set
        if type(page) is not int:
            page = integral_in("page", page, 0)
        if page not in self._allocated:
            raise RuntimeError(f"free of page {page} that is not allocated (double free?)")
        self._allocated.discard(page)
        heapq.heappush(self._free[self.layout.page_owner(page)], self.layout.local_page(page))

    def allocated(self) -> frozenset[int]:
        return frozenset(self._allocated)
