"""Refinement map: the single-engine runtime (hicache.runtime.cache.HiCache) -> spec/HostTier.

The spec models one chain of one-page nodes, one slot per node and one slot per prefetch;
the runtime has a radix tree of multi-page nodes and multi-slot transfers. The adapter
(see docs/monitors.md, "HostTier abstraction"):

  * spec node n     = one runtime *page*: the tree's pages numbered in DFS preorder (the
                      pages of a node consecutively); len = pages in the tree, so InTree(n)
                      holds for every mapped page. NNodes = len (at least 1).
  * spec slot h     = runtime host slot h-1 (NoSlot = 0); NSlots = host capacity.
  * host[n] / backupOp[n]: the page's slot; a slot still RESERVED under an in-flight
                      device->host write is backupOp (the runtime records `node.host` when
                      the write starts, the spec when it ends).
  * spec request q  = a live request (followed through the events, or read off the
                      runtime's request table: `Requests`), or one slot of an in-flight
                      prefetch: the spec gives a prefetch one slot, the runtime many, so each
                      prefetch slot is its own pseudo-request (req "matched", pfSlot = slot,
                      pfAbort = its request was aborted).
  * loadReq[n]      = the pseudo index of the request whose load-back fills page n.

What is not mapped (and so not checked here): hit counts (hits = min(hits, 2)), load
layers (loadDone = 0), request prefix lengths (reqLen = 0, so LockedNodesKept is vacuous),
and the chain order that WriteThroughPrefix relies on (parent of n is n-1): the map checks
that property itself, per root-to-leaf path, as `WriteThroughPrefix` over the tree.
Action checks need one spec step per event; runtime events move whole nodes, so this map
reports every event as a compound step and the monitor checks the invariants after it.
"""
from __future__ import annotations

import enum
from types import MappingProxyType

from hicache.monitors import native
from hicache.monitors.generated import host_tier as spec
from hicache.monitors.maps.loops import (byte_names, count_pages, enumerated, node_slots, one_owner_breach,
                                         parent_breach, slot_owner_breach, spread, tree_nodes, tree_pages)
from hicache.monitors.rt import Failure
from hicache.monitors.runtime import compound_step, compound_steps, kept
from hicache.protocol.vocabulary import HostTier as HostTierAction
from hicache.runtime.allocator import HostSlotState
from hicache.runtime.cache import own_loads
from hicache.tla.values import KK_DENSE0, KK_INT, Fcn, mk_fcn

_SLOT_NAME = {
    HostSlotState.IDLE: "idle", HostSlotState.RESERVED: "reserved", HostSlotState.PROTECTED: "protected",
    HostSlotState.SYNCED: "synced", HostSlotState.BACKUP: "backup",
}
_NAMES = [None] * (max(int(s) for s in HostSlotState) + 1)
for _s, _n in _SLOT_NAME.items():
    _NAMES[int(_s)] = _n
_IDLE = int(HostSlotState.IDLE)     # (the one state named "idle")

#: events that name the node a request's lock now holds (field `node`)
_MOVES_LOCK = frozenset({"RequestMatch", "DeviceInsert", "PrefetchFinish"})

#: the events that end a load-back (its ack popped; LoadBackFail: its copy failed)
_LOAD_ENDS = frozenset({"LoadBackFinish", "LoadBackFail"})
#: runtime event -> request phase after it (None: the request leaves)
_PHASE = {"RequestMatch": "matched", "LoadBackStart": "loading", "LoadBackFinish": "running",
          "LoadBackFail": "running", "DeviceInsert": "running", "RequestFinish": None, "RequestAbort": None}




#: loadReq of a page whose node is still marked loading for a request that has ended (its
#: LoadBackFinish came and went): no request, and not NoReq either (the node says a load is
#: pending), so TypeOK refuses it: `node.loading` was never cleared
ENDED_REQ = -1
#: the sequences the linear invariant forms' C passes index (a state's own: tuples)
_SEQS = (tuple, list)
#: each runtime action's compound step (compound_step's shared value), for `bind`
_STEPS = compound_steps(HostTierAction)


