"""Refinement map: one engine's device pages (hicache.runtime.cache.HiCache) -> spec/CPSharding, CP = 1.

HostTier models a page's device copy as a boolean (`dev[n]`): which device page holds it is
not part of that spec, so a device page owned by two nodes, or freed while a node still
holds it, or lost (in no node and never free again) leaves every HostTier invariant true
while two requests read each other's KV. CPSharding states exactly that accounting for a
sharded device (NoDoubleAllocation: the pages of every chain and the free pages partition
the page ids); a single engine is its case CP = 1, one owner class, rotation 0 everywhere
(the placement invariants then hold by arithmetic: only TypeOK and NoDoubleAllocation are
checked, `CHECKED`). The map is the CP replay's (`maps/cp_replay.py`) with that placement:

  spec chain      one tree node (its device pages are positions 0..n-1), or one pending
                  allocation: pages `HiCache.alloc` handed out that no node holds yet (the
                  cache's `alloc_log`, kept while this map watches: the cache forgets an
                  allocation's pages when an insert or a load-back puts them in the tree,
                  its own eviction frees them or an allocation hands them out again, and
                  the maps prune what is free again; so a page an insert loses is in no
                  chain, a leak, not a pending page)
  rot[c]          0 (CP = 1: every page is owner class 0)
  page[c][P]      the node's P-th device page, or NoPage without a device copy
  host[c][P]      NoHost (HostTier maps the host tier)
  free            the device allocator's free pages
  mixed           FALSE

Verified mode attaches it beside the HostTier monitor of every cache with a host tier (the
CP replay's sharded cache has the CPSharding monitor of its own placement instead): from
scratch in sample mode, incrementally in strict mode (`IncrementalDevicePagesMap`).
"""
from __future__ import annotations

import heapq
import weakref

from hicache.monitors.generated import cp_sharding as spec
from hicache.monitors.maps.cp_replay import CPReplayMap, shape_typed
from hicache.monitors.maps.cp_replay_inc import UNUSED, IncrementalRows
from hicache.monitors.maps.loops import (chains_typed, count_pages, device_sync, ints_within, mirror_calls, quiet_probe,
                                        walk_journaled)
from hicache.monitors.maps.cp_sharding import NONE
from hicache.monitors.maps.host_tier_inc import journal_tree, stop_journal
from hicache.monitors.runtime import MISSING
from hicache.tla.values import KK_INT, Fcn

#: what this map's monitor checks: at CP = 1 every page is owner class 0 (p % 1 = 0), so
#: PositionOwner, ExtensionKeepsRotation, ChainBalanced and PlacementBijection hold in every
#: state TypeOK allows, and RestoreKeepsOwner and SpliceRotationsAgree read host and mixed,
#: which this map fixes (NoHost, FALSE): checking them would cost every step and find nothing
CHECKED = frozenset({"TypeOK", "NoDoubleAllocation"})

#: what TypeOK reads (its incremental form here is skipped when none of it changed)
_TYPEOK_READS = spec.READS["TypeOK"]

#: the node fields a row reads (its device pages, its page count, whether it is in the tree)
DEVICE_FIELDS = ("parent", "n", "device")

_NOTHING = {"Chains": frozenset(), "PageIds": frozenset()}    # a sync that found no change

#: the names `loops.device_sync` reads or writes in the map's own dict before the class (the
#: map's attributes, and the methods it calls, _rebuilt, _grow, _commit, _empty, _padded,
#: found there only if an instance held one, as Python's lookup would; where none holds a
#: _padded, the sync does its work, from the map's _pad)
_SYNC_ATTRS = ("_changed", "delta", "free_built", "free_moved", "max_len", "mirror", "mirror_typed", "n_chains",
               "n_pids", "pids_by_value", "next_id", "_shape", "rows", "holders", "page_rows", "_empty", "_pad", "_padded",
               "_rebuilt", "_grow", "_commit")
#: the map's methods whose work `loops.device_sync` does itself on its common path
_SYNC_INLINED = ("_enter", "_leave_subtree", "_id", "_release_id", "_free", "_commit", "_padded")


