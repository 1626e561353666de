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

from .cp_layout import CPLayout, chain_owner_class, choose_rotation_base


class ShardedPageAllocator:
    """Invariant: a logical page is either free (in its class heap) or allocated, never both;
    free_count(c) + allocated pages of class c == pages_per_rank for every class c."""

    __slots__ = ("layout", "pages_per_rank", "_free", "_allocated")

    def __init__(self, layout: CPLayout, pages_per_rank: int) -> None:
        if pages_per_rank < 1:
            raise ValueError(f"pages_per_rank must be >= 1, got {pages_per_rank}")
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
        if count < 0 or start_position < 0:
            raise ValueError(f"count/start_position must be >= 0, got {count}/{start_position}")
        n = self.layout.cp_size
        need = [0] * n
        for pos in range(start_position, start_position + count):
            need[chain_owner_class(rotation_base, pos, n)] += 1
        if any(need[c] > len(self._free[c]) for c in range(n)):
            return None
        pages = []
        for pos in range(start_position, start_position + count):
            cls = chain_owner_class(rotation_base, pos, n)
            page = self.layout.logical_page(cls, heapq.heappop(self._free[cls]))
            self._allocated.add(page)
            pages.append(page)
        return pages

    def free(self, page: int) -> None:
        if page not in self._allocated:
            raise RuntimeError(f"free of page {page} that is not allocated (double free?)")
        self._allocated.discard(page)
        heapq.heappush(self._free[self.layout.page_owner(page)], self.layout.local_page(page))

    def allocated(self) -> frozenset[int]:
        return frozenset(self._allocated)