def _step_of(action, fields: dict):
    """`bind` under Requests.RUNTIME, and what `bind` returns under Requests.EVENTS: the
    event's compound step, looked up here, not through compound_step's call (None:
    LoadBackLayer, the loader thread's, which maps to no variable), nothing kept."""
    if action == "LoadBackLayer":
        return None
    return _STEPS.get(action) or compound_step(action)


def lock_len(node, in_tree, n: int) -> int:
    """reqLen of a live request whose lock holds node id `node` (None: none known): the spec
    locks the whole chain (reqLen = len at the match) and LockedNodesKept asks reqLen <=
    len; the tree form locks the path to the node, so a path still in the tree is 0 (holds
    for any len) and a locked node that left it is n + 1 (a locked prefix beyond the tree:
    the deletion of a locked node, which LockedNodesKept refuses)."""
    return 0 if node is None or in_tree(node) else n + 1


def load_req(q: int, rid) -> int:
    """loadReq of a page whose node is loading for request `rid`, whose request slot is q (0:
    not live)."""
    return q if q or rid is None else ENDED_REQ


def prefetch_row(orphan: bool, anchored: bool, n: int, pfslot: list, pfabort: list, reqlen: list,
                 h: int) -> str:
    """One prefetch slot as a pseudo-request (the spec gives a prefetch one slot): appends
    its pfSlot, pfAbort and reqLen, returns its req phase.

    A live prefetch is a matched request whose locked prefix is its anchor's path: the
    anchor must stay in the tree (it is host-referenced), and a detached one puts the
    prefix beyond the tree (reqLen = len + 1, which LockedNodesKept refuses). An orphan
    (its request aborted, the I/O still running) is the spec's state after RequestAbort:
    idle, no locks (its anchor was released and may legally leave), pfAbort TRUE, the slot
    kept until the I/O ends."""
    pfslot.append(h + 1)
    pfabort.append(orphan)
    if orphan:
        reqlen.append(0)
        return "idle"
    reqlen.append(0 if anchored else n + 1)
    return "matched"


class Requests(enum.Enum):
    """Where a HostTierMap learns the requests' bookkeeping (phases, own loads, locked
    nodes, a blocking copy's slots), which the runtime's tree and slots do not show.

    EVENTS: `bind` follows them through every event, the map's own record of what the
    events said (strict mode's incremental map needs it at each step). RUNTIME: read off the
    runtime's request table (`HiCache.requests`, each request's phase, node and own loads,
    and `HiCache.sync_backup`) when a state is mapped; `bind` keeps nothing, so a
    sample-mode gate counts and records an event between samples without binding it
    (`pure_bind`). The two agree at every event of a run
    (tests/monitors/test_host_tier_requests.py compares them over the clean sweep's and the
    bug zoo's workloads)."""
    EVENTS = "events"
    RUNTIME = "runtime"


#: sample mode draws an eviction at this many times its rate (the gap counts the other events):
#: an eviction is where most of the reference's breaches begin (a page or slot taken while a
#: lock, a load, a copy or a fetch still holds it: bugs 7, 9, 10, 12), and a breach the
#: runtime repairs a few events later is seen only by a sample inside it. A uniform rate
#: making as many checks catches such breaches far less often (measured with `hicache bugzoo
#: --sample-rate`: docs/monitors.md, "What sample mode sees of the zoo")
EVICTION_WEIGHT = 5
#: the evictions: drawn at their weight, and checked when the map's trigger names one
_EVICTIONS = ("DeviceEvict", "HostEvict")


#: the flat functions by page count: n -> (0 on every page 0..n, FALSE on every page 0..n),
#: kept for every from-scratch map of the process (a function is immutable: states share it,
#: as one state's variables share `zeros`); built, ~22k instructions each, two or three of a
#: state's seven per-page functions, and at a fresh map's first state (each replay of the
#: monitors bench) for want of a map's own. Bounded, the oldest dropped first (`runtime.kept`)
_FLATS: dict = {}
_FLATS_MAX = 16


def _flats(n: int) -> tuple:
    """(0 on every page, FALSE on every page): the two flat functions over the pages 0..n."""
    got = _FLATS.get(n)
    if got is None:
        pages = range(n + 1)
        got = kept(_FLATS, n, (Fcn(dict.fromkeys(pages, 0), KK_INT | KK_DENSE0),
                               Fcn(dict.fromkeys(pages, False), KK_INT | KK_DENSE0)), _FLATS_MAX)
    return got


