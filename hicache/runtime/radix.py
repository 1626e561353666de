"""Page-granular radix tree over token ids, with per-node tier state and LRU victims.

Keys are `bytes`: the page-aligned token ids as int64 little-endian (`encode`). A node
holds a run of whole pages (path-compressed); its children are keyed by the bytes of
their first page, so a lookup is one dict probe and a whole node is compared with one
`bytes.startswith` (a memcmp, no copy). Chained page hashes are computed lazily
(`hashes_to`), never on the match path.

Tier invariants (checked by `check`):
  * a node in the tree has a device copy, a host copy, or both (root excepted);
  * a node without a device copy has no descendant with one (device copies form a
    prefix of every path), so a match is: device run, then host run;
  * `dev_children` == number of children holding a device copy;
  * `lock_ref` of a node == number of locks taken at it or below (locks walk to root).
LRU: two heaps (device victims, host victims) of (last_access, id, node) with lazy
invalidation: a stale entry is re-pushed with the node's current tick when popped, an
ineligible one dropped; each node sits in each heap at most once. O(log n) per victim.
"""
from __future__ import annotations

import array
import heapq
from collections.abc import Iterator
from typing import Any

import numpy as np

from hicache.runtime.hashing import chain_hashes

TOKEN_BYTES = 8  # int64 per token id in keys


def encode(tokens: Any, page_size: int) -> bytes:
    """Page-aligned key bytes of a token sequence (list, array('q'), numpy, torch); TypeError
    for anything that is not token ids (a str, floats, bools, None)."""
    if isinstance(tokens, (bytes, bytearray)):
        data = bytes(tokens)
    elif isinstance(tokens, array.array) and tokens.typecode == "q":
        data = tokens.tobytes()
    else:
        kind = type(tokens).__name__
        if hasattr(tokens, "numpy") and not isinstance(tokens, np.ndarray):
            tokens = tokens.detach().cpu().numpy()   # a torch tensor, without importing torch here
        if isinstance(tokens, str):     # (a str is a sequence, of characters: not token ids)
            raise TypeError("tokens: expected token ids (ints: a list, array('q'), numpy or torch) "
                            "or key bytes, got a str")
        try:
            arr = np.asarray(tokens)
        except (TypeError, ValueError) as e:
            raise TypeError(f"tokens: expected token ids, got {kind} ({e})") from None
        # ids are integers in one sequence: floats would be truncated, bools read as 0/1 and a
        # batch flattened into one prompt without a word
        if arr.ndim != 1:
            raise TypeError(f"tokens: expected one sequence of token ids, got a {kind} of shape {arr.shape}")
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"tokens: expected token ids (integers), got a {kind} of {arr.dtype}")
        data = arr.astype("<i8", copy=False).tobytes()
    pb = page_size * TOKEN_BYTES
    cut = len(data) // pb * pb
    return data if cut == len(data) else data[:cut]


class Node:
    __slots__ = ("id", "parent", "children", "key", "n", "device", "host", "stored",
                 "hashes", "lock_ref", "host_ref", "inflight", "loading",
                 "last_access", "hit_count", "dev_children", "in_dev_heap", "in_host_heap")

    def __init__(self, nid: int, parent: Node | None, key: bytes, n: int) -> None:
        self.id = nid
        self.parent = parent          # None once detached (deleted) or for the root
        self.children: dict[bytes, Node] = {}
        self.key = key                # n pages of int64 token ids
        self.n = n                    # pages in this node
        self.device: list[int] | None = None  # device page per page, or no device copy
        self.host: list[int] | None = None    # host slot per page, or no host copy
        self.stored = False           # every page of this node is in storage
        self.hashes: list[bytes] | None = None  # chained digests, filled lazily
        self.lock_ref = 0             # request locks at or below (device copy pinned)
        self.host_ref = 0             # anchors (prefetch) at or below: never deleted
        self.inflight: list = []      # in-flight ops on its pages/slots; any op blocks host
                                      # eviction, an op with `pins_device` device eviction
        self.loading: Any = None      # the pending load-back filling the device pages
        self.last_access = 0
        self.hit_count = 0
        self.dev_children = 0         # children holding a device copy
        self.in_dev_heap = False
        self.in_host_heap = False

    def __repr__(self) -> str:
        return (f"Node(id={self.id}, n={self.n}, dev={self.device is not None}, "
                f"host={self.host is not None}, lock={self.lock_ref})")


