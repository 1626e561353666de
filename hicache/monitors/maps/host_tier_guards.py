"""HostTier's eviction guards in their tree form, checked on the state before the event.

The spec's DeviceEvict(n) and HostEvict(n) take one page off the tail of a chain; the
runtime evicts a whole node of a tree, so its events are compound steps and the maps check
the invariants after them. What no invariant can see afterwards is a guard the eviction
broke while leaving a legal-looking state: a device copy dropped while a live request's
prefix still pins it (the node keeps its host copy, so nothing leaves the tree), while a
load-back fills it or a device->host copy still reads it, under a node whose children keep
theirs, or under write_back with no other copy. `check` evaluates DevEvictable (and the
choice of DeviceEvict's disjuncts) and HostEvictable on the incremental map's state before
the event (the monitor calls it before the map syncs) for the evicted node's pages, with the
chain's notions read in the tree:

  Locked(n)      n < reqLen[q] of a live request q: the page is on the path root..node of
                 a live request's lock (a request locks the prefix it matched, and the map
                 knows the node each lock holds);
  n = len - 1    the page is the chain's last: DevEvictable's "no next page with a device
                 copy" is no child node with one, and "a leaf" (DeviceEvict without a host
                 copy, HostEvict of a host-only page) is no child node in the tree.

Children and parent links are the map's as of its last sync (`up`, `kids`), like every other
value read here: a faulty eviction that also cut the node's subtree loose (its `children`
cleared) is judged on the children the node had.

A failure names the spec action and its guard's conjunct (text and location, from the
generated module) with the tree-form witness in brackets, as the tree form of
WriteThroughPrefix does.
"""
from __future__ import annotations

from hicache.monitors.generated import host_tier as spec
from hicache.monitors.rt import Failure

#: the events whose guard is checked, and the spec action each is
GUARDED = frozenset({"DeviceEvict", "HostEvict"})


def check(m, action: str, fields: dict) -> Failure | None:
    """The guard of `action` (DeviceEvict or HostEvict of node `fields["node"]`) on map m's
    state before the event: None, or the failed conjunct. m is an IncrementalHostTierMap not
    yet synced for this event (its funcs, positions and slot names are the pre-state)."""
    if action not in GUARDED:
        return None
    x = m.by_id.get(fields.get("node"))
    pos = m.npos.get(x) if x is not None else None
    if not pos:
        return _fail(action, 0, f"node {fields.get('node')} has no page in the tree before the event (InTree(n))")
    f = m.funcs
    p = pos[-1]          # node-level values are shared by the node's pages; its last page decides leafness
    locker = _locker(m, x)
    # the children before the event (the map's shape as of its last sync): an eviction that
    # also cut its subtree loose must still be judged on the children the node had
    children = [c for c in m.kids.get(x, ()) if m.npos.get(c)]
    if action == "DeviceEvict":
        if not f["dev"][p]:
            return _fail(action, 0, f"node {x.id}'s pages have no device copy (dev[n])")
        if locker is not None:
            return _fail(action, 0, f"node {x.id} is on live request {locker}'s locked prefix (~Locked(n))")
        if f["loadReq"][p]:
            return _fail(action, 0, f"a load-back into node {x.id}'s device pages is in flight (loadReq[n] = NoReq)")
        busy = [q for q in pos if f["backupOp"][q]]
        if busy:
            return _fail(action, 0, f"a device->host copy still reads node {x.id}'s page at position {busy[0]} "
                                    f"(backupOp[n] = NoSlot)")
        below = [c for c in children if f["dev"][m.npos[c][0]]]
        if below:
            return _fail(action, 0, f"child node {below[0].id} keeps a device copy (~dev[n + 1])")
        if not all(f["host"][q] for q in pos):
            # the disjunct that drops the only copy: never under write_back, a leaf only
            if m.s["policy"] == "write_back":
                return _fail(action, 1, f"write_back dropped node {x.id}'s only copy (host[n] = NoSlot /\\ "
                                        f"policy # \"write_back\")")
            if children:
                return _fail(action, 1, f"node {x.id} left the tree with child node {children[0].id} still in it "
                                        f"(host[n] = NoSlot /\\ n = len - 1)")
        return None
    # HostEvict
    if not all(f["host"][q] for q in pos):
        return _fail(action, 0, f"node {x.id}'s pages have no host copy (host[n] # NoSlot)")
    below = [c for c in children if f["host"][m.npos[c][0]] or f["backupOp"][m.npos[c][0]]]
    if below:
        return _fail(action, 0, f"child node {below[0].id} keeps a host copy or one being written "
                                f"(host[n + 1] = NoSlot /\\ backupOp[n + 1] = NoSlot)")
    names = m.slot_names
    bad = [h for h in (f["host"][q] for q in pos) if names[h - 1] != "synced"]
    if bad:
        return _fail(action, 0, f"node {x.id}'s slot {bad[0]} (runtime slot {bad[0] - 1}) is "
                                f"\"{names[bad[0] - 1]}\", not \"synced\" (slot[host[n]] = \"synced\")")
    if not f["dev"][p]:
        if locker is not None:
            return _fail(action, 0, f"host-only node {x.id} is on live request {locker}'s locked prefix "
                                    f"(dev[n] \\/ ~Locked(n))")
        if children:
            return _fail(action, 0, f"host-only node {x.id} left the tree with child node {children[0].id} "
                                    f"still in it (dev[n] \\/ n = len - 1)")
    return None


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