class HostTierMap:
    spec = spec
    needs_prestate = False     # every event is a compound step: invariants only
    sample_weights = MappingProxyType(dict.fromkeys(_EVICTIONS, EVICTION_WEIGHT))
    #: ... and checks one whatever the draw and the budget when `trigger` says it took a node
    #: something still holds (see there)
    trigger_events = frozenset(_EVICTIONS)
    #: the events `bind` maps to no step, changing nothing (LoadBackLayer, the loader
    #: thread's); it maps every other event to one, so sample mode's gate may hold those and
    #: bind them later, in order (deferred binding: monitors/gate.py). The incremental map
    #: inherits it and is never gated (strict mode steps it at every event)
    unbound_actions = frozenset({"LoadBackLayer"})

    def __init__(self, cache, requests: Requests = Requests.EVENTS):
        if not isinstance(requests, Requests):
            raise TypeError(f"requests: a Requests, not {requests!r}")
        self.cache = cache
        self.requests_from = requests
        #: whether `bind` changes nothing (it maps an event to its step and keeps no
        #: bookkeeping): a gate may then count an event without calling it (monitors/gate.py)
        self.pure_bind = requests is Requests.RUNTIME
        self.phase: dict[int, str] = {}      # live request id -> spec phase
        self.loads: dict[int, int] = {}      # request id -> its loads whose LoadBackFinish is to come
        self.ending: set[int] = set()        # ended (finished/aborted) with a load still to finish
        # live request id -> id of the node its lock holds (the path root..node is locked):
        # from the events that move a request's node (match, insert, prefetch join)
        self.req_node: dict[int, int] = {}
        self.sync_backup: dict[int, list[int]] = {}   # write_back: node id -> slots being copied
        if type(self).state is not HostTierMap.state or type(self).constants is not HostTierMap.constants:
            # (a map with a state or constants of its own: its constants are its constants())
            self.state_constants_key = None
        # `bind` in C over this bookkeeping (csrc/incmap.c's binder: the rules `bind` below
        # states, which serve where it cannot be built), None without it. It serves as this
        # map's `bind` (an instance attribute: what a monitor calls at every event); a
        # subclass that binds more calls it from its own `bind`
        self._nbind = _native_binder(self) if not self.pure_bind else None
        if self._nbind is not None and type(self).bind is HostTierMap.bind:
            self.bind = self._nbind
        elif self.pure_bind:
            if type(self).bind is not HostTierMap.bind:
                raise TypeError(f"{type(self).__name__}: its own bind follows the events (Requests.EVENTS)")
            self.bind = _step_of
        # ... and `trigger` in C over this cache (csrc/incmap.c's trigger_probe: `trigger`
        # below defines it), sample mode's question at every eviction, where it builds and no
        # subclass defines its own
        mod = native.module()
        if mod is not None and type(self).trigger is HostTierMap.trigger:
            self.trigger = mod.trigger_probe(cache)

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        if action == "LoadBackLayer":
            return None      # emitted on the transfer thread; maps to no variable here
        # (a request's own events, most of a run's, by their own short binders; the others
        # by the general rule they are each a case of: this runs at every event)
        binder = self._binders.get(action)
        if binder is None:
            self._bind_any(action, fields)
        else:
            binder(self, action, fields)
        # invariants only (see module docstring): the event's step, as under Requests.RUNTIME
        return _step_of(action, fields)

    def _bind_any(self, action: str, fields: dict) -> None:
        """What any event moves: its request's phase and lock (`rid`), a blocking copy's slots."""
        rid = fields.get("rid")
        if rid is not None:
            if action in _PHASE:
                self._request_event(action, rid)
            if rid not in self.phase or rid in self.ending:
                self.req_node.pop(rid, None)    # ended (even with a load to finish): unlocked
            elif action in _MOVES_LOCK:
                node = fields.get("node")
                if node is not None:
                    self.req_node[rid] = node
        if action == "BackupStart":
            # a blocking copy (write_back) sets the node's host slots only when it ends:
            # until then its slots are the node's backupOp (node_slots)
            node = fields.get("node")
            if node is not None and fields.get("blocking", False):
                self.sync_backup[node] = list(fields.get("slots") or ())
        elif action == "BackupFinish":
            self.sync_backup.pop(fields.get("node"), None)

    def _bind_lock(self, action: str, fields: dict) -> None:
        """RequestMatch and DeviceInsert, as `_bind_any` binds them: a match starts its
        request, an insert moves a live one on ("matched", "running": `_PHASE`), its lock on
        the node the event names; a request that ended with a load to finish, or an insert's
        that is not live, is left as it is, unlocked."""
        rid = fields.get("rid")
        if rid is None:
            return
        if rid in self.ending or (action != "RequestMatch" and rid not in self.phase):
            self.req_node.pop(rid, None)
            return
        self.phase[rid] = _PHASE[action]
        node = fields.get("node")
        if node is not None:
            self.req_node[rid] = node

    def _bind_end(self, action: str, fields: dict) -> None:
        """RequestFinish and RequestAbort, as `_bind_any` binds them: the request leaves, or
        stays "loading" while a load of its is still to finish; unlocked either way."""
        rid = fields.get("rid")
        if rid is None:
            return
        phase = self.phase
        if self.loads.get(rid) and rid in phase:
            self.ending.add(rid)
            phase[rid] = "loading"
        else:
            phase.pop(rid, None)
        self.req_node.pop(rid, None)

    #: the request events' own binders (each a case of `_bind_any`; tests bind recorded runs
    #: and random streams both ways); every other event is bound by `_bind_any`. A plain dict,
    #: read only (a mappingproxy's lookup cost more than the binders save)
    _binders = {"RequestMatch": _bind_lock, "DeviceInsert": _bind_lock,
                "RequestFinish": _bind_end, "RequestAbort": _bind_end}

    def python_bind(self) -> None:
        """Bind by the Python rules from now on (the native binder set aside: tests compare
        the two)."""
        self.__dict__.pop("bind", None)
        self._nbind = None

    def python_trigger(self) -> None:
        """Ask the Python `trigger` from now on (the native one set aside: tests compare the
        two)."""
        self.__dict__.pop("trigger", None)

    def trigger(self, action: str, fields: dict) -> bool:
        """Whether an eviction (`trigger_events`) took a node that something still holds, by
        the runtime's own rule for its victims (radix.py's `device_evictable` and
        `host_evictable`), read off the holders the cache can name: a node a transfer's op
        still holds (an op's `nodes`, until its ack is applied: a load, a copy to host or
        to storage, each blocking a host eviction; a device copy only under an op reading
        or writing device pages, `pins_device`), and a prefetch's anchor (of a live,
        orphaned or untracked fetch) while a request locks it (`lock_ref`, blocking both
        evictions) or a fetch still references its host path (`host_ref`, blocking a host
        eviction). That is where a transient breach begins (bugs 7, 10, 12: the damage is
        repaired or overwritten a few events later, so only a check at the eviction sees
        it), and never what a clean run evicts: it pays this look at the few ops in flight
        per eviction. It decides only when to check: the verdict is the spec's invariants',
        as at any sample."""
        nid = fields.get("node")
        if nid is None:
            return False
        c = self.cache
        in_flight = []
        for w in (c.loader, c.writer, c.prefetcher, c.backuper):
            if w is not None and w.acks:
                in_flight.extend(list(w.acks))      # (a worker may pop its head meanwhile)
        if not in_flight and not c._prefetching and not c._orphans:
            return False        # (nothing in flight: most evictions)
        device = action == "DeviceEvict"
        for op in (*c._prefetching, *c._orphans, *in_flight):
            anchor = getattr(op, "anchor", None)
            if anchor is not None and anchor.id == nid and (anchor.lock_ref or (not device and anchor.host_ref)):
                return True
        for op in in_flight:
            if device and not op.pins_device:
                continue
            for x in op.nodes:
                if x.id == nid:
                    return True
        return False

    def _read_requests(self) -> None:
        """The bookkeeping `bind` keeps under Requests.EVENTS, read off the runtime's request
        table instead (Requests.RUNTIME; in place: the dicts are the map's for good). A live
        request has its phase and its lock's node; an ended one with a load of its own still
        to be applied stays "loading", unlocked (`ending`); either counts those loads."""
        phase, loads, ending, req_node = self.phase, self.loads, self.ending, self.req_node
        phase.clear()
        loads.clear()
        ending.clear()
        req_node.clear()
        for rid, req in self.cache.requests.items():
            own = own_loads(req)
            if own:
                loads[rid] = own
            if req.done:
                if own:
                    ending.add(rid)
                    phase[rid] = "loading"
                continue
            phase[rid] = req.phase.value
            req_node[rid] = req.node.id
        self.sync_backup.clear()
        busy = self.cache.sync_backup
        if busy is not None:
            self.sync_backup[busy[0]] = list(busy[1])

    def _request_event(self, action: str, rid: int) -> None:
        """A request's phase through its events. Only a match starts a request: a later
        event of one that has ended must not bring it back (it did, as a request "running"
        for good: NReqs grew with them and hid what they locked). The runtime polls a load's
        LoadBackFinish after its request's RequestFinish (the request waited for the bytes,
        the ack comes later) while the load's slots are still PROTECTED: the spec's request
        is still loading then, so an ended request with a load to finish stays, "loading",
        until that LoadBackFinish (its pages keep loadReq = q: PendingLoadLocked guards the
        slots the load reads)."""
        phase, loads = self.phase, self.loads
        if action == "LoadBackStart":
            loads[rid] = loads.get(rid, 0) + 1
        elif action in _LOAD_ENDS and rid in loads:
            loads[rid] -= 1
            if not loads[rid]:
                del loads[rid]
                if rid in self.ending:
                    self.ending.discard(rid)
                    phase.pop(rid, None)
                    return
        ph = _PHASE[action]
        if ph is None:
            if loads.get(rid) and rid in phase:
                self.ending.add(rid)
                phase[rid] = "loading"
            else:
                phase.pop(rid, None)
        elif rid in self.ending:
            return
        elif action == "RequestMatch" or rid in phase:
            phase[rid] = ph

    # ------------------------------------------------------------ constants
    def constants(self) -> dict:
        if self.pure_bind:
            self._read_requests()
        pages = sum(x.n for x in self.cache.tree.nodes())
        return self._constants(pages, max(1, self._nreqs()), str(self.cache.cfg.write_policy))

    def _constants(self, pages: int, nreqs: int, policy: str) -> dict:
        """The constants of a tree of `pages` pages, `nreqs` request rows and `policy`, the
        cache's slots and layers."""
        c = self.cache
        return {"NNodes": pages + 1, "NSlots": c.host.capacity if c.host else 1, "NLayers": c.cfg.layers,
                "NReqs": nreqs, "Policies": frozenset({policy}),
                "BugEvictDuringLoad": False, "BugAbortLeak": False}

    def state_constants_key(self, t: dict) -> tuple:
        """The key of `state_constants(t)`: (NNodes, NSlots, NReqs, NLayers, the policy), what
        they depend on, ints and a str by construction (the bug flags are False always)."""
        c = self.cache
        return t["len"] + 1, c.host.capacity if c.host else 1, len(t["req"]), c.cfg.layers, t["policy"]

    def state_constants(self, t: dict) -> dict:
        """`constants()` of the moment t was mapped (by this map's own `state`), read off t:
        NNodes is its pages plus the spare node, NReqs its rows of `req` (its requests, one
        row per prefetch slot, or the one idle row), no second walk of the tree and the
        request table."""
        return self._constants(t["len"], len(t["req"]), t["policy"])

    def _prefetch_ops(self):
        """(op, orphan) for each prefetch holding host slots: the cache's live prefetches
        and orphans, and any op its worker still runs that the cache no longer tracks (what
        a slot's writer really is: a cache that dropped an op the worker is still writing,
        its slots freed early, would otherwise hide it; mapped as an orphan)."""
        c = self.cache
        orphans = set(map(id, c._orphans))
        ops = sorted(c._prefetching, key=lambda op: (op.rid, op.slots))
        out = [(op, id(op) in orphans) for op in ops]
        w = c.prefetcher
        if w is not None and w.acks:
            tracked = orphans | set(map(id, ops))
            out.extend((op, True) for op in list(w.acks) if id(op) not in tracked and not op.done.is_set())
        return out

    def _nreqs(self) -> int:
        return len(self.phase) + sum(len(op.slots) for op, _ in self._prefetch_ops())

    # ------------------------------------------------------------ state
    def state(self) -> dict:
        if self.pure_bind:
            self._read_requests()
        c = self.cache
        if c.host:
            # the slot states as bytes: indexing them is far cheaper than a numpy array's
            raw = c.host.state.tobytes()
            slot = byte_names(raw, _NAMES)
            # an IDLE slot missing from the free list is held by nobody yet never reusable
            # (hidden retention): the spec's "idle" means free, so it maps to "reserved"
            # (only IDLE's byte is named "idle": the bytes count them)
            free = c.host.free_set()
            if len(free) != raw.count(_IDLE):
                slot = tuple("reserved" if name == "idle" and h not in free else name
                             for h, name in enumerate(slot))
        else:
            slot = ("idle",)
        rids = sorted(self.phase)
        qidx = {rid: i + 1 for i, rid in enumerate(rids)}
        # a node's pages share its node-level values: those are kept once per node (`runs`
        # gives each its page count) and spread over the pages when the functions are
        # built; host and backupOp are per page (`node_slots`); the walk in the tree's own
        # order, `Tree.nodes()`'s (a parent's pages come before its children's), in C where
        # it builds (loops.tree_nodes and loops.tree_pages)

        def load_req_of(x) -> int:
            rid = getattr(x.loading, "rid", None)
            return load_req(qidx.get(rid, 0), rid)
        # (last_page: each node's id -> its last page: the ids of the tree's nodes)
        runs, dev, stor, hits, loadreq, host, backup, parent, loading, last_page = \
            tree_pages(tree_nodes(c.tree.root), self.sync_backup, load_req_of, node_slots)
        n = len(host)
        # one spare node outside the tree (NNodes = len + 1): a locked prefix that left the
        # tree is then expressible (reqLen = len + 1) and NNodes >= 1 always holds
        host.append(0)
        backup.append(0)
        req, pfslot, pfabort, reqlen = [], [], [], []
        root = c.tree.root.id
        for rid in rids:
            req.append(self.phase[rid])
            pfslot.append(0)
            pfabort.append(False)
            reqlen.append(lock_len(self.req_node.get(rid), lambda nid: nid == root or nid in last_page, n))
        for op, orphan in self._prefetch_ops():
            if op.slots:
                anchored = _in_tree(c.tree, op.anchor)
                for h in op.slots:
                    req.append(prefetch_row(orphan, anchored, n, pfslot, pfabort, reqlen, h))
        if not req:
            req, pfslot, pfabort, reqlen = ["idle"], [0], [False], [0]
        nq = len(req)
        # (loadDone is 0 everywhere, and so are backupOp and loadReq but while a copy or a
        # load runs, hits on a cold tree, and stor and dev are FALSE on every page of a tree
        # with no storage or device copy: those share the two flat functions of n pages, the
        # process's (`_FLATS`); the lists hold ints only)
        zeros, falses = _flats(n)
        return {
            "policy": str(c.cfg.write_policy), "len": n,
            "dev": _spread(dev, runs, False, falses), "host": _fn0(host, zeros),
            "stor": _spread(stor, runs, False, falses),
            "hits": _spread(hits, runs, 0, zeros), "slot": slot, "backupOp": _zeros_or_fn0(backup, zeros),
            "loadReq": _spread(loadreq, runs, 0, zeros) if loading else zeros, "loadDone": zeros,
            "req": tuple(req), "reqLen": tuple(reqlen), "pfSlot": tuple(pfslot), "pfNode": (0,) * nq,
            "pfAbort": tuple(pfabort),
            "_parent": tuple(parent),
        }

    def reference_constants(self) -> dict:
        """The constants of `reference_state()`."""
        return self.constants()

    def reference_state(self) -> dict:
        """The mapped state derived from scratch (pages in DFS preorder)."""
        return self.state()

    def digest_view(self) -> dict:
        """The mapped state up to a renaming of host slots (slot numbers are rank-local
        addresses; which free slot a rank picks may depend on when its copies finished):
        per page whether it has a host copy or a backup in flight, the multiset of slot
        states, and the number of prefetch slots per request phase; and the tree itself:
        each page's parent page (`_shape`) and the identity of its tokens (`_pageKey`)."""
        from hicache.monitors.digest import page_ids
        s = self.reference_state()
        # which tokens a page holds is not rank-local (the ranks of a group cache the same
        # prefixes): without it, ranks caching different prefixes of one shape would agree
        keys = page_ids(self.cache.tree)
        if len(keys) != s["len"]:
            raise RuntimeError(f"digest view: {len(keys)} page ids for a mapped state of {s['len']} pages "
                               "(the tree changed between the two preorder walks)")
        out = {k: v for k, v in s.items() if k not in ("host", "backupOp", "slot", "pfSlot", "_parent")}
        out["host"] = tuple(v != 0 for _, v in sorted(s["host"].d.items()))
        out["backupOp"] = tuple(v != 0 for _, v in sorted(s["backupOp"].d.items()))
        out["slot"] = tuple(sorted(s["slot"]))
        out["pfSlot"] = tuple(v != 0 for v in s["pfSlot"])
        out["_shape"] = s["_parent"]
        out["_pageKey"] = keys
        return out

    # ------------------------------------------------------------ invariants over the tree
    @property
    def invariant_overrides(self) -> dict:
        return {"WriteThroughPrefix": write_through_prefix_tree, "SlotInOneOwner": slot_in_one_owner_linear}


