"""Incremental refinement map: HiCache -> spec/HostTier, maintained per event.

`HostTierMap` (host_tier.py) re-derives the whole mapped state from the runtime at every
event: O(pages) per event, which made strict mode cost 14-30x a metadata-only replay. This
map keeps the mapped state and updates only what an event changed, then reports, per spec
domain, the elements whose values changed ("dirty"); the monitor evaluates each invariant's
element-local conjuncts (the generated `inc_<Inv>`, see codegen.local_conjunct) over those
elements only. The abstraction is the reference map's, with one renaming:

  * spec node n = one runtime page in the tree, numbered by *position*: positions 0..len-1
    hold the tree's pages in no particular order (a page that leaves takes the last page's
    position, so in-tree pages stay a prefix and InTree(n) == n < len keeps its meaning),
    position len is the spare node outside the tree (NNodes = len + 1). The reference map
    numbers pages in DFS preorder; the two states are equal up to this renaming of nodes,
    which tests/monitors/test_host_tier_incremental.py checks after every event of random
    workloads. The chain order the spec's actions rely on is not represented (the tree
    replaces it): WriteThroughPrefix is checked in its tree form on the dirty pages and
    their children, as the reference map does over the whole tree.
  * spec request q = a stable slot given to a live request at its first event (freed when
    it leaves), then one pseudo-request per in-flight prefetch slot (as the reference map).

What the map observes, so that nothing changes unseen:
  * tree nodes: the tree's nodes are switched to a subclass whose `__setattr__` journals the
    node when a mapped field is written (parent, n, device, host, stored, loading,
    hit_count); the runtime's own Node class and code are untouched.
  * host slot states: the state array is compared with the last one seen (one vectorized
    comparison per event).
  * requests, write_back copies in flight and prefetch ops: from the events and the cache's
    prefetch table, as the reference map reads them.
Invariant between events: `self.s` equals the reference map's state up to the renaming.
"""
from __future__ import annotations

import weakref

from hicache.monitors.generated import host_tier as spec
from hicache.monitors.maps import host_tier_guards, loops
from hicache.monitors.maps.host_tier import (_NAMES, _PHASE, HostTierMap, _in_tree, load_req,
                                             node_slots, prefetch_row)
from hicache.monitors.rt import Failure
from hicache.monitors.runtime import MISSING as _MISSING, snapshot
from hicache.runtime.allocator import HostSlots, HostSlotState
from hicache.runtime.radix import Node
from hicache.tla.values import Fcn

#: node fields the mapped state depends on (writes to others are not journaled)
WATCHED = frozenset({"parent", "n", "device", "host", "stored", "loading", "hit_count"})

#: per-position variables and the value of a position outside the tree
NODE_VARS = ("dev", "host", "stor", "hits", "backupOp", "loadReq", "loadDone")
#: per-request variables (sequences over Reqs), in _requests' order
REQ_VARS = ("req", "reqLen", "pfSlot", "pfNode", "pfAbort")
#: the variables of a node's node-level values (dev, stor, hits, loadReq), in remap_node's order
_NODE_LEVEL = ("dev", "stor", "hits", "loadReq")
SPARE = {"dev": False, "host": 0, "stor": False, "hits": 0, "backupOp": 0, "loadReq": 0, "loadDone": 0}
#: the per-position variables whose values can differ between positions: loadDone is 0 at
#: every position (as in the reference map: the runtime tracks no per-layer progress; only
#: __init__ and _grow write it, both SPARE), so _remove, moving pages and making positions
#: spare, would never change it and skips it
PAGE_VARS = tuple(v for v in NODE_VARS if v != "loadDone")

#: events after which the request-side variables are rebuilt
_REQ_ACTIONS = frozenset({"RequestMatch", "RequestFinish", "RequestAbort", "PrefetchStart", "PrefetchFinish",
                          "LoadBackStart", "LoadBackFinish", "LoadBackFail", "DeviceInsert"})

#: the acks that end a load-back (whose layers the map stops following)
_LOAD_ACKS = frozenset({"LoadBackFinish", "LoadBackFail"})
#: the events of a load-back's course (bind follows its layers): one test at every event
_LOAD_EVENTS = _LOAD_ACKS | {"LoadBackLayer", "LoadBackStart"}

#: events whose node's host-side values (its backupOp pages) are re-mapped at the next sync
_BACKUP_ACTIONS = frozenset({"BackupStart", "BackupFinish"})

