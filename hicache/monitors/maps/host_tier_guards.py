"""HostTier's action guards in their tree form, checked on the state before the event.

The spec's actions move one page of a chain; the runtime moves whole nodes of a tree, so
its events are compound steps and the maps check the invariants after them. What no
invariant can see afterwards is a guard the event broke while leaving a legal-looking
state. `check` evaluates, on the incremental map's state before the event (the monitor
calls it before the map syncs; a request's phase before it, `phase_before`, is what the map's
bind saw), the guards of:

  DeviceEvict    DevEvictable and the choice of its disjuncts: a device copy dropped while
                 a live request's prefix still pins it (the node keeps its host copy, so
                 nothing leaves the tree), while a load-back fills it or a device->host
                 copy still reads it, under a node whose children keep theirs, or under
                 write_back with no other copy;
  HostEvict      HostEvictable: a host copy dropped while not SYNCED, under a child that
                 keeps one, or (host-only) while locked or not a leaf;
  BackupStart    a copy of a node with no device copy (its pages are freed: the copy reads
                 another owner's KV), of one already backed up or being written, before
                 the write policy asks for it (BackupDue: write_through on the first hit,
                 write_through_selective on the second, write_back at eviction only), out
                 of write-through's root-to-leaf order, or into slots that were not IDLE;
  LoadBackStart  a load of a node already loading, one with a device copy (ToLoad is the
                 host-only nodes), or from slots that are not SYNCED (a host copy still
                 being written, or one a storage write reads);
  StorageBackupStart / StorageBackupFinish
                 a storage write of a node with no host copy, from slots not SYNCED, of a
                 node already stored; its end on slots that were not BACKUP;
  BackupFinish   the ack of a copy not in flight (one applied twice), or (write-through) a
                 child's copy acknowledged while its parent's has not landed (the parent's
                 ending in the same ack is fine: acks apply parents first);
  LoadBackFinish / LoadBackFail
                 an ack releasing slots that no load-back held (not PROTECTED); a
                 LoadBackFinish before every layer of its load landed (its LoadBackLayer
                 events: loadDone[n] = NLayers);
  LoadBackLayer  a layer of a load-back not in flight (loadReq[n] # NoReq): found on the
                 loader's thread, from the loads the events started and acknowledged
                 (`layer_of_no_load`), and reported at the monitor's next step;
  PrefetchFinish a request's fetch ended when none was in flight (settled twice), or an
                 abandoned fetch's end (`orphan`) freeing slots it did not hold (not
                 RESERVED);
  RequestMatch   a match under the id of a request still live (the monitor follows requests
                 by id: the two would be one spec request);
  RequestFinish, RequestAbort, DeviceInsert, LoadBackStart, PrefetchStart
                 a step of a request that is not live (never matched, or finished or
                 aborted: a double release, a use after finish); DeviceInsert also of
                 pages filed elsewhere than below the request's prefix; PrefetchStart also of
                 a request whose own fetch is in flight, below a node with no readable
                 host copy (write-through policies: HostTail), or into slots that were
                 not IDLE.

The request actions' first conjunct asks one phase (req[q] = "running" for RequestFinish
and DeviceInsert, "matched" for the others); in tree form it asks that the request is live.
The runtime's request steps are compound: one with nothing to load runs without a load
(matched -> running at once), and one may end while its load's ack is still to come, so
every live phase is accepted.

The chain's notions are read in the tree:

  Locked(n)      n < reqLen[q] of a live request q: the page is on the path root..node of
                 a live request's lock (a request locks the prefix it matched, and the map
                 knows the node each lock holds);
  n = len - 1    the page is the chain's last: DevEvictable's "no next page with a device
                 copy" is no child node with one, and "a leaf" (DeviceEvict without a host
                 copy, HostEvict of a host-only page) is no child node in the tree;
  n - 1          the page before a node's first page is its parent node's last (ParentBacked-
                 OrGoing: the parent node has a host copy or one being written); the pages
                 of one node are copied together, each after the one before it.

Children and parent links are the map's as of its last sync (`up`, `kids`), like every other
value read here: a faulty eviction that also cut the node's subtree loose (its `children`
cleared) is judged on the children the node had.

BackupDue is the write policy's: an engine's explicit `HiCache.backup()` (the PD handoff's
prefill side backs a request's prefix up to hand it over) is a backup the spec does not
model, and its BackupStart event says so (`requested`): for it every other conjunct is
checked.

After the event, `effect` checks the step's frame (`FRAMES`): no node but those its event
may change (the node it names, its op's, its request's path) changed, entered or left the
tree, read node by node off what the map's sync wrote; and what a node action writes to its
own node (`WRITES`: an eviction's node has no copy left in that tier, a copy is in flight
or landed, ...). docs/monitors.md, "The steps' frames".

A failure names the spec action and its guard's conjunct (text and location, from the
generated module) with the tree-form witness in brackets, as the tree form of
WriteThroughPrefix does.
"""
from __future__ import annotations

import inspect
import re

from hicache.monitors.generated import host_tier as spec
from hicache.monitors.maps import loops
from hicache.monitors.rt import Failure

#: hits a write-through policy asks of a node before its backup (BackupDue; min(hits, 2) is
#: what the map holds). write_back's is DevEvictable, checked apart.
_DUE_HITS = {"write_through": 1, "write_through_selective": 2}
#: the policies whose host copies form a prefix from the root (WriteThroughPrefix, HostTail)
_WRITE_THROUGH = frozenset(_DUE_HITS)


