"""Refinement map: the CP replay's sharded cache (hicache.replay.cp.ShardedCache) -> spec/CPSharding.

The replay runs one logical radix tree of multi-page nodes whose device pages are logical
page IDs sharded over CP owner classes (page p on rank p mod CP). Every node below a root
child is placed with that subtree's rotation: the device page at depth D (pages above it
on its path) is in class (b + D) mod CP, b the class of the root child's first page. The map
(from scratch at each checked event; invariants only: each runtime event is a compound of
spec steps, as for HostTier):

  spec chain      one tree node (its pages are consecutive positions 0..n-1), or one
                  pending allocation: pages `alloc` handed out and no node holds yet (a
                  request between its allocation and its insert, the spec's chain before a
                  splice). Chains = 1..capacity(#chains), MaxLen = capacity(longest chain)
                  (doubling, so the constants change O(log n) times)
  rot[c]          (b + D) mod CP for a node at depth D in a subtree of rotation b: the class
                  of its root child's first page, or (no device copy there) the rotation the
                  cache recorded for the subtree (NoRot if none); a pending
                  allocation: (base + start) mod CP of the chain segment it was placed for
  page[c][P]      the node's P-th logical device page (NoPage without a device copy)
  host[c][P]      NoHost: the replay's host tier is one pool, not per rank (no owner rank is
                  recorded), so RestoreKeepsOwner is vacuous here; a load-back's placement is
                  still checked, by PositionOwner (it allocates with the subtree's rotation)
  free            the sharded allocator's free logical pages
  mixed           FALSE: a node is its own chain, so the continuity of a rotation across
                  nodes is what PositionOwner checks (every page against its subtree's base)

A page allocated and held by no node and no pending allocation is in no chain: the spec's
NoDoubleAllocation (its last conjunct: no page leaks) reports it.
"""
from __future__ import annotations

from hicache.monitors.generated import cp_sharding as spec
from hicache.monitors.maps.cp_sharding import NONE, arith_pages, no_double_allocation_linear
from hicache.monitors.rt import Failure
from hicache.monitors.runtime import compound_step, compound_steps
from hicache.protocol.vocabulary import HostTier as HostTierAction
from hicache.tla.values import KK_INT, Fcn

from .loops import chain_rows, chain_walk, ints_within, pending_allocs, steps_table
from .steps import capacity

#: each runtime action's compound step (compound_step's shared value) but LoadBackLayer's
#: (no step), for `bind`
_STEPS = compound_steps(a for a in HostTierAction if a is not HostTierAction.LoadBackLayer)

_INT = frozenset({int})


def _bind_other(action: str, fields: dict):
    """CPReplayMap.bind of an action with no steps in _STEPS."""
    if action == "LoadBackLayer":
        return None      # emitted on the transfer thread; no page moves
    return compound_step(action)


def chain_typed(r, n, cp: int, L: int, no_rot) -> bool:
    """rot[c] \\in Ranks \\cup {NoRot} (Ranks = 0..CP-1) and len[c] \\in 0..MaxLen, on their values."""
    return r.__class__ is int and (r == no_rot or 0 <= r < cp) and n.__class__ is int and 0 <= n <= L


def shape_typed(C: dict, s: dict, n: int, L: int, cp: int, ids: frozenset) -> bool:
    """TypeOK's conjuncts on a chain map's state but for each chain's own values: the
    constants are this map's (n chains, MaxLen L, CP cp, page ids `ids`, one -1 for NoRot,
    NoPage and NoHost), rot, len, page and host are sequences over the n chains, free is a
    set of integer page ids and mixed is FALSE. (What then remains is each chain's rot, len,
    page row and host row: `chain_typed`, and the rows' pages.)"""
    rot, ln, page, host, free = s["rot"], s["len"], s["page"], s["host"], s["free"]
    return (L == C["MaxLen"] and C["Chains"] == frozenset(range(1, n + 1)) and C["CP"] == cp
            and C["CP"] * C["LocalPages"] == len(ids) and C["NoRot"] == C["NoPage"] == C["NoHost"] == NONE
            and type(rot) is type(ln) is type(page) is type(host) is tuple
            and len(rot) == len(ln) == len(page) == len(host) == n
            and type(free) is frozenset and free <= ids and set(map(type, free)) <= _INT
            and s["mixed"] is False)


def pages_typed(pages, n: int) -> bool:
    """A row's pages are integer page ids (PageIds = 0..n-1) or NoPage, each an exact int
    (what its padded row then holds): one C pass, no set built (`loops.ints_within`)."""
    return ints_within(pages, n, NONE)


