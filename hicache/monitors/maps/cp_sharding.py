"""Refinement map: the replicated CP page tree (hicache.dist.cache_model) -> spec/CPSharding.

Every CP rank holds the same logical tree and allocators, so one rank's tree is the whole
state the spec talks about. The spec's chains are linear runs of positions; the tree
branches, and a request holds its freshly allocated pages outside the tree until it
inserts them. The map:

  spec chain      either a *tree chain*: a node and the run of descendants that continued it
                  (a node continues its parent's chain iff the parent was that chain's tail
                  when the node appeared; otherwise it heads a new chain; root children
                  always head one), or a *request chain*: the pages of one `alloc_device`
                  call that are still allocated and in no node (a request between its
                  allocation and its insert, the spec's chain d before a splice). Chain ids
                  are kept while the chain lives and reused once it is empty.
  spec position   the node's position minus its chain head's (a request chain: its page's
                  chain position minus the allocation's start), so a chain of base b whose
                  head sits at position h has rotation rot = (b + h) mod CP
  page[c][P]      the node's logical device page (NoPage when it has none)
  host[c][P]      the owner rank of its host page, once that copy exists (a host page whose
                  backup is still in flight is no copy yet: the spec's OwnerBackup is the
                  backup's completion)
  free            the device allocator's free logical pages
  mixed           sticky: some node's base differs (mod CP) from its parent's (a splice of
                  two rotations was accepted)
  Chains/MaxLen   1..capacity(live chains), capacity(longest chain) (doubling)

Events and spec steps (each event is checked after the runtime finished its step):
  ChainAllocate with `pages` (a new chain's allocation, the engine announced ChainAllocate
  and nothing was evicted since): ChainAllocate(d), then ChainExtend(d) for each further
  page (ExtendByAllocation)
  PageEvict (device copy dropped, host kept; or the node left the tree): PageEvict(c, P)
  OwnerBackup: OwnerBackup(c, P)
  compound (the invariants only, after the event): an extension's allocation (its pages
  continue a cached chain's rotation outside the chain until the insert), inserts
  (ChainExtend with `inserted`: a splice with its duplicates freed), InsertReject (a
  partial splice: the accepted part stays), OwnerRestore (the page was allocated before,
  with the extension), and a host copy dropped from a node that stays on device (no spec
  action drops a host copy alone).
Announcements (ChainAllocate/ChainExtend with `rid`, emitted before the allocation) change
nothing and are not steps. Not mapped: host page addresses (the spec keeps the owner
rank only), locks, LRU clocks and in-flight loads (no spec variable).
"""
from __future__ import annotations

import functools
import operator

from hicache.monitors.generated import cp_sharding as spec
from hicache.monitors.rt import Failure
from hicache.tla.values import Fcn, as_frozenset, mk_fcn

from .steps import capacity

NONE = -1
#: local pages whose placement arithmetic the monitor walks (spec constant ArithPages): the
#: arithmetic is proved for every size (`hicache prove`: PagePlacementIsBijection,
#: TokOwnerIsPageOwner, PlacementIsBijection), so a device-sized LocalPages is checked on a
#: prefix (every token of 2 x 31,250 pages of 64 took ~10 s, once per constants binding)
ARITH_PAGES = 64


def arith_pages(local_pages: int) -> int:
    """ArithPages for a runtime of `local_pages` device pages per rank."""
    return max(1, min(local_pages, ARITH_PAGES))


