"""Incremental refinement map: the CP replay's sharded cache -> spec/CPSharding, per event.

`CPReplayMap` (cp_replay.py) builds the whole mapped state at every checked event and the
monitor checks every invariant over every chain and position: a CP replay's rows are padded
to MaxLen and its device holds thousands of pages, so strict mode cost ~60 ms per event
(`hicache replay ... --cp 2 --verify strict`: 12.4 s against 1.7 s off). This map keeps the
mapped state and reports what an event changed, so the monitor evaluates the generated
`inc_<Inv>` forms over the changed chains only (as the incremental HostTier map does for
pages). The abstraction, the chain numbering and the padding are the reference map's: the
maintained state equals `CPReplayMap.state()` after every event
(tests/monitors/test_map_cp_replay.py checks it on seeded workloads).

How a change is found here (no journaling: the chains are the tree's nodes and the pending
allocations, which the reference map's walk already lists; the single-engine device-page
map, maps/device_pages.py, shares the commit below and journals instead):
  * each sync walks the tree and the allocation log as the reference map does and compares
    every chain's (rotation, pages) with what it last mapped: the chains that differ are
    dirty; a sequence variable (rot, len, page, host: functions on 1..#chains, tuples) is
    replaced as a whole when one of its chains changed;
  * the free set is compared as a whole; the pages that entered or left it are dirty, with
    the pages of every chain that changed (old and new);
  * when Chains or MaxLen grows (doubling), every row is padded to the new shape and the
    constants change: the monitor then checks everything (a new constants binding).

NoDoubleAllocation is checked over the dirty pages with the count of positions holding each
page (`holders`): a page is held at most once, never while free, and every page out of the
free set is held, which decides the conjuncts that read pages; conjunct 3 (no page past a
chain's length) over the dirty chains, walking a row only when the state does not hold the
row this map built from the chain's pages (`page_rows`: NoPage past them by construction).
Any doubt runs the linear form over everything, which names the first failing conjunct.
Invariant between events: `self.s` equals the reference map's state, `holders` counts its
positions' pages, and `page_rows` holds the page row written for each chain with a page
other than NoPage (every other chain's row is the shared all-NoPage one).
"""
from __future__ import annotations

from hicache.monitors.maps.cp_replay import CPReplayMap
from hicache.monitors.maps.cp_sharding import NONE, beyond_len_used, no_double_allocation_linear
from hicache.monitors.runtime import MISSING, snapshot
from hicache.tla.values import KK_INT, Fcn

from .loops import chains_padded, commit_rows, count_pages, held_once_or_free, padded_row
from .steps import capacity

#: the per-chain sequence variables, in the order a row gives their values
ROW_VARS = ("rot", "len", "page", "host")
#: what NoDoubleAllocation reads
_NDA_READS = frozenset({"page", "host", "len", "free"})
#: the row of a chain id no node nor allocation holds
UNUSED = (NONE, ())