def write_through_prefix_tree(C, s):
    """WriteThroughPrefix with the tree's parent page instead of n - 1 (the spec's chain)."""
    if s["policy"] not in C["WriteThrough"]:
        return None
    host = s["host"].d if s["len"] else {}
    parent = s["_parent"]
    # (one C pass, loops.parent_breach, over the state's own tuple and dict)
    got = parent_breach(parent if type(parent) in _SEQS else tuple(parent), host if type(host) is dict else dict(host))
    if got is not None:
        n, p = got
        text, loc = spec._T_inv_WriteThroughPrefix[0]
        return Failure("WriteThroughPrefix", 1, text + f"  [tree form: page {n}'s parent page {p}]", loc)
    return None


def slot_in_one_owner_linear(C, s):
    """SlotInOneOwner in one pass (the generated form is slots x nodes): counts each slot's
    tree, backup and fetch references, then applies the spec's CASE per slot in order.
    tests/monitors/test_monitor_runtime.py checks it against the generated check.

    The counting and the CASE are one C pass over the values where each is an exact int
    (`one_owner_breach`, maps/loops.py), else the C loops of the incremental form
    (`count_pages`, `slot_owner_breach`), which count by equality; the references to NoSlot
    (0) are not counted, as no slot 0 is checked."""
    n_nodes = C["NNodes"]
    host, backup, slot, pf = s["host"], s["backupOp"], s["slot"], s["pfSlot"]
    hd = host.d if type(host) is Fcn else dict(enumerate(host, 1))
    bd = backup.d if type(backup) is Fcn else dict(enumerate(backup, 1))
    tree_vals = _values_below(host, hd, min(s["len"], n_nodes))
    backup_vals = _values_below(backup, bd, n_nodes)
    breach = one_owner_breach(slot, tree_vals, backup_vals, pf) if type(slot) in _SEQS and type(pf) in _SEQS \
        else NotImplemented
    if breach is NotImplemented:
        tree: dict = {}
        other: dict = {}
        count_pages(tree, tree_vals, 1, None, 0)
        count_pages(other, backup_vals, 1, None, 0)
        count_pages(other, pf, 1, None, 0)
        breach = slot_owner_breach(slot, range(1, len(slot) + 1), tree, other, {})
    if breach is not None:
        text, loc = spec._T_inv_SlotInOneOwner[0]
        return Failure("SlotInOneOwner", 1, text, loc)
    return None