def _plain_attrs(cls: type, names) -> bool:
    """Whether reading and writing each of `names` on an instance of cls goes to the instance
    dict as Python's own lookup would: the generic attribute hooks, and no class of its MRO
    defining the name as a data descriptor (a property, a slot), which Python's lookup would
    take before the dict."""
    if cls.__getattribute__ is not object.__getattribute__ or cls.__setattr__ is not object.__setattr__ or \
            cls.__delattr__ is not object.__delattr__:
        return False
    for name in names:
        for k in cls.__mro__:
            if name in vars(k):
                attr = type(vars(k)[name])
                if hasattr(attr, "__set__") or hasattr(attr, "__delete__"):
                    return False
                break
    return True


class OpJournal(list):
    """The allocator's calls since the last sync, bounded: past `LIMIT` entries (a monitor
    that stopped syncing, after a violation) it keeps nothing more and says so, and the
    next sync takes the free set from the allocator instead. Invariant: `overflowed` only
    while it holds LIMIT entries (`clear` resets it), so an empty journal is the whole
    answer to "no call since the last sync" (`quiet`, `_free`)."""
    LIMIT = 4096
    overflowed = False

    def append(self, op) -> None:
        if len(self) < self.LIMIT:
            super().append(op)
        else:
            self.overflowed = True

    def clear(self) -> None:
        super().clear()
        self.overflowed = False


def _stop_journal(dev, ops) -> None:
    dev.journals = tuple(j for j in dev.journals if j is not ops)


class DevicePagesMap(CPReplayMap):
    """A single engine's device pages against CPSharding with CP = 1, from scratch."""
    checked_invariants = CHECKED
    what = "device pages, CP = 1"

    def _placement(self, cache) -> None:
        self.cp = 1
        self.local_pages = cache.cfg.device_pages
        self.page_size = cache.cfg.page_size

    def _subtree_base(self, x) -> int:
        return 0      # one owner class: every chain's rotation is 0


