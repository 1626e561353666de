"""The incremental maps' loops over positions, pages and slots: the writes of a node's
pages (each recording what it replaced, the delta, and what it made dirty), the host slots'
state comparison and the changed slots' bookkeeping, the device pages' holder counts and
rows (their pages' type for TypeOK, a padded row's pages written, a commit of the changed
chains' rows, counts and sequence entries), the tests of
SlotInOneOwner over the dirty slots and of NoDoubleAllocation over the dirty device pages,
the tree-form loops of the HostTier guards (a node's slots in one state) and of
WriteThroughPrefix (a node's pages), a removal's renaming of positions, the frame's slot
candidates, the walk of the journaled nodes (parents first), the HostTier map's re-mapping of
a node (and the walk with it, no call between) and its unmapping of a detached node's subtree,
runtime slots made spec slots and a node's per-page slot values (`node_slots`),
the request rows of the common step and their writes, the request step of the HostTier
map's bind (`request_binder`: a request's slot taken or freed), and the tracked nodes' class
(`tracked_class`: its writes of a journaled field journal the node; here a `__setattr__`). These Python loops define the functions; `hicache/monitors/csrc/incmap.c` is the
same loops in C over the same dicts, lists and sets (`hicache.monitors.native` builds and
loads it, once per process), used whenever it loads: in strict mode they run for every page
an event touches, and in bytecode each step of them costs ~25 opcodes around its few dict and
set operations. tests/monitors/test_native_incmap.py checks the two agree on random inputs,
exceptions included.

A value is replaced only when the new one is a different value: not the same object, and
not equal with the same type (1 == True in Python, but an int variable holding TRUE is a
different TLA+ value); `write_slots` compares with `!=` (its values are slot numbers).
"""
from __future__ import annotations

import operator
from functools import partial
from itertools import repeat
from types import MappingProxyType

import numpy as np

from hicache.monitors import native
from hicache.runtime.cache import host_write_in_flight as _runtime_host_write_in_flight   # (py_host_write_in_flight)


def py_fill(d: dict, pos: list, v, var: str, delta: list, dirty: set) -> None:
    """d[p] = v for each position p of pos, each write recorded as (var, p, old), p dirty."""
    tv = type(v)
    for p in pos:
        old = d[p]
        if old is v or old == v and type(old) is tv:
            continue
        delta.extend((var, p, old))
        d[p] = v
        dirty.add(p)


def py_move(d: dict, origin: dict, var: str, delta: list) -> None:
    """d[q] = d[src] for each q -> src of origin, in its order, each write recorded."""
    for q, src in origin.items():
        old, v = d[q], d[src]
        if old is not v and not (old == v and type(old) is type(v)):
            delta.extend((var, q, old))
            d[q] = v


def py_spare(d: dict, lo: int, hi: int, v, var: str, delta: list) -> None:
    """d[q] = v for q in range(lo, hi), each write recorded."""
    for q in range(lo, hi):
        old = d[q]
        if old is not v and not (old == v and type(old) is type(v)):
            delta.extend((var, q, old))
            d[q] = v


def py_release(d: dict, holes: list, refs: dict, slots: set) -> None:
    """The slot references of the pages at holes released: each true slot h = d[p] loses one
    reference (refs[h] -= 1, from 0 when absent) and is added to slots."""
    for p in holes:
        h = d[p]
        if h:
            refs[h] = refs.get(h, 0) - 1
            slots.add(h)


def py_write_slots(d: dict, pos: list, values, var: str, refs: dict, delta: list, dirty: set,
                   slots: set) -> None:
    """d[p] = v for each pair of zip(pos, values) where d[p] != v, recorded, p dirty, and
    the page's slot reference moved from the old slot to v (each true one added to slots)."""
    for p, v in zip(pos, values):
        old = d[p]
        if old != v:
            delta.extend((var, p, old))
            d[p] = v
            dirty.add(p)
            if old:
                refs[old] = refs.get(old, 0) - 1
                slots.add(old)
            if v:
                refs[v] = refs.get(v, 0) + 1
                slots.add(v)


def py_diff_bytes(state, seen: bytearray) -> list[int]:
    """The indices where the bytes of the C-contiguous array `state` differ from `seen`,
    which then holds them (one array's states against their copy at the last sync)."""
    raw = memoryview(state).cast("B")
    if len(raw) != len(seen):
        raise ValueError(f"diff_bytes: {len(raw)} bytes of state against {len(seen)} seen")
    if raw == seen:
        return []
    out = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) != np.frombuffer(seen, dtype=np.uint8)).tolist()
    seen[:] = raw
    return out


def py_count_pages(counts: dict, pages, k: int, dirty: set | None, none) -> None:
    """counts[p] += k (from 0) for each page p of `pages` (None: no pages) other than
    `none`, each added to `dirty` when that is a set."""
    if not pages or pages[0] == none and pages.count(none) == len(pages):
        # (a row of NoPage alone, a node without a device copy: nothing to count, found by
        # one C call instead of a walk; such rows come and go with every device eviction)
        return
    for p in pages:
        if p != none:
            counts[p] = counts.get(p, 0) + k
            if dirty is not None:
                dirty.add(p)


def py_commit_rows(changed: dict, rows: dict, holders: dict, page_rows: dict, s: dict, delta: list, empty, padded,
                   none, dirty: set | None) -> tuple[set, set]:
    """The incremental chain maps' commit of the chains in `changed` (chain c -> its new
    (rot, pages); (none, ()) for a chain no longer used) on a state whose rows have the
    current shape, in one pass: a chain whose entry differs from rows.get(c, (none, ())) is
    dirty and its entry replaced (deleted when it is the unused one); when its pages differ,
    holders[p] -= 1 for the old pages and += 1 for the new (`none` skipped, each page dirty:
    `count_pages`) and its page row is written: `padded(pages)`, kept in page_rows[c], when
    some page is not `none`, else `empty` (page_rows[c] dropped); rot[c - 1] and len[c - 1]
    are written where they differ. Each of s["rot"], s["len"], s["page"] an entry was
    written in (copied to a list at its first edit) is replaced by a tuple, (var, None, old
    value) appended to delta, in that order. Returns (dirty chains, dirty pages): the dirty
    pages added to the set `dirty` (a new one when it is None), which is returned. (A page row
    is not compared with the one it replaces, MaxLen entries: other pages make another row,
    but for trailing NoPages, (NoPage, NoPage) against (), whose rows are equal: written
    again, an entry undo restores as it was.)"""
    if dirty is not None and type(dirty) is not set:
        raise TypeError(f"commit_rows: dirty must be a set, not {type(dirty).__name__}")
    unused = (none, ())
    dirty_chains: set = set()
    dirty_pages: set = set() if dirty is None else dirty
    seq0 = [s["rot"], s["len"], s["page"]]
    seq1: list = [None, None, None]
    for c, new in changed.items():
        old = rows.get(c, unused)
        if not new != old:
            continue
        dirty_chains.add(c)
        r, pages, i, old_pages = new[0], new[1], c - 1, old[1]
        if pages != old_pages:
            py_count_pages(holders, old_pages, -1, dirty_pages, none)
            py_count_pages(holders, pages, 1, dirty_pages, none)
            if seq1[2] is None:
                seq1[2] = list(seq0[2])
            if pages.count(none) != len(pages):
                row = padded(pages)
                seq1[2][i] = row
                page_rows[c] = row
            else:
                seq1[2][i] = empty
                page_rows.pop(c, None)
        if new == unused:
            del rows[c]
        else:
            rows[c] = new
        for k, v in ((0, r), (1, len(pages))):
            if seq0[k][i] != v:
                if seq1[k] is None:
                    seq1[k] = list(seq0[k])
                seq1[k][i] = v
    for var, was, edited in zip(("rot", "len", "page"), seq0, seq1):
        if edited is not None:
            delta.extend((var, None, was))
            s[var] = tuple(edited)
    return dirty_chains, dirty_pages


def mirror_calls(ops, mirror: set, pid_set: set, typed: bool, n: int, within) -> tuple:
    """The device-page map's mirror of the allocator's free set brought up to date with the
    allocator's logged calls `ops` ((released, pages) each, in order: a release's pages of
    PageIds join it, an allocation's leave it); (moved, typed): the pages the calls moved (the
    first call's own new set, no copy: most syncs follow one call; None for no call) and
    whether the mirror is still typed (`typed`, and each released list's items exact ints
    below n: `within(pages, n, 0)`, loops' ints_within or its twin). The map's `_free` and
    `py_device_sync` both apply the calls through it."""
    moved = None
    for released, pages in ops:
        got = pid_set.intersection(pages)       # (the pages of the call that are pages)
        if released:
            mirror.update(got)
            # (the call's own objects, which may equal a page id without being an exact int,
            # TRUE for 1: a release's are tested while the mirror is typed; any other item
            # makes it untyped)
            typed = typed and within(pages, n, 0)
        else:
            mirror.difference_update(got)
        if moved is None:
            moved = got
        else:
            moved |= got
    return moved, typed