class CPReplayMap:
    spec = spec
    needs_prestate = False       # every event is a compound step: invariants only
    what = "sharded placement"
    #: the rows of the last state built: (MaxLen, the shared all-NoPage row, chain -> (its page
    #: row, the pages it was built from)); what TypeOK is decided by on that state
    built: tuple = (0, None, {})
    #: MaxLen positions of NoPage (position -> NoPage): what `state` copies each row from;
    #: never handed out (a copy is)
    _blank: dict = {}

    @property
    def invariant_overrides(self) -> dict:
        return {"NoDoubleAllocation": self.no_double_allocation_built, "TypeOK": self.type_ok_built}

    def __init__(self, cache):
        self.cache = cache
        self._placement(cache)
        # the cache records each allocation while a map watches it; pruned here once every
        # page of it is in a node or free again
        if cache.alloc_log is None:
            cache.alloc_log = {}
        self.n_chains = capacity(1)
        self.max_len = capacity(1)
        # chain ids are kept while their node (or pending allocation) lives and reused once
        # it is gone, so consecutive mapped states (and a trace's diffs) name chains stably
        self.ids: dict = {}
        if type(self).state is not CPReplayMap.state or type(self).constants is not CPReplayMap.constants:
            # (a map with a state or constants of its own: its constants are its constants())
            self.state_constants_key = None
        self.pids = frozenset(range(self.cp * self.local_pages))    # every logical page (fixed)
        self.n_pids = len(self.pids)       # PageIds = 0..n_pids-1, what a page row may hold with NoPage (TypeOK)
        if type(self).bind is CPReplayMap.bind:
            # (`bind` as a callable of its own, read off the instance before the class: the
            # monitor calls it at every event, and as a method each call was a frame entered
            # from C around one dict lookup; the same lookups and calls)
            self.bind = steps_table(_STEPS, _bind_other)

    def _placement(self, cache) -> None:
        """CP, LocalPages and PageSize of the cache's device pool (a sharded one's layout)."""
        self.cp = cache.layout.cp_size
        self.local_pages = cache.dev_alloc.pages_per_rank
        self.page_size = cache.layout.page_size

    def _subtree_base(self, x):
        """The rotation base of the subtree under root child x: the owner class of its first
        page, or (no device copy there: device copies form a prefix of every path, so then no
        node below should have one) the rotation the cache recorded for the subtree."""
        cache = self.cache
        return cache.layout.page_owner(x.device[0]) if x.device else cache._bases.get(x.key[:cache.tree.pb])

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        # (the runtime's actions' steps looked up here, not through compound_step's call:
        # this runs at every event; an instance's own `bind`, made in __init__, does the same)
        steps = _STEPS.get(action)
        if steps is not None:
            return steps
        return _bind_other(action, fields)

    # ------------------------------------------------------------ constants / state
    def constants_key(self) -> tuple:
        """What `constants()` depends on that can change (CP, LocalPages and PageSize are the
        pool's, fixed): the monitor keeps its bindings by it, so a check builds no key of the
        Chains set (~10 us a call)."""
        return (self.n_chains, self.max_len)

    def state_constants_key(self, t: dict) -> tuple:
        """The key of `state_constants(t)`, ints all: the pool's placement and the chains'
        capacities as the state t, the last this map mapped, left them."""
        return self.cp, self.local_pages, self.page_size, *self.constants_key()

    def state_constants(self, t: dict) -> dict:
        """`constants()` of the moment t was mapped: the capacities `state` grew for it."""
        return self.constants()

    def constants(self) -> dict:
        return {"CP": self.cp, "LocalPages": self.local_pages, "PageSize": self.page_size,
                "ArithPages": arith_pages(self.local_pages),
                "Chains": frozenset(range(1, self.n_chains + 1)), "MaxLen": self.max_len,
                "BugSpliceAnyRotation": False}

    def _rows(self, allocated: set[int]) -> dict[int, tuple[int, list]]:
        """Chain id -> (rot, device pages or NoPage per position): one chain per tree node,
        one per pending allocation."""
        cache, cp = self.cache, self.cp
        # (node or allocation id, rot, pages) of each node in preorder, and the device pages
        # the tree holds (loops.chain_walk, in C where it builds)
        roots = list(cache.tree.root.children.values())
        rows, held = chain_walk(roots, [self._subtree_base(x) for x in roots], cp, NONE)
        # the pending allocations, newest first (a page freed and handed out again belongs to
        # the newer one), those inserted or freed by now dropped from the log (in sample mode
        # it holds every allocation since the last check: loops.pending_allocs, in C where
        # it builds)
        pending_allocs(cache.alloc_log, allocated, held, cp, NONE, rows)
        return self._number(rows)

    def _number(self, rows: list) -> dict[int, tuple[int, list]]:
        live = {key for key, _, _ in rows}
        for key in [k for k in self.ids if k not in live]:
            del self.ids[key]
        used = set(self.ids.values())
        free = (c for c in range(1, len(rows) + len(used) + 2) if c not in used)
        out = {}
        for key, rot, pages in rows:
            cid = self.ids.get(key)
            if cid is None:
                cid = self.ids[key] = next(free)
            out[cid] = (rot, pages)
        return out

    @staticmethod
    def row(pages, L: int) -> Fcn:
        """A chain's row: positions 0..L-1, NoPage past the chain's end (one C-level build);
        its keys are integers (KK_INT: TypeOK's membership test need not look at them)."""
        return Fcn(dict(zip(range(L), [*pages, *[NONE] * (L - len(pages))])), KK_INT)

    def state(self) -> dict:
        pids = self.pids
        free = pids & self.cache.dev_alloc.free_set()
        rows = self._rows(pids - free)
        if max(rows, default=1) > self.n_chains:
            self.n_chains = capacity(max(rows), self.n_chains)
        longest = max((len(p) for _, p in rows.values()), default=1)
        if longest > self.max_len:
            self.max_len = capacity(longest, self.max_len)
        L = self.max_len
        # each row a copy of the all-NoPage row with the chain's pages written over its
        # first positions: the same keys in the same order and the same values as `row`
        # builds, at a fraction of its cost (a copy of a dict is one C-level block copy)
        blank = self._blank
        if len(blank) != L:
            blank = self._blank = dict.fromkeys(range(L), NONE)
        empty = Fcn(blank.copy(), KK_INT)
        # chains 1..n_chains in order: each variable is a sequence, the value mk_fcn makes of
        # a function on 1..n (a tuple; () for n = 0), built as one; a chain of no device page
        # (a node whose copies left the device) has the all-NoPage row, the state's shared
        # one, as its host row; the others are copies of it with their pages over it
        # (loops.chain_rows, in C where it builds)
        rot, ln, page, built = chain_rows(rows, self.n_chains, blank, empty, Fcn, KK_INT, NONE)
        self.built = (L, empty, built)
        return {"rot": rot, "len": ln, "page": page, "host": (empty,) * self.n_chains,
                "free": free, "mixed": False}

    def no_double_allocation_built(self, C, s) -> Failure | None:
        """NoDoubleAllocation's linear form, with the positions past a chain's length not
        read where the state holds the rows `state` built for it (its pages padded with
        NoPage, the shared all-NoPage host row) and len is its pages' count: nothing is
        used there by construction; a chain whose page and host rows are both that state's
        all-NoPage row is not read at all. Any other row, from another state or not built
        here, is read (rows are built anew for each state, so an older state's never passes)."""
        _, empty, built = self.built

        def padded(c, row, hrow, ln) -> bool:
            got = built.get(c)
            return hrow is empty and (row is empty and ln == 0 or got is not None and got[0] is row
                                      and ln == len(got[1]))
        return no_double_allocation_linear(C, s, padded, empty)

    def type_ok_built(self, C, s) -> Failure | None:
        """TypeOK on a state, decided by the pages of the rows this map built for it when it
        holds those very rows; any doubt (a row it did not build, a value of another kind,
        other constants): the generated form, which decides and names a failure.

        A row `state` built is the chain's pages padded with NoPage to MaxLen positions
        (`row`; the state's shared all-NoPage row for a chain whose pages are all NoPage),
        every host row that shared one (NoHost = NoPage = -1: no host
        placement is mapped), so `page[c] \\in [Pos -> PageIds \\cup {NoPage}]` is decided by
        the chain's few pages, not its MaxLen entries (the generated form's membership test
        walks each row: ~50k instructions a row at MaxLen 64); rot, len, free and mixed are
        tested on their values."""
        L, empty, built = self.built
        rot, ln, page, host = s["rot"], s["len"], s["page"], s["host"]
        n, cp = self.n_chains, self.cp
        if not shape_typed(C, s, n, L, cp, self.pids):
            return spec.inv_TypeOK(C, s)
        n_pids = self.n_pids
        for i in range(n):
            row = page[i]
            if not (chain_typed(rot[i], ln[i], cp, L, NONE) and host[i] is empty):
                return spec.inv_TypeOK(C, s)
            if row is not empty:
                got = built.get(i + 1)
                if got is None or got[0] is not row or not pages_typed(got[1], n_pids):
                    return spec.inv_TypeOK(C, s)
        return None