class CPShardingMap:
    spec = spec

    def __init__(self, tree):
        self.tree = tree
        self.cp = tree.layout.cp_size
        self.local_pages = tree.device.pages_per_rank
        tree.alloc_log = {}                   # page -> (allocation id, base, position)
        self.chains: dict[int, list] = {}     # tree chain id -> its nodes, head first
        self.where: dict = {}                 # node -> tree chain id
        self.by_key: dict[str, object] = {}   # key -> node, for events naming a node
        self.requests: dict[int, int] = {}    # allocation id -> request chain id
        self.mixed = False
        self.announced: str | None = None     # the engine's last announcement
        self.n_chains = capacity(1)
        self.max_len = capacity(1)
        self.pre = self.cur = self._compute()
        self.trail: list = []

    # ------------------------------------------------------------ constants / state
    def constants(self) -> dict:
        return {"CP": self.cp, "LocalPages": self.local_pages, "PageSize": self.tree.layout.page_size,
                "ArithPages": arith_pages(self.local_pages),
                "Chains": frozenset(range(1, self.n_chains + 1)), "MaxLen": self.max_len,
                "BugSpliceAnyRotation": False}

    def state(self) -> dict:
        return self.cur

    def _free_id(self, used) -> int:
        c = 1
        while c in used:
            c += 1
        return c

    def _sync_chains(self) -> None:
        """Bring the chain decomposition up to the tree (nodes leave only as leaves, i.e.
        as chain tails; new nodes continue their parent's chain or head a new one)."""
        tree, live = self.tree, []
        stack = list(reversed(tree.root.children.values()))
        while stack:                      # preorder, children in insertion order
            n = stack.pop()
            live.append(n)
            stack.extend(reversed(n.children.values()))
        alive = set(map(id, live))
        for cid in list(self.chains):
            nodes = [n for n in self.chains[cid] if id(n) in alive]
            for n in self.chains[cid]:
                if id(n) not in alive:
                    self.where.pop(n, None)
                    if self.by_key.get(n.key) is n:
                        del self.by_key[n.key]
            if nodes:
                self.chains[cid] = nodes
            else:
                del self.chains[cid]
        for n in live:
            if n in self.where:
                continue
            p = n.parent
            cid = self.where.get(p) if p is not tree.root else None
            if cid is None or self.chains[cid][-1] is not p:
                cid = self._free_id(set(self.chains) | set(self.requests.values()))
                self.chains[cid] = []
            self.chains[cid].append(n)
            self.where[n] = cid
            self.by_key[n.key] = n
            if p is not tree.root and p.base % self.cp != n.base % self.cp:
                self.mixed = True

    def _compute(self) -> dict:
        self._sync_chains()
        tree, cp = self.tree, self.cp
        allocated = tree.device.allocated()
        in_tree = {n.device_page for nodes in self.chains.values() for n in nodes if n.device_page is not None}
        rows: dict[int, tuple[int, list, list]] = {}
        for cid, nodes in self.chains.items():
            h = nodes[0]
            pages = [NONE if n.device_page is None else n.device_page for n in nodes]
            hosts = [NONE if n.host_page is None or n.backing_up else tree.layout.page_owner(n.host_page)
                     for n in nodes]
            rows[cid] = ((h.base + h.position) % cp, pages, hosts)
        # request chains: pages of one allocation still allocated and in no node
        pend: dict[int, dict] = {}
        for page, (aid, base, pos) in tree.alloc_log.items():
            if page in allocated and page not in in_tree:
                pend.setdefault(aid, {"base": base, "pos": {}})["pos"][pos] = page
        for aid in list(self.requests):
            if aid not in pend:
                del self.requests[aid]
                tree.allocations.pop(aid, None)
        for aid in sorted(pend):
            rec = pend[aid]
            start, base, count = tree.allocations[aid]
            cid = self.requests.get(aid)
            if cid is None:
                cid = self.requests[aid] = self._free_id(set(self.chains) | set(self.requests.values()))
            pages = [rec["pos"].get(start + i, NONE) for i in range(count)]
            rows[cid] = ((base + start) % cp, pages, [NONE] * count)
        longest = max((len(p) for _, p, _ in rows.values()), default=1)
        if max(rows, default=1) > self.n_chains:
            self.n_chains = capacity(max(rows), self.n_chains)
        if longest > self.max_len:
            self.max_len = capacity(longest, self.max_len)
        L = self.max_len
        rot, ln, page, host = {}, {}, {}, {}
        for c in range(1, self.n_chains + 1):
            r, pages, hosts = rows.get(c, (NONE, [], []))
            rot[c], ln[c] = r, len(pages)
            page[c] = Fcn({P: (pages[P] if P < len(pages) else NONE) for P in range(L)})
            host[c] = Fcn({P: (hosts[P] if P < len(hosts) else NONE) for P in range(L)})
        pids = frozenset(range(cp * self.local_pages))
        return {"rot": mk_fcn(rot), "len": mk_fcn(ln), "page": mk_fcn(page), "host": mk_fcn(host),
                "free": pids - allocated, "mixed": self.mixed}

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        if "rid" in fields and action in ("ChainAllocate", "ChainExtend"):
            self.announced = action
            return None
        if action == "PageEvict":
            self.announced = None     # the allocation evicts first: see _alloc
        if action not in _EVENTS:
            return None
        shape = (self.n_chains, self.max_len)
        self.trail = []
        params = _EVENTS[action](self, fields)
        t = self._compute()
        if (self.n_chains, self.max_len) != shape:
            # re-dimensioned: the pre-state padded to the new shape, then the step
            self.pre = self._pad(self.cur)
            self.trail.append(("(capacity)", None, self.pre))
        else:
            self.pre = self.cur
        if action == "ChainAllocate" and params is not None:
            self._allocation_steps(fields, t)
        else:
            self.trail.append((action, params, t))
        self.cur = t
        return [(a, p) for a, p, _ in self.trail]

    def _pad(self, s: dict) -> dict:
        """State `s` in the current shape (Chains, MaxLen grew): new chains are empty, new
        positions hold neither page nor host copy."""
        n, L = self.n_chains, self.max_len
        old = len(s["rot"])

        def row(f, c):
            d = f[c - 1].d if c <= old else {}
            return Fcn({P: d.get(P, NONE) for P in range(L)})
        return {"rot": mk_fcn({c: s["rot"][c - 1] if c <= old else NONE for c in range(1, n + 1)}),
                "len": mk_fcn({c: s["len"][c - 1] if c <= old else 0 for c in range(1, n + 1)}),
                "page": mk_fcn({c: row(s["page"], c) for c in range(1, n + 1)}),
                "host": mk_fcn({c: row(s["host"], c) for c in range(1, n + 1)}),
                "free": s["free"], "mixed": s["mixed"]}

    def _allocation_steps(self, fields: dict, t: dict) -> None:
        """A new chain's allocation, page by page: ChainAllocate(d), ChainExtend(d)..."""
        d = self.requests.get(fields["allocation"])
        if d is None:                 # every page already gone again: nothing to show
            self.trail.append(("ChainAllocate", None, t))
            return
        s = self.pre
        n = len(fields["pages"])
        free = set(s["free"])
        row = {P: NONE for P in range(self.max_len)}
        rot, ln, page = dict(enumerate(s["rot"], 1)), dict(enumerate(s["len"], 1)), dict(enumerate(s["page"], 1))
        for i, p in enumerate(fields["pages"]):
            row[i] = p
            free.discard(p)
            if i == 0:
                rot[d] = t["rot"][d - 1]
            ln[d] = i + 1
            page[d] = Fcn(dict(row))
            st = dict(t) if i == n - 1 else {**s, "rot": mk_fcn(rot), "len": mk_fcn(ln), "page": mk_fcn(page),
                                              "free": frozenset(free)}
            self.trail.append(("ChainAllocate" if i == 0 else "ChainExtend", (d,), st))

    def _node_step(self, fields: dict):
        """(c, P) of the node the event names, in the pre-state's decomposition."""
        n = self.by_key.get(fields.get("key"))
        if n is None or n not in self.where:
            return None
        cid = self.where[n]
        return (cid, self.chains[cid].index(n))

    def _alloc(self, fields: dict):
        """A new chain's allocation is action-checked when nothing was evicted since the
        engine chose its class: the engine picks the least-full class, then evicts to make
        room, then allocates; the spec picks and allocates in one step, so after an
        eviction the picked class may no longer be least-full (invariants only then)."""
        new = self.announced == "ChainAllocate" and fields["start"] == 0
        self.announced = None
        return () if new else None

    def _evict(self, fields: dict):
        at = self._node_step(fields)
        if at is None:
            return None
        if fields["tier"] == "host" and self.by_key[fields["key"]].device_page is not None:
            return None               # host copy dropped, device kept: no spec action
        return at