def py_device_sync(m, ctx: tuple):
    """The device-page map's sync past its quiet test (device_pages.py's
    IncrementalDevicePagesMap.sync: walk_journaled's `_enter` or `_leave_subtree` over the
    journaled nodes, with `_id` and `_release_id`; `_free`, `_grow`, `_commit`) on its common
    path, in one call: the same reads and writes in the same order. None, before anything is
    written, where the path does not apply (journaled nodes that the walk would not take in
    one pass, all detached or all below the root or a mapped node; an allocation logged or
    pending; no mirror, or an overflowed journal): the map's own sync runs then. A mirror
    whose size disagrees with the allocator's free count is `m._rebuilt()`'s, growth is
    `m._grow`'s and a commit of another shape `m._commit`'s: the map's own methods, called
    where its sync calls them. ctx: (journal, ops, node_pages, cid, root, cache, pending,
    pid_set, dev, s, none, missing, spare, heappush, heappop, UNUSED, Fcn, KK_INT), what the map
    holds for its life, pid_set the set of PageIds, never written after the map made it (the native form
    reads and writes m's attributes in m's own dict, vars(m), taken at each call: the map gives
    it the ctx only while no class of the map defines a data descriptor of their names nor
    overrides the methods this inlines; where m holds no `_padded` of its own it builds a
    chain's page row as the map's `_padded` does, padded_row(m._pad, pages, Fcn, KK_INT), and
    where m.pids_by_value says pid_set is set(range(m.n_pids)) it decides a page's membership
    in pid_set by its value)."""
    journal, ops, node_pages, cid, root, cache, pending, pid_set, dev, s, none, missing, spare, push, pop, \
        unused, _, _ = ctx
    mirror = m.mirror
    if mirror is None or ops.overflowed or cache.alloc_log or pending:
        return None
    # (walk_journaled's first pass over each journaled node: every one detached, which that
    # pass leaves in the journal's order (`_leave_subtree`: an eviction's), or every one in
    # the tree below the root or a mapped node, which its second pass enters in that order
    # (`_enter`, below); a node's parent is a journaled field, read without a side effect)
    leaving = None
    for x in journal:
        if x is not root:
            par = x.parent
            if leaving is None:
                leaving = par is None
            elif leaving != (par is None):
                return None
            if par is not None and par is not root and par not in node_pages:
                return None
    changed: dict = {}
    m._changed = changed
    todo = list(journal)
    journal.clear()
    for x in todo:
        if x is root:
            continue
        if leaving:
            # (_leave_subtree: each mapped node of the subtree unmapped, its chain ending and
            # its id given back, `_release_id`)
            stack = [x]
            while stack:
                y = stack.pop()
                if node_pages.pop(y, None) is not None:
                    c = cid.pop(y)
                    push(spare, c)
                    changed[c] = unused
                stack.extend(y.children.values())
            continue
        pages = tuple(x.device) if x.device is not None else (none,) * x.n     # (_enter)
        if node_pages.get(x) == pages:
            continue
        node_pages[x] = pages
        c = cid.get(x)
        if c is None:
            # (`_id`: the lowest id given back, else the next new one)
            if spare:
                c = pop(spare)
            else:
                c = m.next_id
                m.next_id = c + 1
            cid[x] = c
        changed[c] = (0, pages)
    if not ops:                                                 # (_free)
        free = s["free"]
    else:
        moved, typed = mirror_calls(ops, mirror, pid_set, m.mirror_typed, m.n_pids, py_ints_within)
        del ops[:]
        if len(mirror) != dev.free:
            mirror, typed = m._rebuilt()
            moved = None
        m.free_moved = moved
        m.mirror_typed = typed
        free = m.free_built = frozenset(mirror)
    longest = 1
    for _, pages in changed.values():
        if len(pages) > longest:
            longest = len(pages)
    if m.next_id - 1 > m.n_chains or longest > m.max_len:
        m._grow(m.next_id - 1, longest)
    # (_commit, on a state of the current shape whose free and mixed are written: most syncs)
    n, L = m.n_chains, m.max_len
    old_free = s.get("free", missing)
    if m._shape != (n, L) or old_free is missing or "mixed" not in s:
        return m._commit(changed, free)
    delta = m.delta = []
    free_changed = old_free is not free and old_free != free
    moved = m.free_moved if free_changed else None
    dirty_chains, dirty_pages = py_commit_rows(changed, m.rows, m.holders, m.page_rows, s, delta, m._empty,
                                               m._padded, none, moved)
    if free_changed:
        delta.extend(("free", None, old_free))
        s["free"] = free
        if moved is None:
            dirty_pages |= old_free ^ free
    return delta, {"Chains": dirty_chains, "PageIds": dirty_pages}


def py_slot_owner_breach(names, slots, tree_refs: dict, backup_refs: dict, pf_refs: dict):
    """SlotInOneOwner's element-local test over the spec slots of `slots` (those past
    len(names) skipped), in their order: slot h with t tree references, f backup and fetch
    references and state st = names[h - 1] is owned as its state says: "idle" t = f = 0,
    "reserved" t = 0 and f = 1, any other t = 1 and f = 0. None when every one is, else the
    first that is not, as (h, st, t, f)."""
    for h in slots:
        if h > len(names):
            continue
        t = tree_refs.get(h, 0)
        f = backup_refs.get(h, 0) + pf_refs.get(h, 0)
        st = names[h - 1]
        ok = (t == 0 and f == 0) if st == "idle" else (t == 0 and f == 1) if st == "reserved" else (t == 1 and f == 0)
        if not ok:
            return h, st, t, f
    return None


def py_held_once_or_free(pages, holders: dict, free) -> bool:
    """NoDoubleAllocation's test of the dirty device pages: every page p, held by
    k = holders.get(p, 0) positions, has 0 <= k <= 1 and is free exactly when k is 0."""
    for p in pages:
        k = holders.get(p, 0)
        if k > 1 or k < 0 or (k == 1) == (p in free):
            return False
    return True


def py_chains_typed(chains, rows: dict, built: dict, rot, ln, page, host, empty, L, n_ids, cp, no_rot, none,
                    unused) -> bool:
    """TypeOK's test of each chain c of `chains` on a state of a chain map's rows (device
    pages' type_ok_inc): rot[c - 1] an exact int equal to no_rot or in 0..cp-1, len n an
    exact int in 0..L, host row `empty`, and a page row that is `empty` or the row `built[c]`
    the map built from its pages rows.get(c, unused)[1], n of them, each an exact int of
    0..n_ids-1 or `none`. False at the first chain that fails, else True."""
    for t, what in ((rows, "rows"), (built, "built")):
        if type(t) is not dict:
            raise TypeError(f"chains_typed: {what} must be a dict, not {type(t).__name__}")
    for c in chains:
        i = c - 1
        n, r = ln[i], rot[i]
        if not (type(r) is int and (r == no_rot or 0 <= r < cp) and type(n) is int and 0 <= n <= L):
            return False
        row = page[i]
        if host[i] is not empty:
            return False
        if row is empty:
            continue    # (the shared all-NoPage row: NoPage at each position)
        pages = rows.get(c, unused)[1]
        if not (row is built.get(c) and len(pages) == n and py_ints_within(pages, n_ids, none)):
            return False
    return True


def py_chains_padded(chains, rows, hosts, lens, built: dict, empty, chain_rows: dict, unused, beyond) -> bool:
    """NoDoubleAllocation's test that no position past a chain's length is used, for each chain
    c of `chains` (no_double_allocation_inc): passed over where the state holds the row the
    map built (`built.get(c, empty)`), the host row `empty` and the count of the chain's pages
    chain_rows.get(c, unused)[1] as its length; else beyond(page row's dict, host row's dict,
    len) decides. False at the first chain where a position is used, else True."""
    for t, what in ((built, "built"), (chain_rows, "chain_rows")):
        if type(t) is not dict:
            raise TypeError(f"chains_padded: {what} must be a dict, not {type(t).__name__}")
    for c in chains:
        i = c - 1
        if rows[i] is built.get(c, empty) and hosts[i] is empty and lens[i] == len(chain_rows.get(c, unused)[1]):
            continue
        if beyond(rows[i].d, hosts[i].d, lens[i]):
            return False
    return True


def py_steps_table(table: dict, fallback):
    """A callable (action, fields): table.get(action) when that is not None, else
    fallback(action, fields) (a map's bind over its table of compound steps)."""
    if type(table) is not dict:
        raise TypeError(f"steps_table: table must be a dict, not {type(table).__name__}")
    if not callable(fallback):
        raise TypeError("steps_table: fallback must be callable")
    get = table.get

    def bind(action, fields):
        steps = get(action)
        if steps is not None:
            return steps
        return fallback(action, fields)
    return bind