class IncrementalRows:
    """The incremental form of a from-scratch chain map (CPReplayMap or a subclass: the
    class after this one in the MRO builds the reference state)."""
    incremental = True
    #: the pages whose membership in the free set may have changed since the last commit, a
    #: superset of those that did, when the sync knows them (the device-page map's `_free`,
    #: from the allocator's calls; the commit adds the other dirty pages to it and hands it
    #: on as the dirty pages); None: the commit diffs the two free sets
    free_moved: set | None = None
    #: `domains` returns the sync's dirty dict itself under any binding: the monitor takes it
    #: without the call
    own_domains = True
    #: `live()` is `s`, one dict for the map's life (assigned once, in __init__, and written
    #: in place): the monitor takes it once
    live_in_place = True

    def __init__(self, cache):
        super().__init__(cache)
        self.rows: dict[int, tuple] = {}        # chain id -> (rot, pages tuple) as mapped (used chains)
        self.page_rows: dict = {}               # chain id -> the page row built from its pages (if any is not NoPage)
        self.holders: dict[int, int] = {}       # device page -> positions holding it
        self._shape = None                      # (Chains, MaxLen) of the last commit
        # (constants_key() of the mapped state, as the last commit left it: the first one, below,
        # writes it, and every later one whose shape differs; n_chains and max_len written
        # between commits, by `_grow` or the reference map's `state`, take effect at the next)
        self.synced_key = None
        self.s: dict = {}
        self.delta: list = []
        self.sync()
        self.delta = []

    # ------------------------------------------------------------ the step
    def sync(self) -> tuple[list, dict]:
        """Bring the mapped state up to date: (delta, dirty chains and pages). The delta
        lists (variable, None, old value) of each variable replaced (`undo` rebuilds the
        states before this event from it)."""
        pids = self.pids
        free = pids & self.cache.dev_alloc.free_set()
        rows = self._rows(pids - free)
        self._grow(max(rows, default=1), max((len(p) for _, p in rows.values()), default=1))
        # every chain, compared with what was last mapped
        return self._commit({c: (r, tuple(p)) for c, (r, p) in
                             ((c, rows.get(c, UNUSED)) for c in range(1, self.n_chains + 1))}, free)

    def _grow(self, chains: int, longest: int) -> None:
        """Chains and MaxLen to hold `chains` chains and a chain of `longest` pages (doubling)."""
        if chains > self.n_chains:
            self.n_chains = capacity(chains, self.n_chains)
        if longest > self.max_len:
            self.max_len = capacity(longest, self.max_len)

    def _commit(self, changed: dict, free: frozenset) -> tuple[list, dict]:
        """Record the chains in `changed` (chain id -> (rot, pages tuple); (NoRot, ()) for a
        chain no longer used) and the free set: the rows and variables that differ are
        replaced, each write in the delta; when Chains or MaxLen grew since the last commit,
        every row is written again in the new shape and everything is dirty."""
        delta = self.delta = []
        n, L = self.n_chains, self.max_len
        s = self.s
        old_free = s.get("free", MISSING)
        free_changed = old_free is not free and (old_free is MISSING or old_free != free)
        # (the pages the sync's allocator calls named, when it knows them and the free set
        # changed: every page whose membership changed is one of them; the sync's own set,
        # taken over as the start of the dirty pages, so no merge; else the two free sets are
        # diffed below. A sync that left the free set as it was may leave an older one here,
        # never read then)
        moved = self.free_moved if free_changed and old_free is not MISSING else None
        if self._shape == (n, L):
            # (most commits: the rows of this shape are built, and only the changed chains'
            # entries are written, in one C pass, `loops.commit_rows`: which chains differ,
            # their holder counts, rows and entries of rot, len and page, the delta)
            dirty_chains, dirty_pages = commit_rows(changed, self.rows, self.holders, self.page_rows, s, delta,
                                                    self._empty, self._padded, NONE, moved)
        else:
            # (the key of the constants of the state this commit builds, which the monitor
            # reads off the map after each sync: they change with the shape alone)
            self._shape = self.synced_key = (n, L)
            self._recount(changed)
            self._write_all_rows(L)
            # (every page: the moved ones among them, each a page id)
            dirty_chains, dirty_pages = set(range(1, n + 1)), set(self.pids)
        if free_changed:
            delta.extend(("free", None, old_free))
            s["free"] = free
            if old_free is not MISSING and moved is None:
                dirty_pages |= old_free ^ free
        if "mixed" not in s:
            delta.extend(("mixed", None, MISSING))
            s["mixed"] = False
        return delta, {"Chains": dirty_chains, "PageIds": dirty_pages}

    def _recount(self, changed: dict) -> None:
        """The entries and holder counts of the chains in `changed` (as `commit_rows` keeps
        them), before a commit that writes every row."""
        rows, holders = self.rows, self.holders
        for c, new in changed.items():
            old = rows.get(c, UNUSED)
            if new != old:
                if new[1] != old[1]:
                    count_pages(holders, old[1], -1, None, NONE)
                    count_pages(holders, new[1], 1, None, NONE)
                if new == UNUSED:
                    del rows[c]
                else:
                    rows[c] = new

    def _write_all_rows(self, L: int) -> None:
        """Every sequence variable written again in the current shape (as the reference map
        builds them: each row a function on positions 0..L-1, NoPage past the chain's end), each
        replaced in the delta. A chain with no page but NoPage (none, or a node whose copies
        left the device: every eviction's) takes the shared all-NoPage row, as the reference
        map's state does, not a padded copy of it; host rows are that row everywhere."""
        s, delta, rows, n = self.s, self.delta, self.rows, self.n_chains
        empty = self._empty_row(L)
        vals = {"rot": [None] * n, "len": [None] * n, "page": [None] * n, "host": [empty] * n}
        self.page_rows = {}
        for c in range(1, n + 1):
            r, pages = rows.get(c, UNUSED)
            vals["rot"][c - 1], vals["len"][c - 1] = r, len(pages)
            if pages.count(NONE) != len(pages):
                vals["page"][c - 1] = self.page_rows[c] = self._padded(pages)
            else:
                vals["page"][c - 1] = empty
        for var in ROW_VARS:
            delta.extend((var, None, s.get(var, MISSING)))
            s[var] = tuple(vals[var])

    def _empty_row(self, L: int):
        """The shared all-NoPage row of MaxLen L, and the dict `_padded` copies: built at each
        reshaped commit."""
        self._empty = self.row((), L)
        self._pad = dict.fromkeys(range(L), NONE)
        return self._empty

    def _padded(self, pages) -> Fcn:
        """`row(pages, L)` for the current MaxLen L: the all-NoPage row copied, the chain's
        pages written over its first positions (C-level passes, the second over the chain's
        pages only; the same keys in the same order as `row` builds). The device-page map's
        native sync does this work itself where no class overrides it (`loops.device_sync`)."""
        return padded_row(self._pad, pages, Fcn, KK_INT)

    # ------------------------------------------------------------ monitor interface
    def live(self) -> dict:
        """The maintained state itself (read, never kept: the next sync replaces values)."""
        return self.s

    def state(self) -> dict:
        """A snapshot of the maintained state (safe to keep and compare)."""
        return snapshot(self.s)

    def reference_state(self) -> dict:
        return super().state()

    def reference_constants(self) -> dict:
        return self.constants()

    def domains(self, C: dict, dirty: dict) -> dict:
        """The dirty chains and pages: the sets the sync built (not copied: the next sync
        builds new ones, the checks only read). Each dirty chain is one of this map's
        1..n_chains, the domain its constants bind (`_commit` dirties the chains it is
        given, which `_grow` made room for, or every one when reshaped; the map's tests
        assert it after every event), so none is searched for."""
        return dirty

    @property
    def incremental_overrides(self) -> dict:
        return {"NoDoubleAllocation": self.no_double_allocation_inc}

    def no_double_allocation_inc(self, C, s, D, V=None):
        """NoDoubleAllocation over the dirty pages and chains (see the module docstring);
        the linear form over everything decides and names a failure."""
        if V is not None and V.isdisjoint(_NDA_READS):
            return None
        if not held_once_or_free(D["PageIds"], self.holders, s["free"]):
            return no_double_allocation_linear(C, s)
        # a row this map built from a chain's pages holds NoPage past them, and a host row
        # NoHost everywhere: no position past len is used when the state holds those rows and
        # len is the pages' count (else the row is walked): one C pass over the dirty chains,
        # `loops.chains_padded`
        if not chains_padded(D["Chains"], s["page"], s["host"], s["len"], self.page_rows, self._empty, self.rows,
                             UNUSED, beyond_len_used):
            return no_double_allocation_linear(C, s)
        return None


class IncrementalCPReplayMap(IncrementalRows, CPReplayMap):
    """The CP replay's sharded cache, incrementally (what strict verified mode attaches)."""