_EVENTS = {
    "ChainAllocate": CPShardingMap._alloc,
    "ChainExtend": lambda m, f: None,
    "InsertReject": lambda m, f: None,
    "OwnerRestore": lambda m, f: None,
    "PageEvict": CPShardingMap._evict,
    "OwnerBackup": CPShardingMap._node_step,
}


def no_double_allocation_linear(C, s, padded=None, blank=None):
    """NoDoubleAllocation in one pass over the pages (the generated form is chains^2 x
    positions^2), reporting the same (first failing) conjunct;
    tests/monitors/test_map_cp_sharding.py checks it against the generated check.

    Each row is read with C-level passes (its device pages filtered out of its values, the
    positions past its length read as one slice): a CP replay's rows are padded to MaxLen,
    so most positions are NoPage, and a per-position Python loop was most of a step's cost.
    `padded(c, row, host row, len)`: True for a chain whose rows a map built holding NoPage
    past len by construction (their positions past len are then not read). `blank`: a row
    the map built holding NoPage at every position; a chain whose page and host rows are
    both it uses no page anywhere, so it is not read at all."""
    bad: set[int] = set()
    free = s["free"]
    rows, hosts, lens = s["page"], s["host"], s["len"]
    used: list = []           # every device page of every position of every chain
    not_none = _IS_PAGE     # (operator.ne: a numpy integer page compares as an int)
    for c in C["Chains"]:
        rowf, hrowf, ln = _ap(rows, c), _ap(hosts, c), _ap(lens, c)
        if blank is not None and rowf is blank and hrowf is blank:
            continue        # (NoPage at every position of both rows: no page used)
        row, hrow = rowf.d, hrowf.d
        used += filter(not_none, row.values())
        if 3 not in bad and len(row) > ln and not (padded is not None and padded(c, rowf, hrowf, ln)) \
                and beyond_len_used(row, hrow, ln):
            bad.add(3)
    seen = set(used)
    if len(seen) != len(used):
        bad.add(1)
    if not free.isdisjoint(seen):
        bad.add(2)
    if any(p not in free and p not in seen for p in _missing(C["PageIds"], free, seen)):
        bad.add(4)
    return _fail(min(bad)) if bad else None