def py_quiet_probe(before: tuple, holder, name: str, after: tuple):
    """A callable (): True when each of `before`, then getattr(holder, name), then each of
    `after` is false (the first true one ends the test: False); a map's quiet test."""
    for what, x, t in (("before", before, tuple), ("name", name, str), ("after", after, tuple)):
        if type(x) is not t:
            raise TypeError(f"quiet_probe: {what} must be a {t.__name__}, not {type(x).__name__}")

    def quiet():
        return not any(before) and not getattr(holder, name) and not any(after)
    return quiet


def py_overwrite(d: dict, values) -> None:
    """d[i] = values[i] for each index i of the sequence values (no delta: a new row's copy)."""
    for i, v in enumerate(values):
        d[i] = v


def py_padded_row(pad: dict, pages, fcn, kk):
    """fcn(d, kk) for d a copy of the dict pad with d[i] = pages[i] for each index i of the
    sequence pages (IncrementalRows._padded: a chain's page row, the all-NoPage row's dict of
    positions 0..MaxLen-1 with the chain's pages over its first positions)."""
    if type(pad) is not dict:
        raise TypeError(f"padded_row: pad must be a dict, not {type(pad).__name__}")
    d = pad.copy()
    py_overwrite(d, pages)
    return fcn(d, kk)


def py_tree_nodes(root) -> list:
    """The nodes under root, as a list in the order radix.Tree.nodes() yields them (the
    from-scratch HostTier map's walk reads them so: its pages are numbered in that order):
    the last child first, each node before the nodes under it. Every node's children must be
    a dict (TypeError otherwise)."""
    out = []
    stack: list = []
    x = root
    while True:
        children = x.children
        if type(children) is not dict:
            raise TypeError(f"tree_nodes: a node's children must be a dict, not {type(children).__name__}")
        stack.extend(children.values())
        if not stack:
            return out
        x = stack.pop()
        out.append(x)


def py_byte_names(raw: bytes, table) -> tuple:
    """(table[b] for each byte b of raw) as a tuple: the from-scratch HostTier map's slot
    names of the host's state bytes. raw exact bytes, table a list or a tuple (TypeError
    otherwise); a byte past the table: its IndexError."""
    if type(raw) is not bytes:
        raise TypeError(f"byte_names: raw must be bytes, not {type(raw).__name__}")
    if type(table) is not list and type(table) is not tuple:
        raise TypeError(f"byte_names: table must be a list or a tuple, not {type(table).__name__}")
    return tuple(map(table.__getitem__, raw))


def py_pending_allocs(log: dict, allocated, held: set, cp, none, rows: list) -> None:
    """The from-scratch chain map's pending allocations (CPReplayMap._rows, after the walk of
    the tree): newest first (a page freed and handed out again belongs to the newer one),
    each entry log[aid] = (base, start, pages) of the runtime's allocation log, a tuple of 3
    (TypeError otherwise), keeps those of its pages still allocated and in no row yet
    (`allocated`, a set; `held`, the set of those in rows, updated), `none` for the others;
    an entry left with none of its pages is dropped from the log (inserted or freed by now),
    any other appended to rows as (("alloc", aid), (base + start) % cp, its pending pages).
    log a dict, held a set, rows a list (TypeError otherwise)."""
    for o, t, what in ((log, dict, "log"), (held, set, "held"), (rows, list, "rows")):
        if type(o) is not t:
            raise TypeError(f"pending_allocs: {what} must be a {t.__name__}, not {type(o).__name__}")
    for aid in sorted(log, reverse=True):
        entry = log[aid]
        if type(entry) is not tuple or len(entry) != 3:
            raise TypeError(f"pending_allocs: allocation {aid!r}'s entry must be a tuple (base, start, pages)")
        base, start, pages = entry
        pending = [p if p in allocated and p not in held else none for p in pages]
        if all(p == none for p in pending):
            del log[aid]       # inserted (or freed) by now
            continue
        held.update(p for p in pending if p != none)
        rows.append((("alloc", aid), (base + start) % cp, pending))


def py_chain_walk(roots, bases, cp, none) -> tuple[list, set]:
    """The from-scratch chain map's walk of the tree (CPReplayMap._rows): (rows, held). From
    each of `roots` (the root's children, in order) with its subtree's rotation base (bases,
    as many: an int, or None for no rotation), in preorder, a node's children in order:
    rows gets (node, its rot, its pages) for each node, its pages list(node.device) (its
    device pages, each then in `held`) or n times `none` for a node with no device copy
    (`device` None), its rot (base + depth) % cp, depth the pages above it in its subtree
    (`none` where base is None). roots and bases must be lists or tuples of one length, a
    node's children a dict (TypeError otherwise)."""
    for o, what in ((roots, "roots"), (bases, "bases")):
        if type(o) is not list and type(o) is not tuple:
            raise TypeError(f"chain_walk: {what} must be a list or a tuple, not {type(o).__name__}")
    if len(roots) != len(bases):
        raise TypeError("chain_walk: roots and bases must be as many")
    rows: list = []
    held: set = set()
    stack = [(x, 0, base) for x, base in zip(reversed(roots), reversed(bases))]
    while stack:
        x, depth, base = stack.pop()
        device = x.device
        if device is not None:
            pages = list(device)
            held.update(pages)
        else:
            pages = [none] * x.n
        rows.append((x, none if base is None else (base + depth) % cp, pages))
        children = x.children
        if type(children) is not dict:
            raise TypeError(f"chain_walk: a node's children must be a dict, not {type(children).__name__}")
        below = depth + x.n
        stack.extend((c, below, base) for c in reversed(children.values()))
    return rows, held


def py_chain_rows(rows: dict, n: int, pad: dict, empty, fcn, kk, none) -> tuple:
    """The from-scratch chain map's variables over its chains 1..n (CPReplayMap.state):
    (rot, len, page, built). Chain c's entry rows.get(c, (none, [])), a tuple (its rot, its
    pages: a list or a tuple; TypeError otherwise), gives rot[c - 1] and len[c - 1] (the
    pages' count); its page row is `empty` for a chain of no page or of `none` pages only,
    else padded_row(pad, pages, fcn, kk); built[c] = (row, pages) for a chain with pages. The
    three variables are tuples. n: an exact int in [0, 2**31) (TypeError otherwise)."""
    if type(rows) is not dict:
        raise TypeError(f"chain_rows: rows must be a dict, not {type(rows).__name__}")
    if type(n) is not int or not 0 <= n < 1 << 31:
        raise TypeError("chain_rows: n must be an int in [0, 2**31)")
    rot, ln, page, built = [], [], [], {}
    unused = (none, [])
    for c in range(1, n + 1):
        entry = rows.get(c, unused)
        if type(entry) is not tuple or len(entry) != 2:
            raise TypeError(f"chain_rows: chain {c}'s entry must be a tuple (rot, pages)")
        r, pages = entry
        if type(pages) is not list and type(pages) is not tuple:
            raise TypeError(f"chain_rows: chain {c}'s pages must be a list or a tuple, not {type(pages).__name__}")
        rot.append(r)
        ln.append(len(pages))
        if pages:
            row = empty if pages.count(none) == len(pages) else py_padded_row(pad, pages, fcn, kk)
            page.append(row)
            built[c] = (row, pages)
        else:
            page.append(empty)
    return tuple(rot), tuple(ln), tuple(page), built


def py_ints_within(pages, n: int, none: int) -> bool:
    """Whether every item of pages is an exact int in 0..n-1 or equal to `none` (a device
    page row's pages: PageIds or NoPage; a bool or a float equal to one is not). n and none
    are integers of 64 bits (what has `__index__`; TypeError or OverflowError otherwise, as
    the C loop converts them)."""
    n, none = operator.index(n), operator.index(none)
    if not (-2 ** 63 <= n < 2 ** 63 and -2 ** 63 <= none < 2 ** 63):
        raise OverflowError("int too big to convert")
    for p in pages:
        if p.__class__ is not int or not (0 <= p < n or p == none):
            return False
    return True


def py_slot_changes(hs, raw, names, table, slot_page: dict, dirty: set) -> set:
    """The host slots whose state changed (runtime slots hs, their new states the bytes of
    raw): each one's name rewritten (names[h] = table[raw[h]]), its spec slot h + 1 added to
    dirty; returns the nodes holding one of them (slot_page.get(h), None left out)."""
    held = set()
    for h in hs:
        names[h] = table[raw[h]]
        dirty.add(h + 1)
        x = slot_page.get(h)
        if x is not None:
            held.add(x)
    return held


def py_first_not_in_state(names, slots, state):
    """The first spec slot h of slots that is no slot (not 0 < h <= len(names)) or whose
    state names[h - 1] is not `state`; None when every one is `state`."""
    n = len(names)
    for h in slots:
        if not 0 < h <= n or names[h - 1] != state:
            return h
    return None


def py_variables_of(delta) -> set:
    """The variables a sync's delta wrote: each write's first item (a delta is flat, three
    items a write)."""
    if type(delta) is not list and type(delta) is not tuple:
        raise TypeError(f"variables_of: a delta is a list or a tuple, not {type(delta).__name__}")
    return set(delta[0::3])


