"""Replicated per-rank cache metadata for the distributed engine: a page radix tree.

Why not hicache.runtime's tree: this engine needs CP rotation bases on every node and
device/host pages that are *logical* (sharded by owner), plus a digest of everything, and
must be identical on every rank. This model is deliberately minimal: page-granular nodes,
LRU eviction, write-through backup. Every mutation here is a function of values the ranks
agreed on (requests, agreed counts, agreed prefixes), so all ranks stay identical; the
digest proves it at every collective step.
Invariants:
- device-present nodes form a prefix-closed set from the root (evict only device leaves);
- a node in the tree has a device page, a host page, or both (a node losing its last copy
  leaves the tree; its storage copy, if any, remains);
- host-present-only nodes have only host-only descendants, so leaves always go first;
- a node's owner class is (base + position) mod N for both its device and host page.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hicache.protocol.cp_alloc import ShardedPageAllocator
from hicache.protocol.cp_layout import CPLayout, chain_owner_class, rotation_compatible
from hicache.protocol.digest import digest_of
from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.vocabulary import CPSharding


@dataclass(slots=True, eq=False)
class Node:
    key: str                                  # chained page hash (hex); "" for the root
    tokens: tuple[int, ...]
    parent: "Node | None"
    position: int                             # page index in its chain; -1 for the root
    base: int | None                          # rotation base; None for the root
    children: dict[tuple[int, ...], "Node"] = field(default_factory=dict)
    device_page: int | None = None
    loading: object = None                    # in-flight load transfer filling device_page
    host_page: int | None = None
    backing_up: bool = False                  # host_page reserved, backup transfer in flight
    lock: int = 0
    last_use: int = 0


class ReplicatedTree:
    def __init__(self, layout: CPLayout, device_pages_per_rank: int, host_pages_per_rank: int,
                 listener: Listener = NULL_LISTENER) -> None:
        self.layout = layout
        self.device = ShardedPageAllocator(layout, device_pages_per_rank)
        self.host = ShardedPageAllocator(layout, host_pages_per_rank)
        self.root = Node(key="", tokens=(), parent=None, position=-1, base=None)
        self.listener = listener
        self.clock = 0
        self.rejected_inserts = 0
        self.evicted_device = 0
        self.evicted_host = 0
        # Allocation provenance, kept only while a CPSharding monitor watches this tree
        # (hicache.monitors.maps.cp_sharding sets alloc_log): page -> (allocation, base,
        # position), allocation -> (start, base, count). Pages between their allocation and
        # their insert belong to no node; the monitor maps them to the request's chain.
        self.alloc_log: dict[int, tuple[int, int, int]] | None = None
        self.allocations: dict[int, tuple[int, int, int]] = {}
        self._next_allocation = 0

    # --- queries ----------------------------------------------------------------------
    def match(self, pages: list[tuple[int, ...]]) -> list[Node]:
        out, node = [], self.root
        for toks in pages:
            node = node.children.get(toks)
            if node is None:
                break
            out.append(node)
        return out

    def nodes(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def digest(self) -> int:
        rows = sorted((n.key, n.position, n.base, n.device_page, n.loading is not None, n.host_page,
                       n.backing_up, n.lock, n.last_use) for n in self.nodes())
        # Allocator state too: an allocation that succeeded on one rank only (REFERENCE.md
        # bug 4) shows up here before it reaches the tree.
        return digest_of((tuple(rows), tuple(sorted(self.device.allocated())),
                          tuple(sorted(self.host.allocated())), self.clock))

    def touch(self, nodes: list[Node]) -> None:
        self.clock += 1
        for n in nodes:
            n.last_use = self.clock

    # --- allocation with eviction ------------------------------------------------------
    def alloc_device(self, base: int, start: int, count: int) -> list[int] | None:
        while (pages := self.device.alloc_chain(base, start, count)) is None:
            if not self._evict_one_device():
                return None
        aid = self._next_allocation
        self._next_allocation += 1
        if self.alloc_log is not None:
            self.allocations[aid] = (start, base, count)
            for i, page in enumerate(pages):
                self.alloc_log[page] = (aid, base, start + i)
        # a request's pages, allocated on the chain's rotation, before its insert
        self.listener(CPSharding.ChainAllocate if start == 0 else CPSharding.ChainExtend,
                      {"allocation": aid, "base": base, "start": start, "pages": list(pages)})
        return pages

    def alloc_host(self, base: int, position: int) -> int | None:
        while (pages := self.host.alloc_chain(base, position, 1)) is None:
            if not self._evict_one_host():
                return None
        return pages[0]

    def _evictable(self, n: Node) -> bool:
        return n.lock == 0 and n.loading is None and not n.backing_up

    def _evict_one_device(self) -> bool:
        """LRU device victim. A backed-up node keeps its host copy; a leaf that was never
        backed up (host was full) leaves the tree (storage may still hold it)."""
        cands = [n for n in self.nodes() if n.device_page is not None and self._evictable(n)
                 and (n.host_page is not None and not any(c.device_page is not None for c in n.children.values())
                      or n.host_page is None and not n.children)]
        if not cands:
            return False
        victim = min(cands, key=lambda n: (n.last_use, n.key))
        page, victim.device_page = victim.device_page, None
        self.device.free(page)
        if victim.host_page is None:
            del victim.parent.children[victim.tokens]
        self.evicted_device += 1
        # emitted once the step is complete: a listener sees a consistent tree
        self.listener(CPSharding.PageEvict, {"page": page, "tier": "device", "key": victim.key})
        return True

    def _evict_one_host(self) -> bool:
        """LRU host victim: host-only leaves first (they leave the tree), then the host copy of
        a device-resident node. Never the source of a pending load (REFERENCE.md bug 10)."""
        leaves = [n for n in self.nodes() if n.host_page is not None and n.device_page is None
                  and self._evictable(n) and not n.children]
        copies = [n for n in self.nodes() if n.host_page is not None and n.device_page is not None
                  and self._evictable(n)]
        pool = leaves or copies
        if not pool:
            return False
        victim = min(pool, key=lambda n: (n.last_use, n.key))
        page, victim.host_page = victim.host_page, None
        self.host.free(page)
        if victim.device_page is None:
            del victim.parent.children[victim.tokens]
        self.evicted_host += 1
        self.listener(CPSharding.PageEvict, {"page": page, "tier": "host", "key": victim.key})
        return True

    # --- insertion ----------------------------------------------------------------------
    def insert(self, parent: Node, start: int, pages: list[tuple[int, ...]], keys: list[str], base: int,
               *, device_pages: list[int] | None = None, host_pages: list[int] | None = None) -> list[Node]:
        """Insert a chain below `parent` at positions start..; returns the nodes now holding
        the request's pages (existing or new). Duplicate pages are freed; a splice of another
        rotation is declined: the rest of the chain is freed and not cached (counted)."""
        owned = device_pages if device_pages is not None else host_pages
        alloc = self.device if device_pages is not None else self.host
        out, node = [], parent
        for i, toks in enumerate(pages):
            child = node.children.get(toks)
            if child is not None:
                alloc.free(owned[i])                 # someone cached this page meanwhile
                node = child
                out.append(node)
                continue
            if not rotation_compatible(node.base, base, self.layout.cp_size):
                for page in owned[i:]:
                    alloc.free(page)
                self.rejected_inserts += 1
                self.listener(CPSharding.InsertReject, {"position": start + i, "parent_base": node.base,
                                                        "base": base})
                break
            assert chain_owner_class(base, start + i, self.layout.cp_size) == self.layout.page_owner(owned[i]), \
                "allocator broke the rotation"
            child = Node(key=keys[i], tokens=toks, parent=node, position=start + i, base=base)
            if device_pages is not None:
                child.device_page = owned[i]
            else:
                child.host_page = owned[i]
            node.children[toks] = child
            node = child
            out.append(child)
        self.touch(out)
        self.listener(CPSharding.ChainExtend, {"inserted": len(out), "start": start, "base": base,
                                               "tier": "device" if device_pages is not None else "host"})
        return out