def _values_below(f, d: dict, k: int) -> list:
    """The values of d (f's dict) at the keys 0..k-1, in some order: what count_pages
    counts, which no order changes. d's values alone where f is a function whose keys are
    exactly 0..len(d)-1 (KK_DENSE0) and those are 0..k-1, or 0..k with an int 0 (NoSlot,
    which count_pages does not count) at k: the spare page `state` maps (len + 1 =
    NNodes); otherwise read key by key (a KeyError where one is missing)."""
    if type(f) is Fcn and f.kk is not None and f.kk & KK_DENSE0 and type(k) is int and k >= 0:
        n = len(d)
        if n == k:
            return list(d.values())
        if n == k + 1:
            v = d[k]
            if type(v) is int and v == 0:
                return list(d.values())
    return list(map(d.__getitem__, range(k)))


def _in_tree(tree, node) -> bool:
    while node is not None and node is not tree.root:
        node = node.parent
    return node is tree.root


def _zeros_or_fn0(values: list, zeros):
    """_fn0(values), or `zeros` (that function for a list of as many 0s) when every value is
    0. The lists `state` passes hold ints only (spec slots, request slots, ENDED_REQ: never a
    boolean, which `count(0)` would take for 0 where TLA+ tells FALSE from it)."""
    return zeros if values.count(0) == len(values) else _fn0(values, zeros)