_IDLE = int(HostSlotState.IDLE)
# the loops over positions and slots (native when built: maps/loops.py)
_remove_pages, _remap_journaled = loops.remove_pages, loops.remap_journaled
_host_sync = loops.host_sync
_extend_positions = loops.extend_positions
_EMPTY: frozenset = frozenset()
_IDLE_BYTE = bytes([_IDLE])
_HOST_FREE = HostSlots.free


def _tracked_class(journals: dict) -> type:
    """A Node subclass (same slots) whose writes of a WATCHED field add the node to every
    journal in `journals[field]` (the maps of the tree that read that field).

    `loops.tracked_class` makes it: in C, the class's own attribute-setting slot journals the
    write after storing it (a `__setattr__` in Python); every field stays the base class's
    slot, so the runtime's reads of them (~8,500 in the bench's replay, ~3,500 of them
    `parent`) are the interpreter's specialized slot reads, and each of its writes (~3,700,
    ~900 of them journaled) takes the generic store and a look-up of the field's journals.
    """
    return loops.tracked_class(Node, journals, "TrackedNode")


def journal_tree(tree, journal: set, owner, fields=WATCHED) -> list:
    """Make every node of `tree`, present and future, report writes of `fields` (a subset
    of WATCHED) to `journal` (a second map of the same tree shares the tracked class and
    adds its journal) until `owner` is collected; returns the lists it is in (stop_journal)."""
    journals = getattr(tree.node_cls, "_hicache_journals", None)
    if journals is None:
        journals = {name: [] for name in WATCHED}
        cls = _tracked_class(journals)
        tree.node_cls = cls
        for x in [tree.root, *tree.nodes()]:
            x.__class__ = cls
    lists = [journals[name] for name in fields]
    for js in lists:
        js.append(journal)
    weakref.finalize(owner, _drop_journal, lists, journal)
    return lists


def stop_journal(lists: list, journal: set) -> None:
    """`journal` is given nothing more (its map's monitor tripped: nothing syncs again) and
    forgets what it had; `lists` is what `journal_tree` returned for it."""
    _drop_journal(lists, journal)
    journal.clear()


def _load_key(fields: dict) -> tuple:
    """A load-back's identity in its events (LoadBackLayer, LoadBackFinish, LoadBackFail):
    its request and its nodes (a node is in one load at a time)."""
    return fields.get("rid"), tuple(fields.get("nodes") or ())


def _drop_journal(lists: list, journal: set) -> None:
    for journals in lists:
        for i, j in enumerate(journals):
            if j is journal:
                del journals[i]
                break