def py_first_where(d, pos, want: bool):
    """The first q of pos whose value d[q] is true when `want` is, false when it is not (the
    guards' test of a node's pages: one with a copy in flight, one without a host copy);
    None when there is none."""
    want = bool(want)
    for q in pos:
        if bool(d[q]) is want:
            return q
    return None


def py_nodes_at(keys, positions, L) -> set:
    """The nodes of the positions below L (keys[p] = (node, page index))."""
    return {keys[p][0] for p in positions if p < L}


def py_prefix_breach(host, pos, q):
    """WriteThroughPrefix along one node's pages in tree form: each page of pos (in order)
    has the page before it as its parent, the first page q (None: no parent page). The first
    (p, parent) with host[p] != 0 and host[parent] == 0, or None."""
    for p in pos:
        if q is not None and host[p] != 0 and host[q] == 0:
            return p, q
        q = p
    return None


def py_vacate(holes, L: int) -> tuple[dict, int]:
    """The pages at positions `holes` (distinct, each < L) leave the prefix 0..L-1 of
    in-tree positions: taken in decreasing order, each hole is filled by the page at the last
    position, which becomes a spare one (a page moved before may move again: a filled hole
    can become the last). Returns (origin, the new L): origin maps each filled position to
    the position its page came from, in the order the holes were filled."""
    origin: dict = {}
    for p in sorted(holes, reverse=True):
        last = L - 1
        if p != last:
            origin[p] = origin.pop(last, last)
        L = last
    return origin, L


def py_renumber(origin: dict, keys: list, npos: dict, dirty: set) -> None:
    """Each page `vacate` moved (origin: q -> src) takes its new position: keys[q] =
    keys[src] (its (node, page index)), npos[node][index] = q; q is dirty when src was (a
    page's own change moves with it)."""
    for q, src in origin.items():
        k = keys[q] = keys[src]
        npos[k[0]][k[1]] = q
        if src in dirty:
            dirty.add(q)


def py_remove_pages(cols, holes: list, L0: int, keys: list, npos: dict, delta: list, dirty: set,
                    slots: set) -> int:
    """The pages at positions `holes` leave the prefix 0..L0-1 (the incremental HostTier
    map's removal), over every column (var, d, spare value, slot reference counts or None)
    of cols in one call: `vacate` (where each filled hole's page comes from, the new L), then
    for each column, in order, the slot references of the pages at holes released (refs not
    None: `release`), the moved pages' values written (`move`) and the positions L..L0-1 made
    spare (`spare`: range(L, L0) made first, once for every column); then the moved pages
    renumbered (`renumber`), keys cut to L and range(L, L0) added to dirty. Returns L."""
    origin, L = py_vacate(holes, L0)
    spares = range(L, L0)
    for var, d, v, refs in cols:
        if refs is not None:
            py_release(d, holes, refs, slots)
        py_move(d, origin, var, delta)
        py_spare(d, L, L0, v, var, delta)
    py_renumber(origin, keys, npos, dirty)
    del keys[L:]
    dirty.update(spares)
    return L


def py_walk_journaled(todo, root, mapped, enter, leave) -> None:
    """Visit journaled nodes parents first: a node is in the tree iff its parent is the root
    or a mapped node (`par in mapped`), so `enter(x)` maps it; `leave(x)` takes a detached
    node (its parent link cut) with whatever hangs below it, and so what makes no progress
    (it hangs below a detached node, outside the tree)."""
    pending = []
    for x in todo:
        if x is root:
            continue
        if x.parent is None:
            leave(x)
        else:
            pending.append(x)
    while pending:
        later = []
        for x in pending:
            par = x.parent
            if par is None:
                leave(x)
            elif par is root or par in mapped:
                enter(x)
            else:
                later.append(x)
        if len(later) == len(pending):
            for x in later:
                leave(x)
            break
        pending = later


def py_remap_node(ctx: tuple, step: tuple, x) -> None:
    """The incremental HostTier map's re-mapping of one node x (host_tier_inc's map): its
    pages' values written where they differ from what was last written for it.

    ctx, the map's containers and functions, which live as long as it does: (npos: node ->
    its pages' positions, by_id: node id -> node, up: node -> its parent, kids: node -> its
    children, nval: node -> its values last written, slot_changed: the nodes holding a slot
    whose state changed, sync_backup: node id -> the slots a blocking copy writes,
    slot_page: runtime slot -> node holding it, node_cols: ((var, its dict), ...) of the
    node-level variables dev, stor, hits, loadReq, slot_cols: ((var, its dict, its slot
    reference counts), ...) of host and backupOp, in_flight: `host_write_in_flight`,
    node_slots: the per-page slot values (host_tier.node_slots), resize(m, x, pos, n): x's
    positions made n, loading_req(m, x): loadReq of x's pages while x.loading is not None).
    step, this sync's: (delta, changed: node -> its values before the sync, dirty:
    positions, slots: spec slots, m: the map, resize's and loading_req's first argument).

    In order: x's positions (npos.setdefault), by_id, its parent link (up, kids) when its
    parent changed, its positions resized when its page count changed; its values, node-level
    (x.device is not None, bool(x.stored), min(x.hit_count, 2), loadReq) and per-page slots
    (tuple(x.host) or None, tuple(sync_backup.get(x.id)) or None, a device->host copy in
    flight: bool(x.inflight) and bool(in_flight(x))); nothing more when they equal nval[x]
    (not resized) and no slot of x changed state (x not in slot_changed). Else x's values
    before go to changed (the first sync's write kept), nval[x] = the values, x's positions
    all dirty when x is in slot_changed or new, each node-level variable's positions written
    (`fill`: all four when x is new or resized, else those that differ or changed type), and, when the
    slot values differ (or x is new, resized or in slot_changed), slot_page[h] = x for each h
    of x.host, then host's and backupOp's per-page values (node_slots(x.host, the blocking
    copy's slots, len(pos), backing)) written (`write_slots`)."""
    npos, by_id, up, kids, nval, slot_changed, sync_backup, slot_page, node_cols, slot_cols, in_flight, \
        node_slots, resize, loading_req = ctx
    delta, changed, dirty, slots, m = step
    pos = npos.setdefault(x, [])
    xid = x.id
    by_id[xid] = x
    par, was = x.parent, up.get(x)
    if par is not was:
        if was in kids:
            kids[was].discard(x)
        up[x] = par
        kids.setdefault(par, set()).add(x)
    n = x.n
    resized = len(pos) != n
    if resized:
        resize(m, x, pos, n)
    dev = x.device is not None
    lq = 0 if x.loading is None else loading_req(m, x)
    hits = x.hit_count
    node_vals = (dev, bool(x.stored), hits if hits < 2 else 2, lq)
    hs = x.host
    pending = sync_backup.get(xid)
    # (in_flight is not asked of a node with nothing in flight: most nodes)
    backing = bool(x.inflight) and bool(in_flight(x))
    slot_vals = (tuple(hs) if hs is not None else None, tuple(pending) if pending is not None else None, backing)
    old = nval.get(x)
    forced = x in slot_changed
    new = (node_vals, slot_vals)
    if old is not None and not resized and old == new:
        if not forced:
            return
    else:
        changed.setdefault(x, old)      # (the values before the sync: the first write's)
    nval[x] = new
    if forced or old is None:
        # a slot this node's pages hold changed state: what reads slot[host[n]] of these
        # pages (PendingLoadLocked) must be rechecked on them; a new node's are all new. (Made
        # dirty before the writes, which the native twin then makes without adding them.)
        dirty.update(pos)
    if resized or old is None:
        for (var, d), v in zip(node_cols, node_vals):
            py_fill(d, pos, v, var, delta, dirty)
    elif old[0] != node_vals:
        # only the node-level values that changed (one event changes one or two)
        for (var, d), a, b in zip(node_cols, old[0], node_vals):
            if a != b or type(a) is not type(b):
                py_fill(d, pos, b, var, delta, dirty)
    if not (resized or forced or old is None or old[1] != slot_vals):
        return
    if hs is not None:
        for h in hs:
            slot_page[h] = x
    # (each page whose slot changed: its slot reference moves from old to v, 0 being none,
    # and both slots are dirty)
    for (var, d, refs), values in zip(slot_cols, node_slots(hs, pending, len(pos), backing)):
        py_write_slots(d, pos, values, var, refs, delta, dirty, slots)