def check(m, action: str, fields: dict) -> Failure | None:
    """The guard of `action` on map m's state before the event: None, or the failed
    conjunct (None too for an action without a guard here). m is an IncrementalHostTierMap
    not yet synced for this event (its funcs, positions and slot names are the pre-state).
    (loops.guard_step, native where it builds, is this dispatch as the map's own `guard`:
    `guard_tables` is what it reads.)"""
    # (the request guards first: a run's events are mostly its requests' own; a live
    # request's finish or abort, and a match of one not live, the most common, pass here
    # without the guard's call)
    fn = REQUEST_GUARDS.get(action)
    if fn is not None:
        if fn is _request_live:
            if m.phase_before is not None:
                return None
        elif fn is _request_match:
            if m.phase_before is None:
                return None
        return fn(m, action, fields)
    fn = NODE_GUARDS.get(action)
    if fn is None:
        return None
    nid = fields.get("node")
    if nid is None and action in _ACKS:
        return None      # (an op whose node the runtime no longer holds: nothing of the tree to judge)
    # (_mapped, inline: this runs at every node event)
    x = m.by_id.get(nid)
    pos = m.npos.get(x) if x is not None else None
    if not pos:
        return no_page(action, nid)
    return fn(m, action, x, pos, fields)


def no_page(action: str, nid) -> Failure:
    """The failure of node event `action` whose node `nid` has no page in the tree before it."""
    return _fail(action, 0, f"node {nid} has no page in the tree before the event "
                            f"({_NOT_IN_TREE.get(action, 'InTree(n)')})")


def _mapped(m, node_id) -> tuple:
    """(node, its positions) of node id `node_id` in the tree before the event, or (None,
    None)."""
    x = m.by_id.get(node_id)
    pos = m.npos.get(x) if x is not None else None
    return (x, pos) if pos else (None, None)


def _children(m, x) -> list:
    """x's children before the event (the map's shape as of its last sync): an event that
    also cut its subtree loose must still be judged on the children the node had."""
    return [c for c in m.kids.get(x, ()) if m.npos.get(c)]


def _dev_evictable(m, action: str, x, pos: list) -> Failure | None:
    """DevEvictable(n) for x's pages. A failure names DeviceEvict's first conjunct
    (DevEvictable itself), or for BackupStart its fifth, BackupDue(n), which under
    write_back is DevEvictable(n)."""
    k = 0 if action == "DeviceEvict" else 4
    f = m.funcs
    p = pos[-1]          # node-level values are shared by the node's pages; its last page decides leafness
    if not f["dev"][p]:
        return _fail(action, k, f"node {x.id}'s pages have no device copy (dev[n])")
    locker = _locker(m, x)
    if locker is not None:
        return _fail(action, k, f"node {x.id} is on live request {locker}'s locked prefix (~Locked(n))")
    if f["loadReq"][p]:
        return _fail(action, k, f"a load-back into node {x.id}'s device pages is in flight (loadReq[n] = NoReq)")
    busy = loops.first_page_where(f["backupOp"], pos, True)
    if busy is not None:
        return _fail(action, k, f"a device->host copy still reads node {x.id}'s page at position {busy} "
                                f"(backupOp[n] = NoSlot)")
    # (the first of _children(m, x) with a device copy, in their order: a loop, no lists)
    dev, npos = f["dev"], m.npos
    for c in m.kids.get(x, ()):
        cp = npos.get(c)
        if cp and dev[cp[0]]:
            return _fail(action, k, f"child node {c.id} keeps a device copy (~dev[n + 1])")
    return None