class IncrementalHostTierMap(HostTierMap):
    incremental = True
    #: the action guards in tree form (evictions, backups, load-backs, storage writes), on the
    #: state before an event (the monitor calls it before `sync`): what a compound step's
    #: invariants cannot see afterwards
    guard = host_tier_guards.check
    #: ... and the steps' frames in tree form, on the state after the event (the monitor
    #: calls it after `sync`, for these actions only): no other node changed, and the
    #: node actions' own nodes changed as they write them
    effect = host_tier_guards.effect
    effect_actions = frozenset(host_tier_guards.FRAMES) | frozenset(host_tier_guards.WRITES)
    #: `live()` is `s`, one dict for the map's life (assigned once, in __init__, and written
    #: in place): the monitor takes it once
    live_in_place = True

    def __init__(self, cache):
        super().__init__(cache)
        self.journal: set = set()
        tree = cache.tree
        self._journal_lists = journal_tree(tree, self.journal, self)
        self.L = 0                                   # pages in the tree
        self.keys: list = []                         # position -> (node, i), positions < L
        self.npos: dict = {}                         # node -> [positions of its pages]
        # spec nodes = positions 0..cap-1, fixed while the tree fits (so the constants, and
        # the monitor's constants binding, do not change with every insert): cap covers
        # every page that can hold a copy, plus spare positions outside the tree
        host_cap = cache.host.capacity if cache.host is not None else 0
        self.cap = cache.cfg.device_pages + host_cap + 1
        self.funcs = {v: dict.fromkeys(range(self.cap), SPARE[v]) for v in NODE_VARS}
        # spec slot -> pages with host = slot, and with backupOp = slot: read as .get(h, 0) (a
        # slot no page holds counts 0, present or not), laid out by slot (entry h holds slot h,
        # every spec slot 0..host_cap from the start), so that each update of a count, the
        # native writes' (loops: add_ref), is read and written in its entry, not looked up
        self.tree_refs: dict[int, int] = dict.fromkeys(range(host_cap + 1), 0)
        self.backup_refs: dict[int, int] = dict.fromkeys(range(host_cap + 1), 0)
        self.pf_refs: dict[int, int] = {}            # spec slot -> prefetch pseudo-requests
        # _remove's columns, one per variable of PAGE_VARS: (var, its dict, its spare value,
        # the slot reference counts its values hold, None for a variable holding no slot)
        self.page_cols = tuple((var, self.funcs[var], SPARE[var],
                                self.tree_refs if var == "host" else self.backup_refs if var == "backupOp" else None)
                               for var in PAGE_VARS)
        # runtime slot -> node holding it in x.host, None where none has (read as .get(h): None
        # present or absent alike), laid out by slot (entry h holds slot h, every runtime slot
        # from the start), so that the native reads and writes of a holder (loops: remap_node's,
        # slot_changes', holders_outside's) are made in its entry, not looked up
        self.slot_page: dict[int, Node | None] = dict.fromkeys(range(host_cap), None)
        self.loading_nodes: dict[int, set] = {}      # rid -> nodes whose load-back it is
        self.qtab: list = []                         # request slot q-1 -> rid or None
        self.qslot: dict[int, int] = {}              # rid -> q
        self.requeue: set = set()                    # nodes to re-map for non-field reasons
        self._bind_step = self._request_binder(loops.request_binder)     # (bind's request step)
        if type(self).bind is _OWN_BIND:
            # (`bind` as a callable of its own, read off the instance before the class, as
            # HostTierMap's native binder is: the monitor calls it at every event, and as a
            # method each call was a frame entered from C around one set test and one call;
            # the same tests and calls, loops.load_bind; python_bind drops it)
            self.bind = loops.load_bind(weakref.ref(self), _LOAD_EVENTS, _OWN_BIND)
        self.by_id: dict = {}                        # node id -> mapped node
        self.nval: dict = {}                         # node -> values last written for it
        # the tree's shape as of the last sync (mapped nodes): what the guards read
        # as the state before an event, whose own writes are not synced yet
        self.up: dict = {}                           # mapped node -> its parent
        self.kids: dict = {}                         # node -> its mapped children
        self.slot_changed: set = set()               # nodes holding a slot whose state changed
        # what loops.remap_node re-maps a node with (containers never replaced: built once; the
        # map's own callbacks unbound, the map given with each sync's containers: none holds it;
        # node_slots, loops' native one where it builds, is computed inside the native re-mapping,
        # with no call nor lists; host_write_in_flight loops' too, the runtime's own function's
        # reads made in C)
        self._remap_ctx = (self.npos, self.by_id, self.up, self.kids, self.nval, self.slot_changed,
                           self.sync_backup, self.slot_page,
                           tuple((var, self.funcs[var]) for var in _NODE_LEVEL),
                           (("host", self.funcs["host"], self.tree_refs),
                            ("backupOp", self.funcs["backupOp"], self.backup_refs)),
                           loops.host_write_in_flight, node_slots, type(self)._resize, type(self)._loading_req)
        self.req_dirty = True                        # request-side variables need rebuilding
        self.phase_before = None                     # the last event's request's phase before it (None: not live)
        self.lock_before = None                      # ... the node id its lock was on before it (None: none)
        self.fetching: frozenset = _EMPTY            # rids with a fetch of their own in flight (not orphaned)
        # the layers of each load-back in flight its LoadBackLayer events reported: (rid,
        # node ids) -> layer indices (loadDone in tree form: the layers that landed, each
        # counted once); the last load ack's, taken by bind
        self._layers: dict[tuple, set] = {}
        self.layers_landed: set | frozenset = _EMPTY
        # the load-backs in flight, (rid, node ids), from LoadBackStart to its ack: a layer
        # of any other is LoadBackLayer's guard broken (loadReq[n] # NoReq), found on the
        # loader's thread and kept here as `breach` (action, fields, failure), which the
        # monitor reports on the scheduler's, at its next step (Monitor._report_breach)
        self._loads: set[tuple] = set()
        self.breach: tuple | None = None
        host = cache.host
        # the slots' states at the last sync (a copy of the state array's bytes, compared
        # whole at each sync: a write that bypasses the allocator's API is seen as well)
        self.slot_seen = bytearray(host.state.tobytes()) if host is not None else bytearray()
        # what sync reads of the host slots at every event, taken once (the cache's allocator
        # and its state array are its own for its life, written in place): a view of the state
        # array (its buffer taken here, not at each comparison) and what holds the free count
        # (`host.free` is HostSlots' property over its free list's plain count: the list read
        # directly, without the property's call)
        self._states = memoryview(host.state) if host is not None else None
        self._free_of = host._pages if type(host) is HostSlots and type(host).free is _HOST_FREE else host
        self.slot_names = [_NAMES[x] for x in self.slot_seen] if host is not None else ["idle"]
        self.adjusted = False                        # idle slots shown "reserved" (hidden retention)
        self.free_seen = host.free if host is not None else 0   # the free count at the last sync
        self.delta: list = []
        self.left: list = []                         # the nodes unmapped by the last sync (left the tree)
        # what the last sync changed, node by node (the steps' frames, host_tier_guards.effect):
        # each re-mapped node whose values changed -> its values before (None: newly mapped),
        # and the runtime slots whose state changed. A dirty page is not a changed one: the
        # checks' dirty sets over-approximate (a slot's last holder is re-checked whether or
        # not it still holds it), a frame must not
        self.changed: dict = {}
        self.slots_changed: list = []
        # the actions whose effect check (`effect`) can find something in what the last sync
        # changed (the monitor calls it for these alone): every one of effect_actions when a
        # node's values or a slot's state changed or a node left (what a frame judges), else
        # only those with writes of their own to check (host_tier_guards.WRITES); the others'
        # check would return None
        self._effect_changed = frozenset(self.effect_actions)
        self._effect_unchanged = self._effect_changed & frozenset(host_tier_guards.WRITES)
        self.effect_due = self._effect_changed
        self.dirty_nodes: set = set()
        self.dirty_slots: set = set()
        self.dirty_reqs: set = set()
        # the dict each sync returns, the one dict, holding the dirty sets above (each the map's
        # one set for its life, emptied in place by each sync) and the dirty requests or None
        # (every request: len changed)
        self.dirty = {"Nodes": self.dirty_nodes, "HSlots": self.dirty_slots, "Reqs": self.dirty_reqs}
        # whether `domains` under this map's own constants binding returns `dirty` itself
        # (the monitor then skips the call; see `domains`): when the last sync left len as it was
        self.own_domains = True
        self.s = {"policy": str(cache.cfg.write_policy), "len": 0,
                  **{v: Fcn(self.funcs[v]) for v in NODE_VARS}}
        self.s["slot"] = tuple(self.slot_names)
        self._requests()
        # constants_key()'s value, kept by the writes of cap and of the rows of `req` (_grow,
        # sync): the monitor reads it, not the method, at every event
        self.synced_key = self.constants_key()
        # what sync reads that the map never rebinds (loops.host_sync's ctx), then what
        # `_map_nodes` and `_slots` read that it never rebinds and the two methods, which the
        # native sync does itself while the map's class has these ones
        self._sync_ctx = (self.dirty, self.dirty_nodes, self.dirty_slots, self.dirty_reqs, cache, self._states,
                          self._free_of, self.slot_seen, self.journal, self.s, self.qtab, self.phase, self.req_node,
                          self.by_id, tree.root, cache._prefetching, cache._orphans, self._effect_unchanged, _EMPTY,
                          self._effect_changed, self._remap_ctx, self.keys, self.page_cols, self.loading_nodes,
                          self.slot_changed, self.slot_names, self.slot_page, _NAMES, _IDLE_BYTE, _OWN_MAP_NODES,
                          _OWN_SLOTS)
        if type(self).sync is _OWN_SYNC:
            # (`sync` as a callable of its own, read off the instance before the class, as
            # `bind` is: the monitor calls it at every event, and as a method each call was a
            # frame entered from C around one call; loops.host_sync_step calls the class's
            # sync instead while it is another, a profiler's wrapper)
            self.sync = loops.host_sync_step(weakref.ref(self), self._sync_ctx, _OWN_SYNC)
        if type(self).guard is _OWN_GUARD:
            # (the guard's dispatch as a callable of its own, as `sync` is: the monitor, which
            # reads `guard` once, calls it before every event's sync, and most request events'
            # guards pass on the phase before the event alone: loops.guard_step decides those
            # without a frame)
            self.guard = loops.guard_step(weakref.ref(self), host_tier_guards.guard_tables(self), _OWN_GUARD)
        if type(self).effect is _OWN_EFFECT:
            # (... and the effect check's, after each node event's sync: loops.effect_step)
            self.effect = loops.effect_step(weakref.ref(self), host_tier_guards.effect_tables(self), _OWN_EFFECT)
        self.journal.update(tree.nodes())
        self.sync()
        self.delta = []

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        if action in _LOAD_EVENTS:
            if action == "LoadBackLayer":
                # (emitted on the loader's thread, serialized with every other event by the bus:
                # recorded only, no step: a sync here would read the tree while the scheduler
                # writes it; the ack's guard reads the layers, see _layers)
                key = _load_key(fields)
                if key in self._loads:
                    self._layers.setdefault(key, set()).add(fields.get("layer"))
                elif self.breach is None:
                    self.breach = ("LoadBackLayer", dict(fields), host_tier_guards.layer_of_no_load(fields))
                return None
            if action in _LOAD_ACKS:
                # the layers that landed for the load this ack ends (its guard's loadDone),
                # taken here, where every event passes, not in the guard, which sample mode skips
                key = _load_key(fields)
                self.layers_landed = self._layers.pop(key, _EMPTY)
                self._loads.discard(key)
            else:
                self._loads.add(_load_key(fields))
        # the request's phase and lock before the event, the map's binder, the request's slot q
        # and what the next sync re-maps (loops.request_binder: one C call where it builds)
        return self._bind_step(self, action, fields)

    def python_bind(self) -> None:
        """Bind by the Python rules from now on (HostTierMap's), the request step's too."""
        super().python_bind()
        self._bind_step = self._request_binder(loops.py_request_binder)

    def _request_binder(self, make):
        """The request step of `bind` over this map's bookkeeping (`make`: loops.request_binder
        or its Python twin), binding by the native binder where there is one, else by the
        Python rules."""
        return make(self._nbind if self._nbind is not None else super().bind, self.phase, self.ending, self.req_node,
                    self.qslot, self.qtab, _PHASE, _REQ_ACTIONS, _BACKUP_ACTIONS)

    # ------------------------------------------------------------ writes (delta-recorded)
    def _set_scalar(self, var: str, v) -> None:
        old = self.s.get(var, _MISSING)
        if old is _MISSING or old != v:
            self.delta.extend((var, None, old))
            self.s[var] = v

    # ------------------------------------------------------------ positions
    def _extend(self, x, pos: list, n: int) -> None:
        """Node x's pages len(pos)..n-1 take the first spare positions, L onwards (the
        domain grows, doubling, only if the tree outgrows it); each is dirty."""
        self.L = _extend_positions(x, self.keys, pos, n, self.L, self.dirty_nodes)
        while self.L >= self.cap:
            self._grow(2 * self.cap)

    def _grow(self, cap: int) -> None:
        delta = self.delta
        for var, d in self.funcs.items():
            v = SPARE[var]
            for q in range(self.cap, cap):
                d[q] = v
                delta.extend((var, q, _MISSING))
        self.dirty_nodes.update(range(self.cap, cap))     # new elements: checked once
        self.cap = cap
        self.synced_key = self.constants_key()

    def _remove(self, holes) -> None:
        """The pages at positions `holes` leave: taken in decreasing order, each hole is
        filled by the page at the last position, and the last position becomes a spare one
        (so in-tree pages stay a prefix). Computed first as where each final position's page
        came from, then written one variable at a time (delta-recorded: one entry per
        position, its value before this call), each of PAGE_VARS (loadDone is 0 everywhere).

        A page moved into a hole is a renaming, not made dirty for the move: every
        element-local conjunct of HostTier reads a page's own values, InTree (TRUE at both
        positions, which are in the tree) and slot[host[n]] (a slot change dirties its pages
        itself), so the page's predicates have the values they had where it was, checked
        there; unless it was dirty in this sync (new or changed since the last check), which
        moves with it. Every position that became a spare one is dirty (InTree changed with
        len). The slot references of the pages that left are released; a moved page keeps
        its own. (loops.remove_pages: the vacate, the writes of each of PAGE_VARS, in
        page_cols' order, and the renumbering, in one call.)"""
        if not holes:
            return
        # (one native call over every variable, loops.remove_pages: per removal the
        # per-variable calls' dispatch cost several times the few pages' writes)
        self.L = _remove_pages(self.page_cols, holes, self.L, self.keys, self.npos, self.delta, self.dirty_nodes,
                               self.dirty_slots)

    # ------------------------------------------------------------ node mapping
    # (a node's re-mapping is loops.remap_node, native, over this map's containers,
    # `_remap_ctx`, and a sync's, `_map_nodes`; these two are its rare steps' callbacks)
    def _resize(self, x, pos: list, n: int) -> None:
        """Node x's positions `pos` made n: its last pages leave (a split's parent node took
        its first ones: x keeps its own last ones, renamed) or new ones are added."""
        if len(pos) > n:
            self._remove(pos[n:])
            del pos[n:]
        if len(pos) < n:
            self._extend(x, pos, n)

    def _loading_req(self, x) -> int:
        """loadReq of the pages of node x, which is loading (x.loading is not None), whatever
        its device state (as the reference map); a live request's node is kept in
        loading_nodes (only a live request's slot can change: it frees it when it leaves)."""
        rid = getattr(x.loading, "rid", None)
        q = self.qslot.get(rid, 0)
        if q:
            self.loading_nodes.setdefault(rid, set()).add(x)
        return load_req(q, rid)

    def changed_vars(self, x, old) -> list[str]:
        """The spec variables whose values at node x's pages the last sync changed (old: x's
        values before it, as `changed` keeps them; None: x entered the tree, `len`)."""
        if old is None:
            return ["len"]
        (node_old, slots_old), (node_new, slots_new) = old, self.nval[x]
        out = [var for var, a, b in zip(_NODE_LEVEL, node_old, node_new) if a != b or type(a) is not type(b)]
        n = len(self.npos.get(x, ()))
        # a split leaves x its last pages (the new parent node takes the first): its pages'
        # slots before are the last n of what it held, a renaming, not a change
        hs, pending, backing = slots_old
        n0 = len(hs) if hs is not None else len(pending) if pending is not None else n
        h0, b0 = node_slots(hs, pending, n0, backing)     # (n > n0, a node that grew: unequal)
        h1, b1 = node_slots(*slots_new[:2], n, slots_new[2])
        return out + [var for var, a, b in (("host", h0[-n:] if n else [], h1), ("backupOp", b0[-n:] if n else [], b1))
                      if a != b]

    def holds(self, x, h: int) -> bool:
        """Whether node x holds runtime slot h: its host copy's, or a blocking copy's in flight."""
        pending = self.sync_backup.get(x.id)
        return (x.host is not None and h in x.host) or (pending is not None and h in pending)

    # ------------------------------------------------------------ slots and requests
    def _slots(self, hs: list, free: int) -> None:
        """The slot states after a sync found `hs`, the runtime slots whose state changed
        (`slot_seen` then holds the new states), or the free count `free` moved, or idle
        slots were shown "reserved" at the last one (`sync` calls it only then: most events
        change no slot)."""
        self.free_seen, raw = free, self.slot_seen
        if hs:
            self.slots_changed = hs
            self.effect_due = self._effect_changed
            # each changed slot's name and spec slot (dirty), and the nodes holding one:
            # re-mapped, their pages re-checked
            held = loops.slot_changes(hs, raw, self.slot_names, _NAMES, self.slot_page, self.dirty_slots)
            if held:
                self.requeue |= held
                self.slot_changed |= held
        # hidden retention: an IDLE slot missing from the free list maps to "reserved"
        # (the reference map's rule); checked by count, the set only when counts differ
        if raw.count(_IDLE_BYTE) == free and not self.adjusted:
            if hs:
                # (no slot shown "reserved" before nor now: every name is its state's, _NAMES is
                # one-to-one, so each slot of hs changed name and `slot` differs: _set_scalar's
                # write without its comparison of the whole tuple)
                s = self.s
                self.delta.extend(("slot", None, s["slot"]))
                s["slot"] = tuple(self.slot_names)
            return
        self._hidden_retention(raw, hs)

    def _hidden_retention(self, raw: bytearray, hs: list) -> None:
        """The slot names after `_slots` when idle slots are, or were at the last sync, missing
        from the free list (shown "reserved"): every slot's name re-derived from the free set."""
        free = self.cache.host.free_set()
        self.adjusted = raw.count(_IDLE_BYTE) != len(free)
        for h in range(len(self.slot_names)):
            name = _NAMES[raw[h]]
            if name == "idle" and self.adjusted and h not in free:
                name = "reserved"
            if self.slot_names[h] != name:
                self.slot_names[h] = name
                self.dirty_slots.add(h + 1)
        if hs or self.adjusted or self.dirty_slots:
            self._set_scalar("slot", tuple(self.slot_names))

    def _requests(self) -> None:
        """The request-side variables rebuilt from the live requests' phases and locks and the
        prefetch rows (`sync` takes the common step itself, `loops.request_step`, and this where
        that does not apply: a prefetch in flight or one at the last rebuild, a locked node
        out of the tree, no rows yet)."""
        s = self.s
        phase, get, by_id, root, out = self.phase, self.req_node.get, self.by_id, self.cache.tree.root.id, self.L + 1
        req, locks = [], []
        for rid in self.qtab:
            if rid is None:
                req.append("idle")
                locks.append(0)
                continue
            req.append(phase.get(rid, "idle"))
            # reqLen (`lock_len`): 0 while its locked node is in the tree (mapped), len + 1
            # once it left
            nid = get(rid)
            locks.append(0 if nid is None or nid == root or nid in by_id else out)
        nlive = len(req)
        pfslot, pfabort, reqlen = [0] * nlive, [False] * nlive, locks
        c = self.cache
        fetching = set()
        for op, orphan in self._prefetch_ops():
            if not orphan:
                fetching.add(op.rid)
            anchored = _in_tree(c.tree, op.anchor)
            for h in op.slots:
                req.append(prefetch_row(orphan, anchored, self.L, pfslot, pfabort, reqlen, h))
        self.fetching = frozenset(fetching)
        if not req:
            req, pfslot, pfabort, reqlen = ["idle"], [0], [False], [0]
        refs: dict[int, int] = {}
        for h in pfslot:
            if h:
                refs[h] = refs.get(h, 0) + 1
        if refs != self.pf_refs:
            self.dirty_slots.update(refs.keys() ^ self.pf_refs.keys())
            self.dirty_slots.update(h for h in refs if refs[h] != self.pf_refs.get(h))
            self.pf_refs = refs
        new = (tuple(req), tuple(reqlen), tuple(pfslot), (0,) * len(req), tuple(pfabort))
        for var, v in zip(REQ_VARS, new):
            old = s.get(var, ())
            if old != v:
                # the requests whose row changed (and every new one) are the dirty requests
                self.dirty_reqs.update(q + 1 for q in range(len(v)) if q >= len(old) or old[q] != v[q])
                self._set_scalar(var, v)

    def _zero_rows(self, nq: int) -> None:
        """The request variables other than `req` when its nq rows are all live requests'
        (the common step, whose rows' number changed): all 0/FALSE."""
        for var, v in zip(REQ_VARS[1:], ((0,) * nq, (0,) * nq, (0,) * nq, (False,) * nq)):
            self._set_scalar(var, v)

    # ------------------------------------------------------------ the step
    def sync(self) -> tuple[list, dict]:
        """Bring the mapped state up to date; returns (delta, dirty elements per domain).

        The delta holds variable, key, old value of every write in turn (flat, three items a
        write; key None: a whole variable), so the states before this event can be rebuilt
        (`undo`). (loops.host_sync, native where it builds, over what the map never rebinds,
        `_sync_ctx`; the map's own instance attribute `sync`, installed while the class's sync
        is this one, calls it without this frame: the monitor syncs at every event.)"""
        return _host_sync(self, self._sync_ctx)

    def _map_nodes(self) -> None:
        """Re-map every journaled or requeued node."""
        todo = self.journal | self.requeue
        self.journal.clear()
        self.requeue = set()
        try:
            # (a node that left the tree is unmapped with what hangs below it in the same call,
            # loops.unmap_subtree: its positions leave the prefix, its bookkeeping goes)
            _remap_journaled(todo, self.cache.tree.root, self._remap_ctx,
                             (self.delta, self.changed, self.dirty_nodes, self.dirty_slots, self),
                             (self.keys, self.page_cols, self.loading_nodes, self.left))
        finally:
            # (also when a re-map raised part way: what it wrote to changed or left is cleared
            # by the next sync only when effect_due says the last one changed something)
            self.slot_changed.clear()
            if self.changed or self.left:
                self.effect_due = self._effect_changed

    # ------------------------------------------------------------ states
    def stop(self) -> None:
        """Journal nothing more (the monitor tripped: nothing will sync again)."""
        stop_journal(self._journal_lists, self.journal)

    def live(self) -> dict:
        """The maintained state itself (functions wrap live dicts: read, never hash or keep)."""
        return self.s

    def state(self) -> dict:
        """A snapshot of the maintained state (safe to keep, hash and compare)."""
        return snapshot(self.s)

    def constants_key(self) -> tuple:
        """What `constants()` depends on that can change (the monitor caches by it; kept as
        `synced_key`, which it reads)."""
        return (self.cap, len(self.s["req"]))

    def constants(self) -> dict:
        c = self.cache
        return {"NNodes": self.cap, "NSlots": c.host.capacity if c.host else 1, "NLayers": c.cfg.layers,
                "NReqs": len(self.s["req"]), "Policies": frozenset({str(c.cfg.write_policy)}),
                "BugEvictDuringLoad": False, "BugAbortLeak": False}

    def domains(self, C: dict, dirty: dict) -> dict:
        """The domain elements each generated inc_ check iterates under binding C: the dirty
        ones in C's domains, and the dirty requests (all of them when len changed: None).

        The last sync's dirty positions are positions of this map, each < cap, and its
        dirty requests rows of the `req` it wrote, each <= len(req) (what
        tests/monitors/test_host_tier_incremental.py asserts after every event): so under a
        binding of domains at least that large, this map's own (`constants`), every one is
        in its domain and the sets the sync built are handed on as they are, not copied nor
        searched (the checks only read them, and keep none past the step, after which the
        next sync empties them in place and fills them again): the sync's
        own dict itself, unless every request is to be checked (each sync says which, as
        `own_domains`: the monitor then takes the dict without this call); under a smaller
        binding they are filtered."""
        reqs = dirty["Reqs"]
        if reqs is not None and self.cap <= C["NNodes"] and len(self.s["req"]) <= C["NReqs"]:
            # (the common step; an empty set is as empty as _EMPTY to the checks)
            return dirty
        n, nq, nodes = C["NNodes"], C["NReqs"], dirty["Nodes"]
        return {"Nodes": _EMPTY if not nodes else nodes if self.cap <= n else frozenset(p for p in nodes if p < n),
                "HSlots": dirty["HSlots"] or _EMPTY,
                "Reqs": C["Reqs"] if reqs is None else _EMPTY if not reqs else reqs if len(self.s["req"]) <= nq else
                frozenset(q for q in reqs if q <= nq)}

    def digest_view(self) -> dict:
        # rank digests compare the canonical (DFS preorder) numbering, not positions, which
        # depend on the order each rank's copies finished in
        return HostTierMap.digest_view(self)

    def reference_state(self) -> dict:
        return HostTierMap.state(self)

    def reference_constants(self) -> dict:
        return HostTierMap.constants(self)

    @property
    def incremental_overrides(self) -> dict:
        return {"WriteThroughPrefix": self.write_through_prefix_inc, "SlotInOneOwner": self.slot_in_one_owner_inc}

    # ------------------------------------------------------------ tree-form invariants
    def write_through_prefix_inc(self, C, s, D, V=None):
        """WriteThroughPrefix, tree form, over every page of each node with a dirty page and
        the first pages of its children (a superset of the dirty pages and their children:
        the only pages whose own or whose parent's host copy can have changed). A node's
        page i has page i-1 as its parent, its first page the last page of its parent node."""
        if s["policy"] not in C["WriteThrough"]:
            return None
        broke = loops.tree_prefix_breach(self.keys, D["Nodes"], self.L, self.npos, self.funcs["host"],
                                         self.cache.tree.root)
        return None if broke is None else _prefix_failure(*broke)

    def slot_in_one_owner_inc(self, C, s, D, V=None):
        """SlotInOneOwner over the dirty slots, from the maintained reference counts."""
        broke = loops.slot_owner_breach(s["slot"], D["HSlots"], self.tree_refs, self.backup_refs, self.pf_refs)
        if broke is None:
            return None
        h, st, t, f = broke
        text, loc = spec._T_inv_SlotInOneOwner[0]
        # the witness, as the tree form of WriteThroughPrefix names its pages
        return Failure("SlotInOneOwner", 1, text + f"  [h = {h} (runtime slot {h - 1}): slot[h] = \"{st}\" "
                                                   f"with t = {t} tree, f = {f} backup/fetch references]", loc)


#: the class's own bind, as defined above (a bind patched on the class later, a profiler's
#: wrapper, is not it: a map built then binds by the patched one, and load_bind, which calls
#: the class's bind whenever it is not this, follows a patch made after it was built)
_OWN_BIND = IncrementalHostTierMap.bind
_OWN_SYNC = IncrementalHostTierMap.sync
_OWN_GUARD = IncrementalHostTierMap.guard
_OWN_EFFECT = IncrementalHostTierMap.effect
_OWN_MAP_NODES = IncrementalHostTierMap._map_nodes
_OWN_SLOTS = IncrementalHostTierMap._slots


def _prefix_failure(p: int, q: int) -> Failure:
    text, loc = spec._T_inv_WriteThroughPrefix[0]
    return Failure("WriteThroughPrefix", 1, text + f"  [tree form: page {p}'s parent page {q}]", loc)