def py_unmap_node(ctx: tuple, step: tuple, unmapping: tuple, x) -> None:
    """The incremental HostTier map's unmapping of node x, which left the tree (ctx and step:
    remap_node's; unmapping, this sync's: (keys: position -> (node, page index), cols:
    remove_pages' columns, loading_nodes: rid -> the nodes whose load-back it is, left: the
    nodes unmapped)). In order: x appended to left; m.req_dirty set when x.id is in by_id (a
    request whose lock holds x now has it out of the tree); x.id out of by_id, x out of nval, up
    and its parent's kids (when the parent still has them: not when it left first, a
    subtree's unmapping) and kids; its positions (npos.pop(x)), when it has any, out of the
    prefix (`remove_pages`, m.L its new L); while it is loading, x out of its request's
    loading_nodes set (getattr(x.loading, "rid", None))."""
    npos, by_id, up, kids, nval = ctx[:5]
    delta, _, dirty, slots, m = step
    keys, cols, loading_nodes, left = unmapping
    left.append(x)
    xid = x.id
    if xid in by_id:
        m.req_dirty = True
    by_id.pop(xid, None)
    nval.pop(x, None)
    par = up.pop(x, None)
    if par in kids:
        kids[par].discard(x)
    kids.pop(x, None)
    holes = npos.pop(x, ())
    if holes:
        m.L = py_remove_pages(cols, holes, m.L, keys, npos, delta, dirty, slots)
    if x.loading is not None:
        loading_nodes.get(getattr(x.loading, "rid", None), set()).discard(x)


def py_unmap_subtree(ctx: tuple, step: tuple, unmapping: tuple, x) -> None:
    """x, detached from the tree, and every node below it, visited as a stack pops them (each
    node's children pushed in their dict's order): each mapped one (in npos, ctx[0])
    unmapped (`unmap_node`)."""
    npos = ctx[0]
    stack = [x]
    while stack:
        y = stack.pop()
        if y in npos:
            py_unmap_node(ctx, step, unmapping, y)
        stack.extend(y.children.values())


def py_remap_journaled(todo, root, ctx: tuple, step: tuple, unmapping: tuple) -> None:
    """`walk_journaled` over ctx[0] (npos: the mapped nodes) with each node in the tree
    re-mapped by `remap_node(ctx, step, x)` and each detached one unmapped with what hangs
    below it (`unmap_subtree(ctx, step, unmapping, x)`): a sync's re-mapping in one call."""
    py_walk_journaled(todo, root, ctx[0], partial(py_remap_node, ctx, step),
                      partial(py_unmap_subtree, ctx, step, unmapping))


#: whether a device->host copy of node v's host slots is in flight: the runtime's own
#: `host_write_in_flight` (hicache.runtime.cache), which defines it, is the twin; the native
#: one makes the same reads in the same order (what remap_node's context calls, for each node
#: with an op in flight)
py_host_write_in_flight = _runtime_host_write_in_flight


def py_shifted(slots) -> list:
    """[h + 1 for h in slots]: runtime slots as spec slots (NoSlot is 0)."""
    return [h + 1 for h in slots]


def py_tree_pages(nodes, sync_backup: dict, load_req_of, node_slots) -> tuple:
    """The from-scratch HostTier map's walk of the tree (host_tier's `state`): over `nodes`,
    the tree's nodes in preorder (a parent before its children), (runs, dev, stor, hits,
    loadreq, host, backup, parent, loading, last_page). Per node i: runs[i] its pages (`n`, an exact int
    in [0, 2**61): TypeError otherwise), dev[i] whether it has a device copy, stor[i]
    bool(stored), hits[i] min(hit_count, 2), loadreq[i] load_req_of(node) for a node with a
    pending load (`loading` not None), else 0. Per page, in the nodes' order: host and backup
    (`node_slots` of its host slots, its blocking copy's slots sync_backup.get(id), and
    whether a device->host write of them is in flight: the map's node_slots, which a test may
    replace by a wrong one), parent its parent page (the page
    before it in its node; a node's first page's, the last page of its parent node, -1
    under the root or a node outside the walk). `loading`: whether some node with pages has
    a loadreq other than 0; `last_page`: each node's id -> its last page (a node of no pages:
    the page before it), the walk's nodes' ids. sync_backup a dict (TypeError otherwise)."""
    if type(sync_backup) is not dict:
        raise TypeError(f"tree_pages: sync_backup must be a dict, not {type(sync_backup).__name__}")
    runs, dev, stor, hits, loadreq, host, backup, parent = [], [], [], [], [], [], [], []
    last_page: dict = {}        # node id -> its last page
    start = 0                   # the node's first page
    loading = False
    for x in nodes:
        p = x.parent
        n = x.n
        if type(n) is not int or not 0 <= n < 1 << 61:
            raise TypeError("tree_pages: a node's n must be an int in [0, 2**61)")
        lq = 0
        if x.loading is not None:
            # whatever the node's device state: a load whose device pages were dropped under
            # it is still reading its host slots (PendingLoadLocked)
            lq = load_req_of(x)
            loading = loading or (lq != 0 and n != 0)
        if n:
            parent.append(last_page.get(p.id, -1) if p is not None else -1)
            parent.extend(range(start, start + n - 1))
        runs.append(n)
        dev.append(x.device is not None)
        stor.append(bool(x.stored))
        hits.append(min(x.hit_count, 2))
        loadreq.append(lq)
        hv, bv = node_slots(x.host, sync_backup.get(x.id), n, py_host_write_in_flight(x))
        host.extend(hv)
        backup.extend(bv)
        start += n
        last_page[x.id] = start - 1
    return runs, dev, stor, hits, loadreq, host, backup, parent, loading, last_page


def _fast_seq(o, fn: str, what: str) -> None:
    if type(o) is not tuple and type(o) is not list:
        raise TypeError(f"{fn}: {what} must be a tuple or list, not {type(o).__name__}")


def py_one_owner_breach(names, tree_vals, backup_vals, pf_vals):
    """SlotInOneOwner over every spec slot h of 1..len(names), in order, from the state's
    values: the tree's references to h among `tree_vals` (host[p] of the tree's pages), the
    other references among `backup_vals` and `pf_vals` (backupOp, pfSlot); NoSlot = 0, and
    any value naming no slot checked, counted for none. The first breach of the spec's CASE
    (py_slot_owner_breach's) as (h, names[h - 1], t, f), or None; NotImplemented when a value
    is no exact int (a TRUE or a 2.0 names a slot by equality: the caller's generic count).
    Tuples or lists each (TypeError otherwise)."""
    for what, v in (("names", names), ("tree_vals", tree_vals), ("backup_vals", backup_vals), ("pf_vals", pf_vals)):
        _fast_seq(v, "one_owner_breach", what)
    for vals in (tree_vals, backup_vals, pf_vals):
        for v in vals:
            if type(v) is not int:
                return NotImplemented
    # (the generic count: the incremental form's loops, NoSlot = 0 not counted)
    tree: dict = {}
    other: dict = {}
    py_count_pages(tree, tree_vals, 1, None, 0)
    py_count_pages(other, backup_vals, 1, None, 0)
    py_count_pages(other, pf_vals, 1, None, 0)
    return py_slot_owner_breach(names, range(1, len(names) + 1), tree, other, {})


def py_parent_breach(parent, host: dict):
    """WriteThroughPrefix in tree form over a state's pages: page n's parent page is
    parent[n] (< 0: none). The first (n, p), in page order, with p >= 0, host[n] != 0 and
    host[p] == 0; None when there is none. A tuple or list and a dict (TypeError otherwise);
    a page missing from host: KeyError."""
    _fast_seq(parent, "parent_breach", "parent")
    if type(host) is not dict:
        raise TypeError(f"parent_breach: host must be a dict, not {type(host).__name__}")
    for n, p in enumerate(parent):
        if p >= 0 and host[n] != 0 and host[p] == 0:
            return n, p
    return None


def _padded_dict(pad, size: int, fn: str) -> dict:
    """A copy of pad when it is a dict of `size` entries (a dict of pages 0..size-1 in order,
    the result's keys: its values are then written over the copy's), else a new dict; pad
    None or a dict (TypeError otherwise)."""
    if pad is None:
        return {}
    if type(pad) is not dict:
        raise TypeError(f"{fn}: pad must be a dict or None, not {type(pad).__name__}")
    return pad.copy() if len(pad) == size else {}


def py_spread(values: list, runs: list, spare, pad=None) -> dict:
    """{page: value} over pages numbered from 0: values[i] at each of the next runs[i] pages
    (an exact int >= 0: TypeError otherwise), then `spare` at one more page; OverflowError
    past 2**61 pages (no tree has as many). Lists both, of one length (ValueError
    otherwise). The from-scratch HostTier map's per-page functions of a node-level value
    (host_tier's `_spread`). `pad`: a dict of the result's keys in order (the flat function
    over the same pages), copied and written over (`_padded_dict`: a copy is one block, ~40
    instructions a page fewer than each page's insert)."""
    for what, v in (("values", values), ("runs", runs)):
        if type(v) is not list:
            raise TypeError(f"spread: {what} must be a list, not {type(v).__name__}")
    if len(values) != len(runs):
        raise ValueError("spread: values and runs differ in length")
    total = 0
    for r in runs:
        if type(r) is not int or r < 0:
            raise TypeError("spread: runs must hold exact ints >= 0")
        total += r
        if total > 1 << 61:
            raise OverflowError("spread: past 2**61 pages")
    d = _padded_dict(pad, total + 1, "spread")
    p = 0
    for v, r in zip(values, runs):
        for _ in range(r):
            d[p] = v
            p += 1
    d[p] = spare
    return d