def _device_evict(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    broke = _dev_evictable(m, action, x, pos)
    if broke is not None:
        return broke
    f = m.funcs
    if loops.first_page_where(f["host"], pos, False) is not None:
        # the disjunct that drops the only copy: never under write_back, a leaf only
        if m.s["policy"] == "write_back":
            return _fail(action, 1, f"write_back dropped node {x.id}'s only copy (host[n] = NoSlot /\\ "
                                    f"policy # \"write_back\")")
        children = _children(m, x)
        if children:
            return _fail(action, 1, f"node {x.id} left the tree with child node {children[0].id} still in it "
                                    f"(host[n] = NoSlot /\\ n = len - 1)")
    return None


def _host_evict(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    f = m.funcs
    host = f["host"]
    hs = list(map(host.__getitem__, pos))
    if not all(hs):
        return _fail(action, 0, f"node {x.id}'s pages have no host copy (host[n] # NoSlot)")
    # (_children(m, x) in one loop, no lists: the first with a host copy or one being
    # written fails; `child`, the first of them, is what the host-only test reads below)
    backup, npos = f["backupOp"], m.npos
    child = None
    for c in m.kids.get(x, ()):
        cp = npos.get(c)
        if cp:
            if child is None:
                child = c
            q = cp[0]
            if host[q] or backup[q]:
                return _fail(action, 0, f"child node {c.id} keeps a host copy or one being written "
                                        f"(host[n + 1] = NoSlot /\\ backupOp[n + 1] = NoSlot)")
    broke = _slots_in(m, action, 0, "node {}'s", x.id, hs, "synced")
    if broke is not None:
        return broke
    if not f["dev"][pos[-1]]:
        locker = _locker(m, x)
        if locker is not None:
            return _fail(action, 0, f"host-only node {x.id} is on live request {locker}'s locked prefix "
                                    f"(dev[n] \\/ ~Locked(n))")
        if child is not None:
            return _fail(action, 0, f"host-only node {x.id} left the tree with child node {child.id} "
                                    f"still in it (dev[n] \\/ n = len - 1)")
    return None


def _backup_start(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    f = m.funcs
    p = pos[-1]
    if not f["dev"][p]:
        return _fail(action, 1, f"node {x.id}'s pages have no device copy to back up (dev[n])")
    held = loops.first_page_where(f["host"], pos, True)
    if held is not None:
        return _fail(action, 2, f"node {x.id}'s page at position {held} already has host slot "
                                f"{f['host'][held]} (host[n] = NoSlot)")
    going = loops.first_page_where(f["backupOp"], pos, True)
    if going is not None:
        return _fail(action, 3, f"a device->host copy of node {x.id}'s page at position {going} is already "
                                f"in flight (backupOp[n] = NoSlot)")
    policy = m.s["policy"]
    if not fields.get("requested", False):
        need = _DUE_HITS.get(policy)
        if need is None:
            broke = _dev_evictable(m, action, x, pos)      # write_back: only a node leaving the device
            if broke is not None:
                return broke
        elif f["hits"][p] < need:
            return _fail(action, 4, f"node {x.id} has {f['hits'][p]} hit{'s' if f['hits'][p] != 1 else ''} "
                                    f"(min(hits, 2)); {policy} backs up at {need} (BackupDue(n))")
    if policy in _DUE_HITS:
        par = m.up.get(x)
        if par is not None and m.npos.get(par):
            q = m.npos[par][-1]
            if not (f["host"][q] or f["backupOp"][q]):
                return _fail(action, 5, f"parent node {par.id} has no host copy and none being written "
                                        f"(ParentBackedOrGoing(n): host[n - 1] # NoSlot \\/ "
                                        f"backupOp[n - 1] # NoSlot)")
    return _slots_in(m, action, 6, "node {}'s", x.id, fields.get("slots") or (), "idle", "h \\in IdleSlots",
                     runtime=True)


def _backup_finish(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    f = m.funcs
    idle = loops.first_page_where(f["backupOp"], pos, False)
    if idle is not None:
        return _fail(action, 0, f"no device->host copy of node {x.id}'s page at position {idle} is in "
                                f"flight (backupOp[n] # NoSlot)")
    if fields.get("ok", True) and m.s["policy"] in _DUE_HITS:
        # (a failed copy, ok False, is no BackupFinish of the spec: its slots go back IDLE;
        # the runtime also fails one whose parent's copy is not readable yet)
        par = m.up.get(x)
        above = m.npos.get(par) if par is not None else None
        if above:
            q = above[-1]
            # the parent's copy ending in this same ack (one op's nodes) lands first: acks
            # apply parents first
            if not f["host"][q] and f["backupOp"][q] - 1 not in set(fields.get("slots") or ()):
                return _fail(action, 1, f"parent node {par.id} has no host copy yet (ParentBacked(n): "
                                        f"host[n - 1] # NoSlot)")
    return None


def _request_live(m, action: str, fields: dict) -> Failure | None:
    """req[q] = <the phase the action asks>, in tree form: the request is live (matched,
    and neither finished nor aborted). The runtime's request steps are compound: one with
    nothing to load runs without a load (matched -> running at once), one may end while its
    load's ack is still to come, so any live phase is accepted; what fails is an event of
    a request never matched, or one that has ended (a use after finish, a double release)."""
    if m.phase_before is not None:
        return None
    rid = fields.get("rid")
    return _fail(action, 0, f"request {rid} is not live: never matched, or already finished or aborted "
                            f"(req[q] = \"{_LIVE_PHASE[action]}\")")


def _request_match(m, action: str, fields: dict) -> Failure | None:
    if m.phase_before is None:
        return None
    rid = fields.get("rid")
    return _fail(action, 0, f"request {rid} is matched again while live ({m.phase_before}): two requests "
                            f"under one id (req[q] = \"idle\")")


def _device_insert(m, action: str, fields: dict) -> Failure | None:
    """DeviceInsert(q)'s guard in tree form: q is live, and its pages extend the chain q
    holds (reqLen[q] = len): the node the event names (the deepest of q's key after the
    insert) lies below the node q's prefix ended at before it. The runtime inserts along
    q's key from the root, so pages filed under another prefix (a key that is not the one
    q matched) give a legal-looking tree whose pages hold another prefix's KV: a later match
    of that prefix would read them. The node's place is read from the tree as the insert
    left it (a new node is not mapped before the event)."""
    if m.phase_before is None:        # (_request_live, inline: the common step passes without the call)
        return _request_live(m, action, fields)
    rid = fields.get("rid")
    held = m.by_id.get(m.lock_before)
    if held is None:
        return None      # (the root, below which every node is, or a node not mapped: nothing to judge)
    nid = fields.get("node")
    x = m.by_id.get(nid)
    if x is None:
        for y in m.journal:           # (a loop, no generator: a new node is the common insert)
            if y.id == nid:
                x = y
                break
        else:
            return None
    y = x
    while y is not None and y is not held:
        y = y.parent
    if y is None:
        return _fail(action, 1, f"request {rid}'s pages went to node {nid}, not below node {held.id} where its "
                                f"prefix ended (reqLen[q] = len: the request holds the chain its pages extend)")
    return None


def _prefetch_start(m, action: str, fields: dict) -> Failure | None:
    """PrefetchStart(q)'s guard in tree form: q is live, has no fetch of its own in flight
    (pfSlot[q] = NoSlot: a second fetch would overwrite the request's record of the first,
    whose slots nothing would then free), under a write-through policy the node it fetches
    below has a readable host copy (HostTail: host[len - 1] # NoSlot; a page whose copy is
    still in flight is backupOp in the map, as in the spec), and its slots were IDLE."""
    if m.phase_before is None:        # (_request_live, inline: the common step passes without the call)
        return _request_live(m, action, fields)
    rid = fields.get("rid")
    if rid in m.fetching:
        return _fail(action, 1, f"request {rid} already has a fetch in flight (pfSlot[q] = NoSlot)")
    if m.s["policy"] in _WRITE_THROUGH:
        # (write_back keeps no HostTail: the runtime fetches below a device-only node, whose
        # eviction drops the fetched pages first; the root is HostTail's len = 0)
        x, pos = _mapped(m, m.lock_before)
        if x is not None and not m.funcs["host"][pos[-1]]:
            return _fail(action, 5, f"request {rid}'s prefix ends at node {x.id}, whose last page has no "
                                    f"host copy (HostTail: host[len - 1] # NoSlot)")
    return _slots_in(m, action, 6, "request {}'s prefetch", rid, fields.get("slots") or (), "idle", "h \\in IdleSlots",
                     runtime=True)


def _prefetch_end(m, action: str, fields: dict) -> Failure | None:
    """pfSlot[q] # NoSlot, in tree form: a request's own PrefetchFinish (no `slots` field)
    ends a fetch of that request in flight before the event (one settled twice ends
    nothing); the end of an abandoned fetch (`orphan`: the event names the slots it frees)
    frees slots that were the fetch's, RESERVED."""
    if fields.get("slots") is None:
        rid = fields.get("rid")
        if rid in m.fetching:
            return None
        return _fail(action, 0, f"request {rid} has no fetch in flight (pfSlot[q] # NoSlot)")
    return _slots_in(m, action, 0, "request {}'s abandoned fetch", fields.get("rid"), fields.get("slots") or (),
                     "reserved", "pfSlot[q] # NoSlot: the fetch holds them", runtime=True)


def _load_end(m, action: str, fields: dict) -> Failure | None:
    """LoadEnd(q)'s req[q] = "loading" in tree form: the slots the ack releases were held
    by a load-back in flight (PROTECTED), which the load of q holds while q is loading."""
    return _slots_in(m, action, 0, "request {}'s load-back", fields.get("rid"), fields.get("slots") or (), "protected",
                     "LoadEnd(q): req[q] = \"loading\", its load holding them", runtime=True)


def _load_back_finish(m, action: str, fields: dict) -> Failure | None:
    """LoadBackFinish: LoadEnd(q), then `\\A n \\in Loading(q) : loadDone[n] = NLayers` in
    tree form: the load's LoadBackLayer events reported each layer 0..NLayers-1 (loadDone
    counts the layers that landed: one reported twice counts once, one out of range not at
    all). An ack before its last layer landed lets the forward pass read a layer's KV that
    is not on device, and leaves a legal-looking state: no invariant sees it afterwards."""
    broke = _load_end(m, action, fields)
    if broke is not None:
        return broke
    n = m.cache.cfg.layers
    landed = m.layers_landed
    if len(landed) == n and all(layer.__class__ is int and 0 <= layer < n for layer in landed):
        return None
    seen = sorted(landed, key=lambda x: (x.__class__ is not int, x if x.__class__ is int else 0, repr(x)))
    missing = [layer for layer in range(n) if layer not in landed]
    return _fail(action, 1, f"request {fields.get('rid')}'s load-back of nodes {list(fields.get('nodes') or ())} "
                            f"acknowledged with layers {seen} reported, of NLayers = {n}"
                            + (f" (missing {missing})" if missing else ""))


def layer_of_no_load(fields: dict) -> Failure:
    """LoadBackLayer's `loadReq[n] # NoReq`, broken: a layer reported for a load-back that
    is not in flight (none started for these nodes, or its ack already came: a loader
    still copying into device pages its load gave up, which may hold another node's KV by
    now). Judged in the map's bind, on the loader's thread, from the loads the events
    started and ended (no state is read there)."""
    return _fail("LoadBackLayer", 0, f"layer {fields.get('layer')} of request {fields.get('rid')}'s load-back "
                                     f"of nodes {list(fields.get('nodes') or ())}, which is not in flight "
                                     f"(no LoadBackStart, or its ack came)")


def _load_back_start(m, action: str, fields: dict) -> Failure | None:
    if m.phase_before is None:        # (_request_live, inline: the common step passes without the call)
        return _request_live(m, action, fields)
    f = m.funcs
    for nid in fields.get("nodes") or ():
        x, pos = _mapped(m, nid)
        if x is None:
            # (ToLoad(q) is the request's prefix: pages in the tree)
            return _fail(action, 2, f"node {nid} has no page in the tree before the event (n < reqLen[q])")
        p = pos[-1]
        if f["dev"][p]:
            return _fail(action, 2, f"node {x.id} has a device copy: not host-only, not in ToLoad(q) (~dev[n])")
        if f["loadReq"][p]:
            return _fail(action, 2, f"a load-back into node {x.id} is already in flight (loadReq[n] = NoReq)")
        broke = _host_slots(m, action, 2, 2, x, pos, "synced")
        if broke is not None:
            return broke
    return None


def _storage_backup_start(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    broke = _host_slots(m, action, 1, 2, x, pos, "synced")
    if broke is not None:
        return broke
    if m.funcs["stor"][pos[-1]]:
        return _fail(action, 3, f"node {x.id} is already in storage (~stor[n])")
    return None


def _storage_backup_finish(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    return _host_slots(m, action, 1, 2, x, pos, "backup")


def _host_slots(m, action: str, k_host: int, k_state: int, x, pos: list, state: str) -> Failure | None:
    """Conjunct k_host fails unless every page of x has a host copy (host[n] # NoSlot),
    conjunct k_state unless each one's slot was `state` (slot[host[n]] = state)."""
    hs = list(map(m.funcs["host"].__getitem__, pos))
    if not all(hs):
        return _fail(action, k_host, f"node {x.id}'s pages have no host copy (host[n] # NoSlot)")
    return _slots_in(m, action, k_state, "node {}'s", x.id, hs, state)


def _slots_in(m, action: str, k: int, whose: str, of, slots, state: str,
              text: str | None = None, runtime: bool = False) -> Failure | None:
    """Conjunct k (its text `text`, or slot[host[n]] = state) fails unless every spec slot of
    `slots` (runtime slot + 1) was `state` before the event; whose slots they are, in words:
    `whose.format(of)` (formatted for a failure only: this runs at every guarded event).
    With `runtime`, `slots` are runtime slots, each made its spec slot (+ 1) first."""
    names = m.slot_names
    h = loops.first_slot_not_in(names, slots, state, runtime)
    if h is None:
        return None
    was = f"\"{names[h - 1]}\"" if 0 < h <= len(names) else "not a host slot"
    text = text or f"slot[host[n]] = \"{state}\""
    return _fail(action, k, f"{whose.format(of)} slot {h} (runtime slot {h - 1}) is {was}, not \"{state}\" ({text})")


def _locker(m, x):
    """A live request whose locked path root..node passes through x (None: none): the tree
    form of Locked(n) for x's pages, on the parent links as of the map's last sync."""
    by_id, up = m.by_id, m.up
    for rid, nid in m.req_node.items():
        y = by_id.get(nid)
        while y is not None:
            if y is x:
                return rid
            y = up.get(y)          # None past the root (the root is never mapped)
    return None


def _fail(action: str, k: int, why: str) -> Failure:
    """Conjunct k (0-based) of the spec action's table, with the tree-form witness."""
    text, loc = getattr(spec, f"_T_act_{action}")[k]
    return Failure(action, k + 1, f"{text}  [tree form: {why}]", loc)


def _named_node(m, fields: dict) -> tuple | None:
    """The node the event names (`node`): an eviction's, a copy's start (its op holds that
    node alone when it starts); None when it names none (nothing to judge)."""
    nid = fields.get("node")
    return None if nid is None else (nid,)


def _op_nodes(m, fields: dict) -> tuple:
    """Every node of the event's op: an ack's `held` (an op may hold several nodes by the
    time it ends: the upper half of a split of its node while it was in flight), else a
    load-back's `nodes` (at its start), else the node it names."""
    nodes = fields.get("held")
    if nodes is None:
        nodes = fields.get("nodes")
    return tuple(nodes) if nodes is not None else _named_node(m, fields) or ()


def _no_node(m, fields: dict) -> tuple:
    """A request's step that changes no node's values: its row alone (req, reqLen, pfSlot,
    pfNode, pfAbort); its lock is read off its row, no node variable."""
    return ()


def _path(m, fields: dict) -> tuple | None:
    """The named node and its ancestors: a match's (the node its key ends in may split, the
    upper half a new node on the path) and an insert's (it counts a hit at each node of
    its key's path, gives a host-only one its device copy back, and may split one)."""
    x = m.by_id.get(fields.get("node"))
    if x is None:
        return _named_node(m, fields)
    ids = []
    while x is not None:
        ids.append(x.id)
        x = x.parent
    return tuple(ids)


def _joined(m, fields: dict) -> tuple | None:
    """A fetch's end: the path of the node its event names (`node`: the host-only leaf it
    hung, or, having joined nothing, its request's node) and the new nodes below that node
    (the split its walk makes where the key ends inside a node whose pages arrived
    meanwhile); an abandoned fetch's (`orphan`, no node) frees its own slots and changes
    no node."""
    if fields.get("orphan"):
        return ()
    path = _path(m, fields)
    if path is None:
        return None
    anchor = path[0]
    new = []
    for y, old in m.changed.items():
        if old is None:
            x = y.parent
            while x is not None and x.id != anchor:
                x = x.parent
            if x is not None:
                new.append(y.id)
    return path + tuple(new)


#: spec action -> the nodes its event's step may change (their ids, from the map just synced
#: and the event; None: judge nothing). Each action writes its per-node variables as `v' =
#: [v EXCEPT ![n] = ...]` (for the nodes of its op, its request's path) or leaves them
#: UNCHANGED, and a slot only through those nodes' own (`slot' = [slot EXCEPT ![host[n]] =
#: ...]`), so no other node's value changes (HostEvict's `len' = n` drops n alone: the
#: runtime evicts a leaf). The runtime evicts node by node, an event each; a copy's op
#: starts on one node and may end on several (its node split while in flight: the ack's
#: `held`); a load-back names its nodes (and its ack those it held, splits included); a
#: request's match, insert and fetch change the nodes of its key's path and the new ones
#: they hang on it. A step an invariant cannot tell from a legal one (an eviction or a copy
#: carried out on another node than its event names, both fit for it; an eviction with no
#: event inside another step) breaks it. What `effect` checks, after the event.
FRAMES = {
    "DeviceEvict": _named_node, "HostEvict": _named_node,
    "BackupStart": _named_node, "StorageBackupStart": _named_node,
    "BackupFinish": _op_nodes, "StorageBackupFinish": _op_nodes,
    "LoadBackStart": _op_nodes, "LoadBackFinish": _op_nodes, "LoadBackFail": _op_nodes,
    "RequestFinish": _no_node, "RequestAbort": _no_node, "PrefetchStart": _no_node,
    "RequestMatch": _path, "DeviceInsert": _path, "PrefetchFinish": _joined,
}


def effect(m, action: str, fields: dict) -> Failure | None:
    """The frame of a step (FRAMES) in tree form, on map m just synced for this event alone:
    no node but those the event may change had its values changed (`m.changed`: dev, stor,
    hits, loadReq, its host or in-flight copy's slots), entered or left the tree, or holds
    a slot whose state changed (`m.slots_changed`); then what a node action writes to its
    own node (WRITES). Read node by node off what the sync wrote, not off the dirty
    elements it reports for the checks, which over-approximate (a page moved between
    positions is a renaming; a slot's last holder is re-checked whether or not it still
    holds it). (loops.effect_step, native where it builds, is this check as the map's own
    `effect`: `effect_tables` is what it reads.)"""
    changed, slots_changed, left = m.changed, m.slots_changed, m.left
    # (no node changed, most request steps and acks of nothing: no frame to judge; an event
    # naming no node judges none)
    if changed or slots_changed or left:
        frame = FRAMES.get(action)
        if frame is _named_node:
            # (an eviction's or a copy's start, the common node step: its ids without the call)
            nid = fields.get("node")
            ids = None if nid is None else (nid,)
        else:
            ids = frame(m, fields) if frame is not None else None
        if ids is not None:
            # The frame holds at once, `_frame` finding nothing, when every changed node and
            # every node that left is one of ids and no changed slot's last holder is outside
            # them (the common step: one node changed, the event's own); else `_frame` judges.
            # (loops, not any() over generators: this runs at every node event)
            judge = False
            for y in changed:
                if y.id not in ids:
                    judge = True
                    break
            if not judge and slots_changed:
                judge = bool(loops.holders_outside(slots_changed, m.slot_page, ids))
            if not judge and left:
                for y in left:
                    if y.id not in ids:
                        judge = True
                        break
            if judge:
                f = _frame(m, action, ids)
                if f is not None:
                    return f
    post = WRITES.get(action)
    return post(m, fields) if post is not None else None


def _frame(m, action: str, ids: tuple) -> Failure | None:
    """The frame of `action` on map m just synced: only the nodes `ids` changed."""
    for y, old in m.changed.items():
        if y.id in ids:
            continue
        changed = m.changed_vars(y, old)     # (none: only its page count, a split's renaming)
        if changed and not (changed == ["dev"] and _dropped_by_failed_load(y)):
            return _frame_failure(m, action, ids, y, changed)
    for h, y in loops.holders_outside(m.slots_changed, m.slot_page, ids):
        if y in m.nval and m.holds(y, h):
            return _frame_failure(m, action, ids, y, ["slot"], h + 1)
    # (a node that left the tree was not re-mapped: what left is asked apart)
    for y in m.left:
        if y.id not in ids:
            return _fail(action, _conjunct_of(action, "len"), f"a step of {_which(ids)} took node {y.id} out "
                                                              f"of the tree; the action changes {_own(ids)} alone")
    return None


# What a node action writes to its own node, checked after the event (`effect`, after the
# frame: a step on the wrong node is reported as the other node's change, which names both).
# Each reads the named node as the sync left it: `m.by_id` (None: it left the tree), its
# values as written (`m.nval`: (dev, stor, hits, loadReq), (host slots, a blocking copy's
# slots, a device->host copy of the host slots in flight)) and the slots' states
# (`m.slot_names`, by runtime slot). An event whose step was not carried out (the state
# unchanged, so every invariant and the frame hold) fails here.

def _after(m, nid):
    """(node, its node-level values, its slot values) as the sync left them; node None
    when it is not in the tree."""
    x = m.by_id.get(nid)
    if x is None:
        return None, None, None
    return x, *m.nval[x]


def _slots_after(m, action: str, var: str, nid, slots, state: str, when: str) -> Failure | None:
    """The conjunct of `action` writing `var` fails unless every runtime slot of `slots` (node
    nid's) is `state` as the sync left it (`when`: after what, in words)."""
    names = m.slot_names
    # (every one a slot in `state`, the common step: one native pass; else their states read
    # one by one, a slot past the names raising as it did)
    if loops.first_slot_not_in(names, slots, state, True) is None:
        return None
    states = set(map(names.__getitem__, slots))
    if not states or states == {state}:
        return None
    return _fail(action, _conjunct_of(action, var), f"node {nid}'s host slots {list(slots)} are "
                                                    f"{', '.join(sorted(states))} {when}, not \"{state}\"")


def _device_evict_writes(m, fields: dict) -> Failure | None:
    """dev' = [dev EXCEPT ![n] = FALSE], and a node without a host copy leaves (len' = n)."""
    nid = fields.get("node")
    x = m.by_id.get(nid)          # (_after, inline: this runs at every eviction)
    if x is None:
        return None
    vals, slots = m.nval[x]
    if vals[0]:
        return _fail("DeviceEvict", _conjunct_of("DeviceEvict", "dev"),
                     f"node {nid}'s device copy is still there after its eviction")
    if slots[0] is None and slots[1] is None:
        return _fail("DeviceEvict", _conjunct_of("DeviceEvict", "len"),
                     f"node {nid}, without a host copy, is still in the tree after its device eviction")
    return None


def _host_evict_writes(m, fields: dict) -> Failure | None:
    """host' = [host EXCEPT ![n] = NoSlot], and a host-only node leaves (len' = n)."""
    nid = fields.get("node")
    x = m.by_id.get(nid)          # (_after, inline: this runs at every eviction)
    if x is None:
        return None
    vals, slots = m.nval[x]
    if slots[0] is not None:
        return _fail("HostEvict", _conjunct_of("HostEvict", "host"),
                     f"node {nid}'s host copy (slots {list(slots[0])}) is still there after its eviction")
    if not vals[0]:
        return _fail("HostEvict", _conjunct_of("HostEvict", "len"),
                     f"node {nid}, without a device copy, is still in the tree after its host eviction")
    return None


def _backup_start_writes(m, fields: dict) -> Failure | None:
    """backupOp' = [backupOp EXCEPT ![n] = h] with slot' = [slot EXCEPT ![h] = "reserved"]:
    the node's copy in flight, into RESERVED slots."""
    nid = fields.get("node")
    x = m.by_id.get(nid)          # (_after, inline: this runs at every backup)
    if x is None:
        return None
    hs, pending, backing = m.nval[x][1]
    going = hs if backing else pending
    if going is None:
        return _fail("BackupStart", _conjunct_of("BackupStart", "backupOp"),
                     f"node {nid} has no copy in flight after its backup started")
    if loops.first_slot_not_in(m.slot_names, going, "reserved", True) is None:
        return None               # (_slots_after's passing test, inline: this runs at every backup)
    return _slots_after(m, "BackupStart", "backupOp", nid, going, "reserved", "after its backup started")


def _backup_finish_writes(m, fields: dict) -> Failure | None:
    """host' = [host EXCEPT ![n] = backupOp[n]], backupOp' = NoSlot, slot' = "synced": each
    node of the ack's op holds its host copy, no copy in flight, its slots SYNCED. (A failed
    copy's ack, `ok` False, is no step of the spec: the runtime drops what it wrote.)"""
    if not fields.get("ok", True):
        return None
    by_id, nval = m.by_id, m.nval
    for nid in _op_nodes(m, fields):
        x = by_id.get(nid)        # (_after, inline: this runs at every ack)
        if x is None:
            continue
        hs, pending, backing = nval[x][1]
        if hs is None or backing or pending is not None:
            what = "no host copy" if hs is None else "its copy still in flight"
            return _fail("BackupFinish", _conjunct_of("BackupFinish", "host"),
                         f"node {nid} has {what} after its backup's ack")
        if loops.first_slot_not_in(m.slot_names, hs, "synced", True) is None:
            continue              # (_slots_after's passing test, inline: this runs at every ack)
        f = _slots_after(m, "BackupFinish", "slot", nid, hs, "synced", "after its backup's ack")
        if f is not None:
            return f
    return None


def _storage_backup_start_writes(m, fields: dict) -> Failure | None:
    """slot' = [slot EXCEPT ![host[n]] = "backup"]: the node's slots are read by the write."""
    nid = fields.get("node")
    x, vals, slots = _after(m, nid)
    if x is None or slots[0] is None:
        return None        # (no host copy: the guard's InTree(n) /\ host[n] # NoSlot said so)
    return _slots_after(m, "StorageBackupStart", "slot", nid, slots[0], "backup", "after its storage write started")


def _storage_backup_finish_writes(m, fields: dict) -> Failure | None:
    """slot' = "synced" and stor' = [stor EXCEPT ![n] = TRUE]: each node of the ack's op has
    its slots SYNCED again and, the write having succeeded (`ok`), is in storage."""
    ok = fields.get("ok", True)
    for nid in _op_nodes(m, fields):
        x, vals, slots = _after(m, nid)
        if x is None or slots[0] is None:
            continue
        f = _slots_after(m, "StorageBackupFinish", "slot", nid, slots[0], "synced", "after its storage write's ack")
        if f is not None:
            return f
        if ok and not vals[1]:
            return _fail("StorageBackupFinish", _conjunct_of("StorageBackupFinish", "stor"),
                         f"node {nid} is not in storage after its storage write's ack (ok)")
    return None


def _load_back_start_writes(m, fields: dict) -> Failure | None:
    """loadReq' = q and slot' = "protected" for the nodes it loads: each loading, its host
    slots PROTECTED (read by the load: no eviction, no storage write)."""
    for nid in fields.get("nodes") or ():
        x, vals, slots = _after(m, nid)
        if x is None:
            continue
        if not vals[3]:
            return _fail("LoadBackStart", _conjunct_of("LoadBackStart", "loadReq"),
                         f"node {nid} is not loading after its load-back started")
        f = _slots_after(m, "LoadBackStart", "slot", nid, slots[0] or (), "protected", "after its load-back started")
        if f is not None:
            return f
    return None


def _load_end_writes(m, fields: dict, action: str) -> Failure | None:
    """LoadEnd(q): each node the load held is no longer loading (loadReq' = NoReq), its host
    slots SYNCED again; and, for LoadBackFinish, on device (dev' = dev[n] \\/ n \\in Loading(q))."""
    for nid in _op_nodes(m, fields):
        x, vals, slots = _after(m, nid)
        if x is None:
            continue
        if vals[3]:
            return _fail(action, _conjunct_of(action, "loadReq"), f"node {nid} is still loading after its "
                                                                  f"load-back's ack")
        f = _slots_after(m, action, "slot", nid, slots[0] or (), "synced", "after its load-back's ack")
        if f is not None:
            return f
        if action == "LoadBackFinish" and not vals[0]:
            return _fail(action, _conjunct_of(action, "dev"), f"node {nid} has no device copy after its "
                                                              f"load-back landed")
    return None


#: spec action -> its writes to its own node(s), in tree form (`effect`, after the frame)
WRITES = {
    "LoadBackStart": _load_back_start_writes,
    "LoadBackFinish": lambda m, fields: _load_end_writes(m, fields, "LoadBackFinish"),
    "LoadBackFail": lambda m, fields: _load_end_writes(m, fields, "LoadBackFail"),
    "DeviceEvict": _device_evict_writes, "HostEvict": _host_evict_writes,
    "BackupStart": _backup_start_writes, "BackupFinish": _backup_finish_writes,
    "StorageBackupStart": _storage_backup_start_writes, "StorageBackupFinish": _storage_backup_finish_writes,
}


def _which(ids: tuple) -> str:
    """The nodes a step may change, in words (a failure's witness)."""
    if not ids:
        return "no node"
    return f"node {ids[0]}" if len(ids) == 1 else f"nodes {', '.join(map(str, ids))}"


def _own(ids: tuple) -> str:
    return "no node's values" if not ids else "node n's values" if len(ids) == 1 else "its nodes' values"


def _dropped_by_failed_load(y) -> bool:
    """Node y (whose dev alone changed) had its device copy dropped under its failed
    load-back (the runtime's `_drop_failed_load`, at the first look after the failure,
    before the LoadBackFail event: no event of its own). The spec's dev of a loading node
    is FALSE from LoadBackStart (dev UNCHANGED) to LoadBackFail (dev UNCHANGED): the drop is
    a stutter, not the change of the event whose sync saw it."""
    op = y.loading
    return op is not None and getattr(op, "dropped", False) and y.device is None


def _frame_failure(m, action: str, ids: tuple, y, changed: list[str], h: int | None = None) -> Failure:
    """The conjunct of `action` that the change of node y's `changed` variables breaks: the
    one writing the first of them (`v' = ...`, or the UNCHANGED list holding it); `slot`
    when a slot y holds (spec slot h) changed state."""
    k = _conjunct_of(action, *changed)
    what = f"the state of its host slot {h}" if h is not None else \
        "it entered the tree" if changed == ["len"] else ", ".join(changed)
    return _fail(action, k, f"a step of {_which(ids)} changed node {y.id}'s values: {what}; the action "
                            f"changes {_own(ids)} alone")


def _conjunct_of(action: str, *variables: str) -> int:
    """The first conjunct of `action` that constrains one of `variables` in the next state
    (`v' = ...`, or an UNCHANGED list holding v), in their order; its last conjunct (the
    UNCHANGED of the rest) when none does."""
    table = getattr(spec, f"_T_act_{action}")
    for var in variables:
        for i, (text, _) in enumerate(table):
            if f"{var}' =" in text or ("UNCHANGED" in text and var in _unchanged(text)) \
                    or var in _primed_by_operator(text):
                return i
    return len(table) - 1


def _primed_by_operator(text: str) -> frozenset:
    """The variables a conjunct that calls one of the spec's operators (`LoadEnd(q)`)
    constrains in the next state: those its generated definition reads primed (`t['v']`).
    Only asked on a failure."""
    name = text.split("(", 1)[0].strip()
    fn = getattr(spec, f"d_{name}", None) if name.isidentifier() else None
    if fn is None:
        return frozenset()
    return frozenset(re.findall(r"t\['(\w+)'\]", inspect.getsource(fn)))


def _unchanged(text: str) -> set:
    """The variables of an `UNCHANGED <<...>>` conjunct's text."""
    inner = text.split("<<", 1)[-1].split(">>", 1)[0]
    return {v.strip() for v in inner.split(",")}


#: the events of one node (field `node`) whose guard is checked: spec action -> its tree
#: form, given the node and its positions before the event (LoadBackStart, of several
#: nodes, is a request guard)
NODE_GUARDS = {
    "DeviceEvict": _device_evict, "HostEvict": _host_evict, "BackupStart": _backup_start,
    "BackupFinish": _backup_finish,
    "StorageBackupStart": _storage_backup_start, "StorageBackupFinish": _storage_backup_finish,
}

#: the events of a request (field `rid`) whose guard is checked: spec action -> its tree form
REQUEST_GUARDS = {
    "RequestMatch": _request_match, "RequestFinish": _request_live, "RequestAbort": _request_live,
    "DeviceInsert": _device_insert, "LoadBackStart": _load_back_start, "PrefetchStart": _prefetch_start,
    "LoadBackFinish": _load_back_finish, "LoadBackFail": _load_end, "PrefetchFinish": _prefetch_end,
}

#: the phase each request action's first conjunct asks of its request (req[q] = ...)
_LIVE_PHASE = {"RequestFinish": "running", "RequestAbort": "matched", "DeviceInsert": "running",
               "LoadBackStart": "matched", "PrefetchStart": "matched"}

#: the acks of a node's copy: one whose op no longer holds a node names none (nothing to judge)
_ACKS = frozenset({"BackupFinish", "StorageBackupFinish"})

#: what a node event's guard says of a node with no page in the tree, where not InTree(n)
_NOT_IN_TREE = {"BackupFinish": "so no copy of its pages is in flight: backupOp[n] # NoSlot"}


def guard_tables(m) -> tuple:
    """What `check` reads that map m never rebinds, for loops.guard_step: the guard tables, the
    two request guards decided on the phase before the event alone, the acks that may name no
    node, the map's mapped nodes by id and their positions, and the failure of a node not in
    the tree."""
    return (REQUEST_GUARDS, NODE_GUARDS, _request_live, _request_match, _ACKS, m.by_id, m.npos, no_page)


def effect_tables(m) -> tuple:
    """What `effect` reads that map m never rebinds, for loops.effect_step: the frame and write
    tables, the frame of a node the event names, the frame's judge and the map's slot holders."""
    return (FRAMES, WRITES, _named_node, _frame, m.slot_page)