class IncrementalDevicePagesMap(IncrementalRows, DevicePagesMap):
    """The same map, kept between events (what strict verified mode attaches).

    What changed is journaled, not searched for: the tree's nodes report writes of their
    device pages, page count and parent (the tracked node class of the incremental HostTier
    map, `journal_tree`), and the device allocator records the pages of each alloc and
    release (`PageAllocator.journals`); the pending allocations (a few between an alloc and
    its insert) are looked at again at every sync. Chains are numbered in the order they
    appear (the reference map numbers them in tree order): the two states are equal up to
    that renaming of chains, which tests/monitors/test_map_device_pages.py checks after
    every event. The free set is mirrored from the allocator's calls and taken from the
    allocator itself whenever the mirror's size disagrees with its free count (a page
    released twice, say). A write into a node's page list in place (not an attribute write:
    the runtime never does one) is seen at the node's next write or the next cache check,
    which maps from scratch; the from-scratch map sees it at once."""

    def __init__(self, cache):
        self.journal: set = set()
        self._journal_lists = journal_tree(cache.tree, self.journal, self, fields=DEVICE_FIELDS)
        # the first sync maps every node; the root too (walk_journaled passes it over): the
        # first sync is never quiet, even on an empty tree, so quiet() need not ask whether
        # the state was ever built
        self.journal.add(cache.tree.root)
        self.journal.update(cache.tree.nodes())
        self.cid: dict = {}            # node or ("alloc", id) -> chain id
        self.spare: list[int] = []     # chain ids given back (a heap: the lowest is reused first)
        self.next_id = 1
        self.node_pages: dict = {}     # mapped node -> its row's pages
        self.pending: set[int] = set()         # ids of the logged allocations mapped as chains
        self._changed: dict = {}               # the chains the running sync changed (see sync)
        dev = cache.dev_alloc
        self.ops = OpJournal()
        dev.journals = (*dev.journals, self.ops)     # (copy on write: another map's stays)
        weakref.finalize(self, _stop_journal, dev, self.ops)
        self.mirror: set | None = None
        # (the free set the last sync built from the mirror, and whether each of its pages
        # is an exact int of PageIds: TypeOK's free conjunct on a state holding that very
        # set, `type_ok_inc`; None and False until the first sync builds one)
        self.free_built: frozenset | None = None
        self.mirror_typed = False
        self._sync_ctx = None
        if type(self).quiet is IncrementalDevicePagesMap.quiet:
            # (`quiet` as a callable of its own, read off the instance before the class: the
            # monitor calls it at every event, and as a method each call was a frame entered
            # from C around four truth tests; the same tests in the same order. None of the
            # objects it holds is ever rebound: journal, ops and pending are written in place)
            self.quiet = quiet_probe((self.journal, self.ops), cache, "alloc_log", (self.pending,))
        super().__init__(cache)
        # (PageIds as a set: its intersection with a call's pages is a set, which the sync
        # takes over as its moved pages, no copy; the first sync, above, rebuilt the mirror
        # from the allocator and read none)
        self.pid_set = set(self.pids)
        # (whether PageIds is 0..n_pids-1, as every map's is today: then the native sync decides
        # a page's membership by its value, no probe of the set; pid_set is never written after)
        self.pids_by_value = self.pid_set == set(range(self.n_pids))
        # (what `loops.device_sync` reads, none of it rebound for the map's life: after the
        # first sync, which builds the state and the mirror. The native sync reads and writes
        # the map's attributes in its own dict and does the work of the methods it inlines:
        # right only while no class of the map defines a data descriptor of those names nor
        # overrides those methods, checked here; a map class that does keeps the Python sync,
        # which honours both)
        cls = type(self)
        if _plain_attrs(cls, _SYNC_ATTRS) and \
                all(getattr(cls, name) is getattr(IncrementalDevicePagesMap, name) for name in _SYNC_INLINED):
            self._sync_ctx = (self.journal, self.ops, self.node_pages, self.cid, cache.tree.root, cache,
                              self.pending, self.pid_set, cache.dev_alloc, self.s, NONE, MISSING, self.spare,
                              heapq.heappush, heapq.heappop, UNUSED, Fcn, KK_INT)

    @property
    def incremental_overrides(self) -> dict:
        return {**super().incremental_overrides, "TypeOK": self.type_ok_inc}

    def type_ok_inc(self, C, s, D, V=None):
        """TypeOK over the dirty chains, each from the pages its rows were built from, and over
        the pages that entered or left the free set; any doubt: the generated form, which
        decides and names a failure.

        A row this map built for a chain is the chain's pages padded with NoPage to MaxLen
        positions (`row`, `_padded`; `page_rows` keeps each, and only a state holding that very
        row, or the shared all-NoPage one for a chain with no page but NoPage, takes the
        shortcut; the maintained state equals the reference map's after every event,
        tests/monitors/test_map_device_pages.py), so `page[c] \\in [Pos -> PageIds \\cup
        {NoPage}]` is decided by its few pages, not its MaxLen entries (the generated form's
        membership test walks the row three times: 50k instructions a row at MaxLen 64); its
        host row is the shared all-NoHost row (CP = 1: no host placement here). The free set
        held `\\subseteq PageIds` at the last check; the pages that entered it since are among
        the dirty pages (its symmetric difference with the last free set is); and a state
        holding the very set the last sync built from the mirror (`free_built`), each of whose
        pages a test found an exact int of PageIds (`mirror_typed`: at each rebuild and
        release), holds it with no pass at all.

        A check of everything (V None: a new constants binding, after Chains or MaxLen grew)
        takes the same shortcut over every chain, once the state's shape is this map's
        (`shape_typed`: the sequences over Chains, the free set and mixed, which it decides
        whole), so a growth costs its few pages per chain too, not the generated form's walk
        of every row (~370 us at 16 chains of MaxLen 64, three times a kv_bytes replay)."""
        if V is None:
            if not shape_typed(C, s, self.n_chains, self.max_len, self.cp, self.pids):
                return spec.inc_TypeOK(C, s, D, V)
        elif V.isdisjoint(_TYPEOK_READS):
            return None
        # each dirty chain: rot and len typed (chain_typed), its host row the shared all-NoHost
        # one, and its page row the shared all-NoPage one (NoPage at each position, whatever
        # the chain's pages: an evicted node's, a chain no longer used) or the very row this
        # map built from its pages (its values theirs, padded), each page typed (pages_typed):
        # one C pass over the chains, `loops.chains_typed`
        if not chains_typed(D["Chains"], self.rows, self.page_rows, s["rot"], s["len"], s["page"], s["host"],
                            self._empty, C["MaxLen"], self.n_pids, C["CP"], C["NoRot"], NONE, UNUSED):
            return spec.inc_TypeOK(C, s, D, V)
        if V is None:
            return None     # (free and mixed: decided whole by shape_typed)
        if "free" in V:
            # each dirty page in the free set is an exact int of PageIds = 0..n-1: one C pass
            # over their intersection, which may hold free's element where D's equals it
            # (TRUE for 1): then the test fails and the generated form decides, never the
            # reverse. (0 stands for `none`: in 0..n-1 already when n > 0, so no other passes)
            free, n = s["free"], C["CP"] * C["LocalPages"]
            if free is self.free_built and self.mirror_typed and n == self.n_pids:
                pass    # (built from the mirror, each of its pages an exact int of PageIds)
            elif free.__class__ is not frozenset:
                return spec.inc_TypeOK(C, s, D, V)
            else:
                held = free.intersection(D["PageIds"])
                if held and not (n > 0 and ints_within(held, n, 0)):
                    return spec.inc_TypeOK(C, s, D, V)
        if "mixed" in V and s["mixed"] is not False:
            return spec.inc_TypeOK(C, s, D, V)
        return None

    def stop(self) -> None:
        """Journal nothing more (the monitor tripped: nothing will sync again)."""
        _stop_journal(self.cache.dev_alloc, self.ops)
        stop_journal(self._journal_lists, self.journal)
        self.ops.clear()

    # ------------------------------------------------------------ the step
    def quiet(self) -> bool:
        """Whether nothing this state is a function of was written since the last sync (most
        events: a request's match or finish, a host-side copy): no journaled node field, no
        allocator call, no logged allocation pending; so a sync would change nothing. (The
        first sync, which builds the state, is not: its journal holds the root.)"""
        return not self.journal and not self.ops and not self.cache.alloc_log and not self.pending

    def sync(self) -> tuple[list, dict]:
        if self.quiet():
            self.delta = []
            return self.delta, _NOTHING
        # (the common path, a node or two entered, a call or two of the allocator, no
        # allocation pending, in one call, `loops.device_sync`: its Python glue of ~5 frames
        # was most of a sync's cost; None where it does not apply, nothing written: below)
        if self._sync_ctx is not None:
            out = device_sync(self, self._sync_ctx)
            if out is not None:
                return out
        # (the chains this sync changed -> their (rot, pages), UNUSED for a chain that ends:
        # an attribute, which the walk's calls of _enter and _leave_subtree write)
        changed: dict = {}
        self._changed = changed
        # every journaled node mapped: parents first (a node is in the tree iff its parent is
        # the root or a mapped node); one left detached takes its mapped subtree with it
        todo = list(self.journal)
        self.journal.clear()
        walk_journaled(todo, self.cache.tree.root, self.node_pages, self._enter, self._leave_subtree)
        free = self._free()
        if self.cache.alloc_log or self.pending:    # (else none pending, none mapped: most syncs)
            self._pending(changed, free)
        # (a loop, not max(..., default=1): max parses its keyword at every call, ~2k
        # instructions, and a sync changes a chain or two)
        longest = 1
        for _, pages in changed.values():
            if len(pages) > longest:
                longest = len(pages)
        if self.next_id - 1 > self.n_chains or longest > self.max_len:
            self._grow(self.next_id - 1, longest)     # (its tests first: most syncs grow nothing)
        return self._commit(changed, free)

    def _enter(self, x) -> None:
        pages = tuple(x.device) if x.device is not None else (NONE,) * x.n
        if self.node_pages.get(x) == pages:
            return
        self.node_pages[x] = pages
        c = self.cid.get(x)     # (_id's lookup first: a mapped node keeps its chain)
        self._changed[self._id(x) if c is None else c] = (0, pages)

    def _leave_subtree(self, x) -> None:
        changed, node_pages = self._changed, self.node_pages
        stack = [x]
        while stack:
            y = stack.pop()
            if node_pages.pop(y, None) is not None:
                changed[self._release_id(y)] = UNUSED
            stack.extend(y.children.values())

    def _id(self, key) -> int:
        c = self.cid.get(key)
        if c is None:
            if self.spare:
                c = heapq.heappop(self.spare)
            else:
                c = self.next_id
                self.next_id += 1
            self.cid[key] = c
        return c

    def _release_id(self, key) -> int:
        c = self.cid.pop(key)
        heapq.heappush(self.spare, c)
        return c

    def _free(self) -> frozenset:
        """The free pages, from the allocator's calls since the last sync (its own free set
        when the mirror's size disagrees with its free count)."""
        dev, ops = self.cache.dev_alloc, self.ops
        mirror = self.mirror
        if mirror is not None and not ops:
            return self.s["free"]
        # (the pages the calls named: every page whose membership changed is one of them,
        # so the commit's dirty pages need not diff the two free sets; None when the mirror
        # is rebuilt, and the commit diffs them)
        moved: set | None = None
        typed = self.mirror_typed
        if mirror is not None and not ops.overflowed:
            # (a release's pages tested by one C pass over its list)
            moved, typed = mirror_calls(ops, mirror, self.pid_set, typed, self.n_pids, ints_within)
            # (the list's own clear, no frame: not overflowed, OpJournal.clear's reset has
            # nothing to undo)
            del ops[:]
        else:
            mirror = None
            ops.clear()
        if mirror is None or len(mirror) != dev.free:
            mirror, typed = self._rebuilt()
            moved = None
        self.free_moved = moved
        self.mirror_typed = typed
        self.free_built = frozenset(mirror)
        return self.free_built

    def _rebuilt(self) -> tuple[set, bool]:
        """The mirror taken from the allocator's free set, and whether each of its pages is an
        exact int of PageIds (`_free`, and `loops.device_sync`'s, when the mirror's size
        disagrees with the allocator's free count)."""
        mirror = self.mirror = set(self.pids & self.cache.dev_alloc.free_set())
        return mirror, self.n_pids > 0 and ints_within(mirror, self.n_pids, 0)

    def _pending(self, changed: dict, free: frozenset) -> None:
        """The pending allocations, newest first (a page freed and handed out again belongs
        to the newer one): their pages not free and held by no node (nor a newer pending
        allocation); an allocation with none left is pruned. (Called when an allocation is
        logged or mapped.)"""
        log = self.cache.alloc_log
        held = self._node_held(log, changed)
        claimed: set[int] = set()
        # allocations the cache forgot since (inserted, loaded into nodes, freed): their
        # chains end
        for aid in [a for a in self.pending if a not in log]:
            self.pending.discard(aid)
            changed[self._release_id(("alloc", aid))] = UNUSED
        for aid in sorted(log, reverse=True):
            base, start, pages = log[aid]
            row = tuple(p if p not in free and not held.get(p) and p not in claimed else NONE for p in pages)
            key = ("alloc", aid)
            if row.count(NONE) == len(row):
                del log[aid]       # inserted (or freed) by now
                if key in self.cid:
                    self.pending.discard(aid)
                    changed[self._release_id(key)] = UNUSED
                continue
            claimed.update(p for p in row if p != NONE)
            self.pending.add(aid)
            changed[self._id(key)] = ((base + start) % self.cp, row)

    def _node_held(self, log: dict, changed: dict) -> dict:
        """Page -> the tree positions holding it now, for (at least) the pages of the logged
        allocations; `changed` holds the node chains this sync changed, nothing else yet.

        Not kept apart between syncs (the commit's `holders` already counts every chain's
        pages, which would be a second count at every node change): derived from it, the
        counts of the last commit (node chains and pending allocations) less the pending
        allocations' committed rows and the changed node chains' committed rows, plus the
        latter's new rows. Only syncs with an allocation pending or mapped ask (few)."""
        holders, rows, cid = self.holders, self.rows, self.cid
        held = {p: holders[p] for _, _, pages in log.values() for p in pages if p in holders}
        for aid in self.pending:
            count_pages(held, rows.get(cid[("alloc", aid)], UNUSED)[1], -1, None, NONE)
        for c, new in changed.items():
            count_pages(held, rows.get(c, UNUSED)[1], -1, None, NONE)
            count_pages(held, new[1], 1, None, NONE)
        return held