def py_enumerated(values: list, pad=None) -> dict:
    """dict(enumerate(values)) of a list (TypeError otherwise): the from-scratch HostTier
    map's per-page functions of a per-page value (host_tier's `_fn0`); `pad` as spread's."""
    if type(values) is not list:
        raise TypeError(f"enumerated: values must be a list, not {type(values).__name__}")
    d = _padded_dict(pad, len(values), "enumerated")
    for p, v in enumerate(values):
        d[p] = v
    return d


def py_node_slots(hs, pending, n: int, backing: bool) -> tuple[list[int], list[int]]:
    """(host[p] per page, backupOp[p] per page) of the n pages of a node with host slots `hs`
    (or None) and, for a blocking write-back copy, the slots `pending` it is being copied to
    (or None); `backing`: a device->host write of hs is in flight (`host_write_in_flight`: read
    from the op, not from the slots' RESERVED state, since a slot state written wrong, SYNCED
    while the copy still runs or RESERVED after it ended, is what the check is for). n: an
    exact int >= 0, a node's page count (TypeError otherwise).

    The slots under an in-flight device->host write are backupOp, not host: the runtime
    records `node.host` when the write starts, the spec when it ends. (host_tier's
    node_slots; the native one is also what remap_node computes inline, without the lists,
    when its context's node_slots is it.)"""
    if type(n) is not int or n < 0:
        raise TypeError("node_slots: n must be an int >= 0")
    if n >= 1 << 61:
        raise OverflowError("node_slots: n is past 2**61 pages")
    if hs is not None:
        if len(hs) < n:
            raise ValueError(f"a node of {n} pages holds {len(hs)} host slots")
        if len(hs) > n:
            hs = hs[:n]
        if not backing:                     # (the common case: every copy done)
            return shifted(hs), [0] * n
        return [0] * n, shifted(hs)
    if pending is not None:
        pending = pending[:n]
        return [0] * n, shifted(pending) + [0] * (n - len(pending))
    return [0] * n, [0] * n


def _request_rows(qtab, phase: dict, req_node: dict, by_id: dict, root, old):
    """The HostTier map's request rows when every row is a live request's (its common step):
    each slot of qtab its request's phase ("idle" for a free slot, or a request with none;
    one "idle" row when there is no slot), and the rows that differ from `old` (numbered
    from 1; a row past old's end differs), as (tuple of rows, list of numbers). None when a
    live request's locked node has left the tree (req_node.get(rid) is neither None, nor
    `root`, nor a mapped node's id in by_id): its row takes the full rebuild."""
    req = []
    for rid in qtab:
        if rid is None:
            req.append("idle")
            continue
        nid = req_node.get(rid)
        if not (nid is None or nid == root or nid in by_id):
            return None
        req.append(phase.get(rid, "idle"))
    if not req:
        req = ["idle"]
    n0 = len(old)
    changed = []
    for q, ph in enumerate(req):
        if q >= n0 or old[q] != ph:
            changed.append(q + 1)
    return tuple(req), changed


def py_request_step(qtab, phase: dict, req_node: dict, by_id: dict, root, s: dict, delta: list, dirty: set):
    """The HostTier map's request-side step when every row is a live request's: None when it
    does not apply (no `req` in s yet, or None; a true row of s["reqLen"]: a locked node out
    of the tree at the last rebuild; or one now, `_request_rows`), nothing written; else the
    rows written as `_set_scalar` writes a variable (when a row differs or their number
    changed: s["req"] replaced, ("req", None, old) recorded in delta, each changed row's
    number added to dirty), and whether their number changed (the other request variables'
    rows are then the caller's to write)."""
    old = s.get("req")
    if old is None or any(s["reqLen"]):
        return None
    rows = _request_rows(qtab, phase, req_node, by_id, root, old)
    if rows is None:
        return None
    req, changed = rows
    if changed or len(req) != len(old):
        dirty.update(changed)
        delta.extend(("req", None, old))
        s["req"] = req
    return len(req) != len(old)


def py_host_sync(m, ctx: tuple) -> tuple[list, dict]:
    """IncrementalHostTierMap.sync (host_tier_inc.py) over the map m: bring its mapped state up
    to date; (delta, dirty). ctx: what the map holds for its life and never rebinds (its
    dirty dict and the three dirty sets in it, the cache, the host slots' state view or
    None, what holds their free count, the states seen, the node journal, the state s, the
    request table, phases and locks, the mapped nodes by id, the tree's root, the cache's
    prefetch set and orphan list, the effect actions of a sync that changed nothing, the
    empty frozenset; then what the map's `_map_nodes` and `_slots` read that it never
    rebinds, the slot states' names and the idle state's byte, and those two methods of
    IncrementalHostTierMap, which the native form does
    itself, no call, while the map's class has them); what it rebinds (delta, effect_due,
    left, changed, slots_changed, L, requeue, req_dirty, pf_refs, fetching, synced_key,
    own_domains, free_seen, adjusted) is read and written on m, and its rare steps are its methods (`_slots`, `_map_nodes`,
    `_set_scalar`, `_requests`, `_zero_rows`, `constants_key`), called where the sync calls
    them. The native form (incmap.c's host_sync, and host_sync_step: the map's `sync` as a
    callable of its own) makes the same reads, writes and calls in the same order.

    The delta holds variable, key, old value of every write in turn (flat, three items a
    write; key None: a whole variable), so the states before this event can be rebuilt
    (`undo`)."""
    dirty, dirty_nodes, dirty_slots, dirty_reqs, c, states, free_of, seen, journal, s, qtab, phase, req_node, \
        by_id, root, prefetching, orphans, unchanged, empty = ctx[:19]
    delta = m.delta = []        # (this sync's one delta list: nothing it calls rebinds it)
    if m.effect_due is not unchanged:
        # (the last sync changed a node's values or a slot's state, or a node left: each
        # write of changed, slots_changed or left sets effect_due, `_slots`, `_map_nodes`;
        # each replaced only when filled: an empty one is as empty as a new one, and most
        # such syncs follow one that changed a node's values and left no node nor slot)
        if m.left:
            m.left = []
        if m.changed:
            m.changed = {}
        if m.slots_changed:
            m.slots_changed = []
        m.effect_due = unchanged
    # (the dirty sets are handed to the checks, which only read them and keep none past the
    # step: each is the map's one set for its life, emptied in place, so `dirty` holds the
    # same three always (Reqs: or None). Cleared, not replaced: a set has no free list, and a
    # new one and the old one's release cost ~0.4M instructions a kv_bytes replay, most of it
    # the request events' dirty row)
    if dirty_nodes:
        dirty_nodes.clear()
    if dirty_slots:
        dirty_slots.clear()
    if dirty_reqs:
        dirty_reqs.clear()
    if states is not None:
        # (the slots whose state changed since the last sync, one pass that also brings the
        # states seen up to date; _slots only when one did or the free count moved)
        free = free_of.free
        hs = diff_bytes(states, seen)
        if hs or free != m.free_seen or m.adjusted:
            m._slots(hs, free)
    L0 = m.L
    if journal or m.requeue:
        m._map_nodes()
        # (L moves only in a re-mapping, whose _extend and _remove write it, so len, equal
        # to L after every sync, is tested only after one: _set_scalar's test, without its call)
        if s["len"] != m.L:
            m._set_scalar("len", m.L)
    # request-side variables: rebuilt after a request event, or while a prefetch is in
    # flight or was at the last rebuild (its pseudo-requests read the tree and leave when the
    # prefetch table drops them, which a poll may do under any event); whether any prefetch
    # op may hold slots: the cache's live ones, its orphans, or ops its prefetcher still has
    # to acknowledge (their rows are then rebuilt)
    inflight = prefetching or orphans or ((p := c.prefetcher) is not None and p.acks)
    if m.req_dirty or inflight or m.pf_refs or m.L != L0:
        m.req_dirty = False
        # no prefetch row now nor at the last rebuild (a prefetch row always references a
        # slot): unless there are no rows yet, or a locked node is out of the tree, now or at
        # the last rebuild (request_step: None), every row is a live request's, whose other
        # values are all 0/FALSE (the common step: one call, which writes `req`; the others'
        # rows change only with their number); else the full rebuild
        grew = None if inflight or m.pf_refs else \
            request_step(qtab, phase, req_node, by_id, root.id, s, delta, dirty_reqs)
        if grew is None:
            m._requests()
            m.synced_key = m.constants_key()
        else:
            if grew:
                m._zero_rows(len(s["req"]))
                m.synced_key = m.constants_key()
            m.fetching = empty
    # a request's row is checked when it changed; all of them when len did (what
    # LockedNodesKept reads of the state besides the row)
    own = m.own_domains = m.L == L0
    dirty["Reqs"] = dirty_reqs if own else None
    # (dirty slots are spec slots, >= 1: NoSlot references are never counted)
    return delta, dirty