def _spread(values: list, runs: list, spare, flat):
    """_fn0 of the n pages' values and one more page's, `spare`: values[i] is node i's,
    held by its runs[i] pages (sum(runs) = n); `flat`, the function with `spare` on every
    one of those pages, when every node's value is `spare` (a tree with no storage copy:
    stor). `values` holds one type, spare's (no 1 beside a TRUE, which the count would take
    for equal). Built over a copy of flat's dict, the same pages in the same order."""
    if values.count(spare) == len(values) and (not values or type(values[0]) is type(spare)):
        return flat
    return Fcn(spread(values, runs, spare, flat.d), KK_INT | KK_DENSE0)


def _fn0(values: list, flat=None):
    """A function over 0..len-1 (not a sequence: its domain starts at 0), its key kinds
    given (the integers 0..len-1: what a domain test would otherwise find by looking at each
    key, `rt.domain_is`); `flat`, a function over the same pages, whose dict's copy it is
    built over where it has as many."""
    return Fcn(enumerated(values, None if flat is None else flat.d), KK_INT | KK_DENSE0) if values else mk_fcn({})


def _bind_table(mod) -> dict:
    """What each action is to the native binder (`mod.binder`): action -> (bits, the request
    phase after it, its compound step), read off the tables and the binders `bind` uses;
    every action any of them names is in it (any other is bound as `_bind_any` binds an
    action it does not name, its step asked of `compound_step`)."""
    binders = HostTierMap._binders
    names = {str(a) for a in HostTierAction} | set(_PHASE) | _MOVES_LOCK | _LOAD_ENDS | set(binders)
    table = {}
    for name in sorted(names):
        bits = 0
        for flag, holds in ((mod.BIND_LAYER, name == "LoadBackLayer"),
                            (mod.BIND_LOCK, binders.get(name) is HostTierMap._bind_lock),
                            (mod.BIND_END, binders.get(name) is HostTierMap._bind_end),
                            (mod.BIND_PHASE, name in _PHASE), (mod.BIND_MOVES, name in _MOVES_LOCK),
                            (mod.BIND_MATCH, name == "RequestMatch"), (mod.BIND_LOAD_START, name == "LoadBackStart"),
                            (mod.BIND_LOAD_END, name in _LOAD_ENDS),
                            (mod.BIND_BACKUP_START, name == "BackupStart"),
                            (mod.BIND_BACKUP_FINISH, name == "BackupFinish")):
            if holds:
                bits |= flag
        table[name] = (bits, _PHASE.get(name), _STEPS.get(name))
    return table


_BINDING: list = []        # [(the native module, its table)] once asked; [None] without it


def _native_binder(m: HostTierMap):
    """The native binder over m's bookkeeping, or None (no native module)."""
    if not _BINDING:
        mod = native.module()
        _BINDING.append(None if mod is None else (mod, _bind_table(mod)))
    got = _BINDING[0]
    if got is None:
        return None
    mod, table = got
    return mod.binder(m.phase, m.loads, m.ending, m.req_node, m.sync_backup, table, compound_step)