class Match:
    """Result of a match: device run then host run along one path."""
    __slots__ = ("node", "last_device", "device_pages", "host_pages", "loads")

    def __init__(self, node: Node, last_device: Node, device_pages: int, host_pages: int,
                 loads: list | None) -> None:
        self.node = node                  # deepest matched node (lock this)
        self.last_device = last_device    # deepest node with a device copy
        self.device_pages = device_pages  # leading pages with a device copy
        self.host_pages = host_pages      # following pages with a host copy only
        self.loads = loads                # pending load-backs the device run depends on


class RadixTree:
    """The tree structure. Tier policy (what eviction does) lives in the cache."""

    #: the class of new nodes; an incremental refinement map installs a subclass that
    #: journals writes of the fields it maps (hicache.monitors.maps.host_tier), so with no
    #: monitor attached the runtime runs exactly its own Node
    node_cls = Node

    def __init__(self, page_size: int, seed: bytes) -> None:
        self.page_size = page_size
        self.pb = page_size * TOKEN_BYTES
        self.seed = seed
        self._ids = 0
        self.root = Node(0, None, b"", 0)
        self.root.lock_ref = 1           # the root is never a victim
        self.root.hashes = []
        self._tick = 0
        self.dev_heap: list[tuple[int, int, Node]] = []
        self.host_heap: list[tuple[int, int, Node]] = []
        self.device_pages = 0            # pages with a device copy in the tree
        self.host_pages = 0              # pages with a host copy in the tree

    # -- structure -------------------------------------------------------------
    def _new(self, parent: Node, key: bytes, n: int) -> Node:
        self._ids += 1
        return self.node_cls(self._ids, parent, key, n)

    def _common_pages(self, key: bytes, off: int, other: bytes) -> int:
        """Leading whole pages of `other` equal to key[off:] (at least 1 here)."""
        n = min(len(other), len(key) - off) // TOKEN_BYTES
        a = np.frombuffer(key, dtype="<i8", count=n, offset=off)
        b = np.frombuffer(other, dtype="<i8", count=n)
        diff = np.flatnonzero(a != b)
        first = int(diff[0]) if diff.size else n
        return first // self.page_size

    def _split(self, child: Node, m: int) -> Node:
        """Cut `child` after m pages; returns the new upper node (same tier state)."""
        pb = self.pb
        up = self._new(child.parent, child.key[:m * pb], m)
        parent = child.parent
        parent.children[child.key[:pb]] = up
        child.key = child.key[m * pb:]
        child.n -= m
        child.parent = up
        up.children[child.key[:pb]] = child
        if child.device is not None:
            up.device, child.device = child.device[:m], child.device[m:]
            up.dev_children = 1
        if child.host is not None:
            up.host, child.host = child.host[:m], child.host[m:]
        if child.hashes is not None:
            up.hashes, child.hashes = child.hashes[:m], child.hashes[m:]
        up.stored = child.stored
        up.lock_ref = child.lock_ref     # every lock below child passes through up
        up.host_ref = child.host_ref
        if child.inflight:            # the ops now hold both halves (released together)
            up.inflight = list(child.inflight)
            for op in up.inflight:
                op.nodes.append(up)
        up.loading = child.loading
        up.last_access = child.last_access
        up.hit_count = child.hit_count
        return up

    # -- match / insert --------------------------------------------------------
    def match(self, key: bytes) -> Match:
        """Longest cached prefix of `key`; splits a node where the match ends inside it."""
        self._tick += 1
        t = self._tick
        pb = self.pb
        node = self.root
        last_dev = node
        dev = host = 0
        off = 0
        n = len(key)
        loads = None
        while off < n:
            child = node.children.get(key[off:off + pb])
            if child is None:
                break
            partial = not key.startswith(child.key, off)
            if partial:
                child = self._split(child, self._common_pages(key, off, child.key))
            child.last_access = t
            off += child.n * pb
            if child.device is not None:
                dev += child.n
                last_dev = child
                if child.loading is not None:
                    if loads is None:
                        loads = []
                    loads.append(child.loading)
            else:
                host += child.n
            node = child
            if partial:
                break
        return Match(node, last_dev, dev, host, loads)

    def insert(self, key: bytes, device: list[int]) -> tuple[Node, int]:
        """Insert `key` with its device pages. Returns (last node, duplicate pages):
        the first `duplicate` pages of `device` were already on device and are the
        caller's to free; every other page is now owned by the tree."""
        self._tick += 1
        t = self._tick
        pb = self.pb
        node = self.root
        off = 0
        n = len(key)
        dup = 0
        while off < n:
            child = node.children.get(key[off:off + pb])
            if child is None:
                break
            if not key.startswith(child.key, off):
                child = self._split(child, self._common_pages(key, off, child.key))
            child.last_access = t
            p = off // pb
            if child.device is None:   # host-only node regains a device copy
                self.set_device(child, device[p:p + child.n])
            elif dup == p:
                dup += child.n
            child.hit_count += 1
            off += child.n * pb
            node = child
        if off < n:
            p = off // pb
            leaf = self._new(node, key[off:], (n - off) // pb)
            leaf.last_access = t
            leaf.hit_count = 1
            node.children[key[off:off + pb]] = leaf
            self.set_device(leaf, device[p:p + leaf.n])
            node = leaf
        return node, dup

    def walk(self, node: Node, key: bytes, off: int) -> tuple[Node, int]:
        """Follow key[off:] down from `node`, splitting where it ends inside a node.
        Returns the deepest node reached and the key offset after it."""
        pb = self.pb
        n = len(key)
        self._tick += 1
        while off < n:
            child = node.children.get(key[off:off + pb])
            if child is None:
                break
            partial = not key.startswith(child.key, off)
            if partial:
                child = self._split(child, self._common_pages(key, off, child.key))
            child.last_access = self._tick
            off += child.n * pb
            node = child
            if partial:
                break
        return node, off

    def add_host_leaf(self, parent: Node, key: bytes, host: list[int],
                      hashes: list[bytes] | None) -> Node:
        """Attach a host-only run below `parent` (which has no child for key's first page)."""
        self._tick += 1
        leaf = self._new(parent, key, len(key) // self.pb)
        leaf.last_access = self._tick
        leaf.host = host
        leaf.hashes = hashes
        leaf.stored = hashes is not None
        parent.children[key[:self.pb]] = leaf
        self.host_pages += leaf.n
        self.offer_host(leaf)
        return leaf

    def set_device(self, node: Node, pages: list[int]) -> None:
        assert node.device is None and len(pages) == node.n, "device copy already present"
        node.device = pages
        self.device_pages += node.n
        node.parent.dev_children += 1
        self.offer_device(node)

    def drop_device(self, node: Node) -> list[int]:
        """Forget the device copy (the caller frees the pages). Needs a host copy."""
        pages = node.device
        assert pages is not None and node.host is not None and node.dev_children == 0
        node.device = None
        self.device_pages -= node.n
        parent = node.parent
        parent.dev_children -= 1
        self.offer_device(parent)
        self.offer_host(node)
        return pages

    def set_host(self, node: Node, slots: list[int]) -> None:
        assert node.host is None and len(slots) == node.n
        node.host = slots
        self.host_pages += node.n

    def drop_host(self, node: Node) -> list[int]:
        """Forget the host copy of a node that keeps its device copy."""
        slots = node.host
        assert slots is not None and node.device is not None
        node.host = None
        self.host_pages -= node.n
        return slots

    def delete(self, node: Node) -> None:
        """Remove a childless node; the caller has taken its pages and slots."""
        assert not node.children and node.host_ref == 0 and node.parent is not None
        parent = node.parent
        del parent.children[node.key[:self.pb]]
        if node.device is not None:
            self.device_pages -= node.n
            parent.dev_children -= 1
        if node.host is not None:
            self.host_pages -= node.n
        node.parent = None
        node.device = node.host = None
        self.offer_device(parent)
        self.offer_host(parent)

    # -- locks -----------------------------------------------------------------
    def lock(self, node: Node) -> None:
        while node is not None:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, "unlock without lock"
            if node.lock_ref == 0:
                self.offer_device(node)
                self.offer_host(node)
            node = node.parent

    def host_anchor(self, node: Node, delta: int) -> None:
        """Take (+1) or release (-1) a host reference on the path: nothing on it is deleted."""
        while node is not None:
            node.host_ref += delta
            assert node.host_ref >= 0
            if node.host_ref == 0:
                self.offer_host(node)
            node = node.parent

    # -- LRU victims -----------------------------------------------------------
    @staticmethod
    def device_evictable(node: Node) -> bool:
        return (node.parent is not None and node.device is not None and node.lock_ref == 0
                and node.dev_children == 0
                and not (node.inflight and any(op.pins_device for op in node.inflight)))

    @staticmethod
    def host_evictable(node: Node) -> bool:
        return (node.parent is not None and node.device is None and node.host is not None
                and not node.children and node.host_ref == 0 and node.lock_ref == 0
                and not node.inflight)

    def offer_device(self, node: Node) -> None:
        if not node.in_dev_heap and self.device_evictable(node):
            node.in_dev_heap = True
            heapq.heappush(self.dev_heap, (node.last_access, node.id, node))

    def offer_host(self, node: Node) -> None:
        if not node.in_host_heap and self.host_evictable(node):
            node.in_host_heap = True
            heapq.heappush(self.host_heap, (node.last_access, node.id, node))

    def _pop(self, heap: list, ok, flag: str) -> Node | None:
        while heap:
            t, nid, node = heap[0]
            if not ok(node):
                heapq.heappop(heap)
                setattr(node, flag, False)
            elif t != node.last_access:   # touched since pushed: re-queue at its real age
                heapq.heapreplace(heap, (node.last_access, nid, node))
            else:
                heapq.heappop(heap)
                setattr(node, flag, False)
                return node
        return None

    def pop_device_victim(self) -> Node | None:
        """Least recently used unlocked device leaf, removed from the heap."""
        return self._pop(self.dev_heap, self.device_evictable, "in_dev_heap")

    def pop_host_victim(self) -> Node | None:
        return self._pop(self.host_heap, self.host_evictable, "in_host_heap")

    # -- hashes ----------------------------------------------------------------
    def hashes_to(self, node: Node) -> list[bytes]:
        """Chained digests of `node`'s pages, filling any missing ones on its path."""
        path = []
        x = node
        while x.hashes is None:
            path.append(x)
            x = x.parent
        prev = x.hashes[-1] if x.hashes else self._last_hash(x)
        for y in reversed(path):
            y.hashes = chain_hashes(prev, y.key, self.page_size)
            prev = y.hashes[-1]
        return node.hashes

    def _last_hash(self, node: Node) -> bytes:
        """Digest of the last page above `node` (the seed at the root)."""
        x = node
        while x is not self.root:
            if x.hashes:
                return x.hashes[-1]
            x = x.parent
        return self.seed

    def path_hash(self, node: Node) -> bytes:
        """Digest of the last page of the path ending at `node` (seed for the root)."""
        return self.seed if node is self.root else self.hashes_to(node)[-1]

    # -- inspection --------------------------------------------------------------
    def nodes(self) -> Iterator[Node]:
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            yield x
            stack.extend(x.children.values())

    def path(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to `node`."""
        out = []
        while node is not None and node is not self.root:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def device_pages_of(self, node: Node) -> list[int]:
        """Device pages of the path's device run ending at `node`."""
        out: list[int] = []
        for x in self.path(node):
            if x.device is None:
                break
            out.extend(x.device)
        return out

    def check(self) -> None:
        """Assert the structural invariants (tests call this after every step)."""
        dev = host = 0
        for x in self.nodes():
            p = x.parent
            assert x.device is not None or x.host is not None, f"{x} holds nothing"
            assert len(x.key) == x.n * self.pb and x.n > 0
            assert p.children[x.key[:self.pb]] is x
            if x.device is None:
                assert all(c.device is None for c in x.children.values()), f"{x}: device below"
            assert x.dev_children == sum(c.device is not None for c in x.children.values())
            locks = sum(c.lock_ref for c in x.children.values())
            assert x.lock_ref >= locks, f"{x}: lock_ref below children's"
            if x.device is not None:
                dev += x.n
                assert len(x.device) == x.n
            if x.host is not None:
                host += x.n
                assert len(x.host) == x.n
        assert dev == self.device_pages, (dev, self.device_pages)
        assert host == self.host_pages, (host, self.host_pages)