def _py_map_step(ref, name: str, own, impl):
    """A map's method `name` as a callable of its own over a weak reference to its map (the
    map's instance attribute, incmap.c's MapStep): impl(m, *args) while the class's `name` is
    `own`; while it is another (a subclass's, or one patched on the class: a profiler's
    wrapper), that one, bound to the map. ReferenceError once the map is gone."""
    def step(*args):
        m = _map_of(ref, name)
        other = _overridden(m, name, own)
        return other(*args) if other is not _NO_ATTR else impl(m, *args)
    return step


def py_host_sync_step(ref, ctx: tuple, own):
    """IncrementalHostTierMap's `sync` (`own`) as the map's own: py_host_sync(m, ctx)."""
    return _py_map_step(ref, "sync", own, lambda m: py_host_sync(m, ctx))


def py_guard_step(ref, ctx: tuple, own):
    """The HostTier map's guard dispatch (host_tier_guards.check, `own`) as the map's own
    `guard`, a callable (action, fields). ctx: host_tier_guards.guard_tables(m), which the
    native form reads as check does; the twin calls check itself."""
    return _py_map_step(ref, "guard", own, own)


def py_effect_step(ref, ctx: tuple, own):
    """The HostTier steps' frame and writes check (host_tier_guards.effect, `own`) as the map's
    own `effect`, a callable (action, fields). ctx: host_tier_guards.effect_tables(m), which
    the native form reads as effect does; the twin calls effect itself."""
    return _py_map_step(ref, "effect", own, own)


#: the cache's workers whose queued acks the worker watch judges (WorkerWatch.check's order)
WATCHED_WORKERS = ("loader", "writer", "prefetcher", "backuper")


def py_watch_probe(cache, watch, audit: type, slow):
    """The worker watch's common case (monitors/workers.py's WorkerWatch.check, `slow`, which
    judges) as a callable (name, fields): None when the cache's storage is no `audit` (the
    KeyAudit type) with a breach the watch has not reported and no worker of the cache has an
    ack queued, most events; else slow(name, fields)."""
    def probe(name, fields):
        storage = cache.storage
        due = type(storage) is audit and len(storage.breaches) > watch._seen
        if not due:
            for attr in WATCHED_WORKERS:
                w = getattr(cache, attr)
                if w is not None and w.acks:
                    due = True
                    break
        return slow(name, fields) if due else None
    return probe


def py_request_binder(binder, phase: dict, ending: set, req_node: dict, qslot: dict, qtab: list, phase_actions,
                      req_actions, backup_actions):
    """IncrementalHostTierMap.bind's request step, called (map m, action, fields) after the
    load-backs' bookkeeping: the event's request's phase and lock before it (the request
    guards' pre-state: m.phase_before, m.lock_before), the map's own binder (`binder`:
    HostTierMap.bind), then the request's slot q taken at its first phase (the first free
    one: a None of qtab, else one past its end) or freed when it leaves (qtab's trailing free
    ones dropped), the pages of its load-backs re-mapped then (m.loading_nodes into
    m.requeue), whether the request rows are to be rebuilt (m.req_dirty) and a copy's node
    re-mapped (m.by_id into m.requeue). Returns the binder's steps. `phase`, `ending`,
    `req_node`, `qslot` and `qtab` are the map's own (never rebound); what holds nodes is read
    off m at each use."""
    def take_q(m, rid) -> None:
        for q, r in enumerate(qtab):
            if r is None:
                qtab[q] = rid
                break
        else:
            qtab.append(rid)
            q = len(qtab) - 1
        qslot[rid] = q + 1
        loading = m.loading_nodes.get(rid)
        if loading:     # (a request's first match loads nothing yet: no set update at each)
            m.requeue |= loading

    def free_q(m, rid) -> None:
        q = qslot.pop(rid)
        qtab[q - 1] = None
        while qtab and qtab[-1] is None:
            qtab.pop()
        # its pages now map to "no request"; rids are never reused, so nothing maps to it again
        loading = m.loading_nodes.pop(rid, None)
        if loading:
            m.requeue |= loading

    def bind(m, action, fields):
        rid = fields.get("rid")
        if rid is None:
            m.phase_before = m.lock_before = None
        else:
            # the request's phase before the event, None when it was not live (the binder
            # moves the phases on before the guards run) ...
            m.phase_before = None if rid in ending else phase.get(rid)
            # ... and the node its lock was on (its prefix's end): a DeviceInsert moves it
            m.lock_before = req_node.get(rid)
        steps = binder(action, fields)
        if rid is not None:
            m.req_dirty = True
            if action in phase_actions:
                if rid in phase:
                    if rid not in qslot:
                        take_q(m, rid)
                elif rid in qslot:
                    free_q(m, rid)
        elif action in req_actions:
            m.req_dirty = True
        if action in backup_actions:
            x = m.by_id.get(fields.get("node"))
            if x is not None:
                m.requeue.add(x)
        return steps
    return bind


_NO_ATTR = object()


def _class_attr(cls: type, name: str):
    """The class attribute `name` as the MRO holds it (no descriptor called), _NO_ATTR without one."""
    for k in cls.__mro__:
        if name in vars(k):
            return vars(k)[name]
    return _NO_ATTR


def _map_of(ref, what: str):
    """The map a callable of its own refers to weakly (`ref`); ReferenceError once it is gone."""
    m = ref()
    if m is None:
        raise ReferenceError(f"{what}: its map is gone")
    return m


def _overridden(m, name: str, own):
    """The class's `name` bound to map m where it is not `own` (a subclass's, or one patched on
    the class: what a lookup without m's own attribute would find; None stays None, whose call
    raises), else _NO_ATTR; AttributeError where the class has none."""
    attr = _class_attr(type(m), name)
    if attr is own:
        return _NO_ATTR
    if attr is _NO_ATTR:
        raise AttributeError(f"{name}: the map's class has none")
    get = getattr(type(attr), "__get__", None)
    return attr if get is None else get(attr, m, type(m))


def py_load_bind(ref, events, slow):
    """IncrementalHostTierMap's `bind` as a callable of its own over a weak reference to its
    map (the map's instance attribute: its dict holds it): the events of a load-back's course
    (`events`) by the class's bind, slow(m, action, fields), every other by the map's request
    step, m._bind_step(m, action, fields), read off the map at each call; while the class's
    bind is not `slow` (a subclass's, or one patched on the class), that one instead, bound to
    the map. ReferenceError once the map is gone."""
    def bound(m, action, fields):
        if action in events:
            return slow(m, action, fields)
        return m._bind_step(m, action, fields)
    return _py_map_step(ref, "bind", slow, bound)


def py_tracked_class(base: type, journals: dict, name: str) -> type:
    """The class `name`, a subclass of `base` (whose writes are the generic ones) with no slots
    of its own and `_hicache_journals` a read-only copy of `journals` (field name -> the list
    of journals, the same lists: read at each write, maps add and drop theirs), whose writes
    of a field named there store as any write does, then add the object to each journal of
    the field's list, and whose deletes of such a field are refused; every other attribute is
    written and deleted as the base would. It cannot be subclassed (the C class's subclass
    would write the generic way, unjournaled)."""
    if not isinstance(base, type) or base.__setattr__ is not object.__setattr__:
        raise TypeError("tracked_class: base must be a class that sets attributes the generic way")
    if type(journals) is not dict or type(name) is not str:
        raise TypeError("tracked_class: journals must be a dict and name a str")
    if any(type(k) is not str or type(v) is not list for k, v in journals.items()):
        raise TypeError("tracked_class: journals must map field names (str) to lists")
    fixed = MappingProxyType(dict(journals))
    _store, _drop = object.__setattr__, object.__delattr__

    def __setattr__(self, field, value):
        # (a str subclass equal to a field's name is that field, as the C class's look-up finds it)
        lists = fixed.get(field) if isinstance(field, str) else None
        _store(self, field, value)
        if lists is not None:
            for j in lists:
                j.add(self)

    def __delattr__(self, field):
        if field in fixed:
            raise AttributeError(f"can't delete journaled field {field!r}")
        _drop(self, field)

    def __init_subclass__(cls, **kw):
        # (as the C class: whose subclass's writes would be the generic ones, unjournaled)
        raise TypeError("a tracked class cannot be subclassed: the subclass's writes would not journal")
    return type(name, (base,), {"__slots__": (), "_hicache_journals": fixed, "__setattr__": __setattr__,
                                "__delattr__": __delattr__, "__init_subclass__": classmethod(__init_subclass__)})


def py_first_slot_not_in(names, slots, state, runtime):
    """first_not_in_state over spec slots `slots`, or, with `runtime` true, over runtime
    slots made spec slots first (shifted): the guards' and frame's test of an event's or a
    node's slots in one call."""
    # (the slots read once, before any comparison: a name's comparison may run Python code)
    return py_first_not_in_state(names, py_shifted(slots) if runtime else list(slots), state)