_IS_PAGE = functools.partial(operator.ne, NONE)


def beyond_len_used(row: dict, hrow: dict, ln: int) -> bool:
    """Some position P >= ln of a row holds a page or a host copy (positions 0..len(row)-1
    read as slices; a row over other positions is walked one by one)."""
    n = len(row)
    try:
        tail = list(map(row.__getitem__, range(ln, n)))
        htail = list(map(hrow.__getitem__, range(ln, n)))
    except KeyError:
        return any(P >= ln and (p != NONE or hrow[P] != NONE) for P, p in row.items())
    return tail.count(NONE) != len(tail) or htail.count(NONE) != len(htail)


def _missing(page_ids, free, seen):
    """The page ids in neither `free` nor `seen` (the candidates of conjunct 4), by set
    difference when the ids are a finite set or an interval."""
    ids = as_frozenset(page_ids)
    return ids - free - seen if type(free) is frozenset or isinstance(free, set) else ids


def _ap(f, c):
    return f[c - 1] if isinstance(f, tuple) else f.d[c]


def _fail(k: int) -> Failure:
    text, loc = spec._T_inv_NoDoubleAllocation[k - 1]
    return Failure("NoDoubleAllocation", k, text, loc)


CPShardingMap.invariant_overrides = {"NoDoubleAllocation": no_double_allocation_linear}
