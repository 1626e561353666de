"""HostTier's action guards in their tree form, checked on the state before the event.

The spec's actions move one page of a chain; the runtime moves whole nodes of a tree, so
its events are compound steps and the maps check the invariants after them. What no
invariant can see afterwards is a guard the event broke while leaving a legal-looking
state. `check` evaluates, on the incremental map's state before the event (the monitor
calls it before the map syncs), the guards of:

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
                 node already stored; its end on slots that were not BACKUP.

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

A failure names the spec action and its guard's conjunct (text and location, from the
generated module) with the tree-form witness in brackets, as the tree form of
WriteThroughPrefix does.
"""
from __future__ import annotations

from hicache.monitors.generated import host_tier as spec
from hicache.monitors.rt import Failure

#: hits a write-through policy asks of a node before its backup (BackupDue; min(hits, 2) is
#: what the map holds). write_back's is DevEvictable, checked apart.
_DUE_HITS = {"write_through": 1, "write_through_selective": 2}


def check(m, action: str, fields: dict) -> Failure | None:
    """The guard of `action` on map m's state before the event: None, or the failed
    conjunct (None too for an action without a guard here). m is an IncrementalHostTierMap
    not yet synced for this event (its funcs, positions and slot names are the pre-state)."""
    fn = NODE_GUARDS.get(action)
    if fn is None:
        return _load_back_start(m, action, fields) if action == "LoadBackStart" else None
    nid = fields.get("node")
    if nid is None and action == "StorageBackupFinish":
        return None      # (an op whose node the runtime no longer holds: nothing of the tree to judge)
    x, pos = _mapped(m, nid)
    if x is None:
        return _fail(action, 0, f"node {nid} has no page in the tree before the event (InTree(n))")
    return fn(m, action, x, pos, fields)


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
    busy = [q for q in pos if f["backupOp"][q]]
    if busy:
        return _fail(action, k, f"a device->host copy still reads node {x.id}'s page at position {busy[0]} "
                                f"(backupOp[n] = NoSlot)")
    below = [c for c in _children(m, x) if f["dev"][m.npos[c][0]]]
    if below:
        return _fail(action, k, f"child node {below[0].id} keeps a device copy (~dev[n + 1])")
    return None


def _device_evict(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    broke = _dev_evictable(m, action, x, pos)
    if broke is not None:
        return broke
    f = m.funcs
    if not all(f["host"][q] for q in pos):
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
    hs = [f["host"][q] for q in pos]
    if not all(hs):
        return _fail(action, 0, f"node {x.id}'s pages have no host copy (host[n] # NoSlot)")
    children = _children(m, x)
    below = [c for c in children if f["host"][m.npos[c][0]] or f["backupOp"][m.npos[c][0]]]
    if below:
        return _fail(action, 0, f"child node {below[0].id} keeps a host copy or one being written "
                                f"(host[n + 1] = NoSlot /\\ backupOp[n + 1] = NoSlot)")
    broke = _slots_in(m, action, 0, x, hs, "synced")
    if broke is not None:
        return broke
    if not f["dev"][pos[-1]]:
        locker = _locker(m, x)
        if locker is not None:
            return _fail(action, 0, f"host-only node {x.id} is on live request {locker}'s locked prefix "
                                    f"(dev[n] \\/ ~Locked(n))")
        if children:
            return _fail(action, 0, f"host-only node {x.id} left the tree with child node {children[0].id} "
                                    f"still in it (dev[n] \\/ n = len - 1)")
    return None


def _backup_start(m, action: str, x, pos: list, fields: dict) -> Failure | None:
    f = m.funcs
    p = pos[-1]
    if not f["dev"][p]:
        return _fail(action, 1, f"node {x.id}'s pages have no device copy to back up (dev[n])")
    held = [q for q in pos if f["host"][q]]
    if held:
        return _fail(action, 2, f"node {x.id}'s page at position {held[0]} already has host slot "
                                f"{f['host'][held[0]]} (host[n] = NoSlot)")
    going = [q for q in pos if f["backupOp"][q]]
    if going:
        return _fail(action, 3, f"a device->host copy of node {x.id}'s page at position {going[0]} is already "
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
    return _slots_in(m, action, 6, x, [h + 1 for h in fields.get("slots") or ()], "idle", "h \\in IdleSlots")


def _load_back_start(m, action: str, fields: dict) -> Failure | None:
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
    hs = [m.funcs["host"][q] for q in pos]
    if not all(hs):
        return _fail(action, k_host, f"node {x.id}'s pages have no host copy (host[n] # NoSlot)")
    return _slots_in(m, action, k_state, x, hs, state)


def _slots_in(m, action: str, k: int, x, slots: list, state: str,
              text: str | None = None) -> Failure | None:
    """Conjunct k (its text `text`, or slot[host[n]] = state) fails unless every spec slot of
    `slots` (runtime slot + 1) was `state` before the event."""
    names = m.slot_names
    bad = [h for h in slots if not 0 < h <= len(names) or names[h - 1] != state]
    if not bad:
        return None
    h = bad[0]
    was = f"\"{names[h - 1]}\"" if 0 < h <= len(names) else "not a host slot"
    text = text or f"slot[host[n]] = \"{state}\""
    return _fail(action, k, f"node {x.id}'s slot {h} (runtime slot {h - 1}) is {was}, not \"{state}\" ({text})")


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


#: the events of one node (field `node`) whose guard is checked: spec action -> its tree
#: form, given the node and its positions before the event (LoadBackStart, of several
#: nodes, is `_load_back_start`)
NODE_GUARDS = {
    "DeviceEvict": _device_evict, "HostEvict": _host_evict, "BackupStart": _backup_start,
    "StorageBackupStart": _storage_backup_start, "StorageBackupFinish": _storage_backup_finish,
}