def py_holders_outside(slots, slot_page: dict, ids) -> list:
    """(h, y) for each slot h of `slots`, in order, whose last holder y = slot_page.get(h) is
    a node whose id is not in `ids`: the slots whose change a step of the nodes `ids` may
    not make (the frame's candidates, host_tier_guards._frame). A holder that is the very
    object the slot before it had (a node's slots run together) keeps its verdict: its id
    read and searched once per run."""
    out = []
    last = outside = None
    for h in slots:
        y = slot_page.get(h)
        if y is None:
            continue
        if y is not last:
            last, outside = y, y.id not in ids
        if outside:
            out.append((h, y))
    return out


def py_tree_prefix_breach(keys, positions, L, npos: dict, host, root):
    """WriteThroughPrefix in tree form at each node x of py_nodes_at(keys, positions, L), in
    that set's order: x's pages (npos.get(x); none: x skipped) along from its parent's last
    page (none when the parent is None or root; py_prefix_breach), then, when x's last page q
    has no host copy, the first page of each child c (x.children.values()) that has pages:
    none may have one. None, or the first (page, parent page) that breaks it."""
    for x in py_nodes_at(keys, positions, L):
        pos = npos.get(x)
        if not pos:
            continue
        par = x.parent
        above = npos.get(par) if par is not None and par is not root else None
        broke = py_prefix_breach(host, pos, above[-1] if above else None)
        if broke is not None:
            return broke
        q = pos[-1]
        if host[q] == 0:
            for c in x.children.values():
                below = npos.get(c)
                if below:
                    b0 = below[0]
                    if host[b0] != 0:
                        return b0, q
    return None


def py_extend_positions(x, keys: list, pos: list, n: int, L: int, dirty: set) -> int:
    """Node x's pages len(pos)..n-1 given the positions L onwards: each one's key (x, i)
    appended to keys, its position to pos and to dirty; returns L + n - len(pos). (n and L
    exact ints, below 2**61: the positions and page counts of a tree.)"""
    if type(n) is not int or type(L) is not int:
        raise TypeError("extend_positions: n and L must be ints")
    k = len(pos)
    new = range(L, L + n - k)
    keys.extend(zip(repeat(x), range(k, n)))
    pos.extend(new)
    dirty.update(new)
    return L + n - k


#: the guards' per-page test of a node: first_where itself (the C one reads a node's pages
#: directly, the same values in the same order)
py_first_page_where = py_first_where


PYTHON = {"fill": py_fill, "move": py_move, "spare": py_spare, "release": py_release,
          "write_slots": py_write_slots, "diff_bytes": py_diff_bytes, "count_pages": py_count_pages,
          "commit_rows": py_commit_rows, "device_sync": py_device_sync,
          "slot_owner_breach": py_slot_owner_breach, "held_once_or_free": py_held_once_or_free,
          "steps_table": py_steps_table, "quiet_probe": py_quiet_probe,
          "chains_typed": py_chains_typed, "chains_padded": py_chains_padded,
          "ints_within": py_ints_within, "overwrite": py_overwrite, "padded_row": py_padded_row,
          "slot_changes": py_slot_changes, "first_not_in_state": py_first_not_in_state,
          "first_where": py_first_where, "variables_of": py_variables_of,
          "nodes_at": py_nodes_at, "prefix_breach": py_prefix_breach, "vacate": py_vacate,
          "renumber": py_renumber, "remove_pages": py_remove_pages,
          "walk_journaled": py_walk_journaled, "remap_node": py_remap_node, "remap_journaled": py_remap_journaled,
          "unmap_subtree": py_unmap_subtree,
          "shifted": py_shifted, "node_slots": py_node_slots, "host_write_in_flight": py_host_write_in_flight,
          "request_step": py_request_step, "host_sync": py_host_sync,
          "host_sync_step": py_host_sync_step, "guard_step": py_guard_step, "effect_step": py_effect_step,
          "watch_probe": py_watch_probe,
          "request_binder": py_request_binder, "load_bind": py_load_bind,
          "tracked_class": py_tracked_class,
          "first_slot_not_in": py_first_slot_not_in,
          "holders_outside": py_holders_outside, "tree_prefix_breach": py_tree_prefix_breach,
          "extend_positions": py_extend_positions,
          "first_page_where": py_first_page_where, "spread": py_spread, "enumerated": py_enumerated,
          "one_owner_breach": py_one_owner_breach, "parent_breach": py_parent_breach,
          "tree_pages": py_tree_pages, "chain_rows": py_chain_rows, "chain_walk": py_chain_walk,
          "byte_names": py_byte_names, "tree_nodes": py_tree_nodes, "pending_allocs": py_pending_allocs}

_mod = native.module()
fill = _mod.fill if _mod is not None else py_fill
move = _mod.move if _mod is not None else py_move
spare = _mod.spare if _mod is not None else py_spare
release = _mod.release if _mod is not None else py_release
write_slots = _mod.write_slots if _mod is not None else py_write_slots
diff_bytes = _mod.diff_bytes if _mod is not None else py_diff_bytes
count_pages = _mod.count_pages if _mod is not None else py_count_pages
commit_rows = _mod.commit_rows if _mod is not None else py_commit_rows
device_sync = _mod.device_sync if _mod is not None else py_device_sync
slot_owner_breach = _mod.slot_owner_breach if _mod is not None else py_slot_owner_breach
held_once_or_free = _mod.held_once_or_free if _mod is not None else py_held_once_or_free
chains_typed = _mod.chains_typed if _mod is not None else py_chains_typed
chains_padded = _mod.chains_padded if _mod is not None else py_chains_padded
steps_table = _mod.steps_table if _mod is not None else py_steps_table
quiet_probe = _mod.quiet_probe if _mod is not None else py_quiet_probe
ints_within = _mod.ints_within if _mod is not None else py_ints_within
overwrite = _mod.overwrite if _mod is not None else py_overwrite
padded_row = _mod.padded_row if _mod is not None else py_padded_row
slot_changes = _mod.slot_changes if _mod is not None else py_slot_changes
first_not_in_state = _mod.first_not_in_state if _mod is not None else py_first_not_in_state
first_where = _mod.first_where if _mod is not None else py_first_where
variables_of = _mod.variables_of if _mod is not None else py_variables_of
vacate = _mod.vacate if _mod is not None else py_vacate
renumber = _mod.renumber if _mod is not None else py_renumber
remove_pages = _mod.remove_pages if _mod is not None else py_remove_pages
walk_journaled = _mod.walk_journaled if _mod is not None else py_walk_journaled
remap_node = _mod.remap_node if _mod is not None else py_remap_node
remap_journaled = _mod.remap_journaled if _mod is not None else py_remap_journaled
unmap_subtree = _mod.unmap_subtree if _mod is not None else py_unmap_subtree
shifted = _mod.shifted if _mod is not None else py_shifted
node_slots = _mod.node_slots if _mod is not None else py_node_slots
host_write_in_flight = _mod.host_write_in_flight if _mod is not None else py_host_write_in_flight
request_step = _mod.request_step if _mod is not None else py_request_step
host_sync = _mod.host_sync if _mod is not None else py_host_sync
watch_probe = _mod.watch_probe if _mod is not None else py_watch_probe
effect_step = _mod.effect_step if _mod is not None else py_effect_step
guard_step = _mod.guard_step if _mod is not None else py_guard_step
host_sync_step = _mod.host_sync_step if _mod is not None else py_host_sync_step
request_binder = _mod.request_binder if _mod is not None else py_request_binder
load_bind = _mod.load_bind if _mod is not None else py_load_bind
tracked_class = _mod.tracked_class if _mod is not None else py_tracked_class
first_slot_not_in = _mod.first_slot_not_in if _mod is not None else py_first_slot_not_in
holders_outside = _mod.holders_outside if _mod is not None else py_holders_outside
tree_prefix_breach = _mod.tree_prefix_breach if _mod is not None else py_tree_prefix_breach
extend_positions = _mod.extend_positions if _mod is not None else py_extend_positions
first_page_where = _mod.first_page_where if _mod is not None else py_first_page_where
spread = _mod.spread if _mod is not None else py_spread
enumerated = _mod.enumerated if _mod is not None else py_enumerated
one_owner_breach = _mod.one_owner_breach if _mod is not None else py_one_owner_breach
parent_breach = _mod.parent_breach if _mod is not None else py_parent_breach
tree_pages = _mod.tree_pages if _mod is not None else py_tree_pages
chain_rows = _mod.chain_rows if _mod is not None else py_chain_rows
chain_walk = _mod.chain_walk if _mod is not None else py_chain_walk
byte_names = _mod.byte_names if _mod is not None else py_byte_names
tree_nodes = _mod.tree_nodes if _mod is not None else py_tree_nodes
pending_allocs = _mod.pending_allocs if _mod is not None else py_pending_allocs
