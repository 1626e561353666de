"""The monitors' native loops (hicache/monitors/csrc/incmap.c) against their Python definitions
(hicache/monitors/maps/loops.py): on random inputs each C function must leave every argument it
writes (the variable's dict, the delta, the dirty sets, the reference counts) exactly as the
Python loop leaves it, return the same value, and raise the same exception at the same point.
The build, the cache and the fallback are tested in subprocesses on a private cache directory.
"""
import collections
import copy
import ctypes
import gc
import os
import random
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

from hicache import buildcache
from hicache.monitors import native
from hicache.monitors.maps import loops
from hicache.monitors.runtime import delta_entries
from hicache.monitors.rt import FastPathFailed, fast_ap, it, no_ap

#: values a position can hold: ints and the bools equal to them, a float equal to 1, strings,
#: None, a tuple (the comparisons must tell them apart as the Python loops do)
VALUES = [0, 1, 2, 3, True, False, 1.0, "a", "idle", None, (1,)]


@pytest.fixture(scope="module")
def mod():
    m = native.module()
    if m is None:
        pytest.skip(f"native loops unavailable: {native.unavailable_reason()}")
    return m


def test_the_native_loops_load_where_they_can_be_built():
    """Where a compiler and the Python headers are present (CI's machines), the extension
    must load: a build broken there would only show as a slower strict mode."""
    if not buildcache.can_build_extensions() or buildcache.disabled():
        pytest.skip("no compiler or no Python headers here, or HICACHE_NATIVE=0")
    assert native.module() is not None, native.unavailable_reason()
    assert loops.fill is native.module().fill


def _outcome(fn, args):
    """(exception type and args or None, return value, the arguments after the call)."""
    return _called(fn, copy.deepcopy(args))


def _called(fn, args):
    """_outcome on `args` themselves (written by the call), not on a copy."""
    try:
        ret = fn(*args)
        exc = None
    except Exception as e:      # (the same type and message must come from both)
        ret, exc = None, (type(e), e.args)
    return exc, ret, args


def _agree(name, mod, args):
    got = _outcome(getattr(mod, name), args)
    want = _outcome(loops.PYTHON[name], args)
    # (compared with the values' types: True == 1 would hide a write the loops must not make)
    assert _typed(got) == _typed(want), (name, args)
    return want


def _agree_made(name, mod, make):
    """_agree on arguments made afresh for each side by `make()` (the same each time), not
    deep-copied: a copy of a dict is built anew, its entries in order with no dead ones, so a
    dict laid out otherwise (`_laid_out`) would reach the loops only through its copy."""
    got = _called(getattr(mod, name), make())
    want = _called(loops.PYTHON[name], make())
    assert _typed(got) == _typed(want), (name, make())
    return want


def _typed(x):
    if isinstance(x, dict):
        return {_typed(k): _typed(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x), [_typed(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return type(x), frozenset(_typed(v) for v in x)
    if isinstance(x, np.ndarray):
        return x.tobytes()
    return type(x), x


def _positions(rng, n):
    d = {p: rng.choice(VALUES) for p in range(n)}
    pos = rng.sample(range(n + 2), rng.randint(0, n))        # (n, n + 1: absent, KeyError)
    return d, pos


@pytest.mark.parametrize("seed", range(150))
def test_writes_agree_with_the_python_loops(mod, seed):
    rng = random.Random(seed)
    n = rng.randint(0, 12)
    d, pos = _positions(rng, n)
    v = rng.choice(VALUES)
    _agree("fill", mod, [d, pos, v, "dev", [("x", 0, 0)], {99}])
    origin = {q: rng.randrange(n + 1) for q in rng.sample(range(n + 1), rng.randint(0, n))} if n else {}
    _agree("move", mod, [d, origin, "host", [("x", 0, 0)]])
    lo = rng.randint(0, n + 1)
    _agree("spare", mod, [d, lo, rng.randint(lo, n + 2), v, "stor", []])
    slots_d = {p: rng.choice([0, 0, 1, 2, 3, True, False, None]) for p in range(n)}
    # (a count that is no exact int, TRUE or 1.0, takes Python's sum; an exact one C's)
    refs = {h: rng.choice([-1, 0, 1, 2, 2, True, 1.0]) for h in rng.sample(range(1, 5), rng.randint(0, 4))}
    _agree("release", mod, [slots_d, pos, refs, {7}])
    values = [rng.choice([0, 1, 2, 3, 4, True, 1.0]) for _ in range(rng.randint(0, n + 1))]
    _agree("write_slots", mod, [slots_d, pos, rng.choice([values, tuple(values)]), "backupOp", refs, [], set(), set()])


def _laid_out(rng, n, pool):
    """A dict of the positions 0..n-1 with values from pool, laid out one of several ways: in
    order (position k at entry k, what the writes read off the entry), shuffled, with entries
    deleted and put back (dummies before them), with a key put as the bool or float equal to
    it (True at entry 1, 2.0 at entry 2), with a position past 2**30 (no small int), or with
    another key first (every position one entry off its number)."""
    keys = list(range(n))
    how = rng.choice(["order", "order", "shuffled", "deleted", "equal", "wide", "extra"])
    if how == "shuffled":
        rng.shuffle(keys)
    d = {"x": rng.choice(pool)} if how == "extra" else {}
    for k in keys:
        if how == "equal" and k in (1, 2) and rng.random() < 0.7:
            k = {1: True, 2: 2.0}[k]
        d[k] = rng.choice(pool)
    if how == "deleted" and n:
        for k in rng.sample(range(n), rng.randint(1, n)):
            del d[k]
            d[k] = rng.choice(pool)
    if how == "wide":
        d[1 << 40] = rng.choice(pool)
    return d


@pytest.mark.parametrize("seed", range(60))
def test_writes_agree_on_positions_off_their_entries(mod, seed):
    """fill, move, spare, release and remove_pages both ways on dicts of positions laid out
    otherwise than the map's as well (`_laid_out`): the same reads, writes, delta and exceptions."""
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    pool = [0, 1, 2, 3, True, False]
    # (each dict made from its own seed, the same layout for both sides: _agree_made)
    seeds = [rng.random() for _ in range(6)]

    def fresh(i):
        return _laid_out(random.Random(seeds[i]), n, pool)

    pos = rng.sample(range(n + 1), rng.randint(0, n))
    v = rng.choice(pool)
    _agree_made("fill", mod, lambda: [fresh(0), pos, v, "dev", [], set()])
    origin = {q: rng.randrange(n + 1) for q in rng.sample(range(n + 1), rng.randint(0, n))}
    _agree_made("move", mod, lambda: [fresh(1), dict(origin), "host", []])
    lo = rng.randint(0, n)
    hi = rng.randint(lo, n + 1)
    _agree_made("spare", mod, lambda: [fresh(2), lo, hi, 0, "stor", []])
    refs = {h: rng.choice([-1, 0, 1, 2]) for h in range(1, 4)}
    _agree_made("release", mod, lambda: [fresh(3), list(pos), dict(refs), set()])
    L = rng.randint(0, n)
    holes = rng.sample(range(L), rng.randint(0, L))
    keys = [(rng.choice("ab"), p) for p in range(L)]
    _agree_made("remove_pages", mod,
                lambda: [(("dev", fresh(4), False, None), ("host", fresh(5), 0, {1: 2, 2: 1, 3: 0})), list(holes),
                         L, list(keys), {x: list(range(L)) for x in "ab"}, [], set(), set()])


@pytest.mark.parametrize("seed", range(60))
def test_page_reads_off_their_entries_agree_however_the_dict_is_laid_out(mod, seed):
    """The writes read each page's value off the entry its position numbers where that entry
    holds it, else look it up: both ways agree whatever the dict's layout (see _laid_out), for
    positions held, absent (KeyError), equal to a bool or float key, or past a small int."""
    rng = random.Random(seed)
    for _ in range(20):
        n = rng.randint(0, 10)
        pos = rng.sample([*range(n + 2), 1 << 40], rng.randint(0, n + 1))
        s_d, s_slots, v = rng.random(), rng.random(), rng.choice(VALUES)
        _agree_made("fill", mod, lambda: [_laid_out(random.Random(s_d), n, VALUES), list(pos), v, "dev",
                                          [("x", 0, 0)], {99}])
        refs = {h: rng.choice([0, 1, 2]) for h in range(1, 5)}
        values = [rng.choice([0, 1, 2, 3, 4, True]) for _ in range(rng.randint(0, n + 1))]
        _agree_made("write_slots", mod,
                    lambda: [_laid_out(random.Random(s_slots), n, [0, 0, 1, 2, 3, True, None]), list(pos),
                             list(values), "host", dict(refs), [], set(), set()])


def test_a_write_that_fails_leaves_what_it_wrote_recorded(mod):
    """Position 5 is outside the domain: the writes before it are made and in the delta,
    KeyError(5) is raised, as the Python loop does."""
    d = {0: False, 1: False, 2: True}
    exc, _, (d_after, _, _, _, delta, dirty) = _agree("fill", mod, [d, [0, 5, 1], True, "dev", [], set()])
    assert exc == (KeyError, (5,))
    assert d_after == {0: True, 1: False, 2: True} and delta == ["dev", 0, False] and dirty == {0}


def test_an_int_variable_written_a_bool_is_a_write(mod):
    """TRUE and 1 are different TLA+ values: the loops replace one with the other (the
    delta records it), though Python holds them equal."""
    _, _, (d, _, _, _, delta, _) = _agree("fill", mod, [{0: 1, 1: True}, [0, 1], True, "hits", [], set()])
    assert [type(d[0]), type(d[1])] == [bool, bool] and delta == ["hits", 0, 1]


def test_a_delta_holds_its_writes_flat_and_a_cycle_through_it_is_collected(mod):
    """A delta is flat: variable, key, old value of each write in turn, no tuple of its own per
    entry (thousands a replay, each kept as long as its step's history). The delta list is
    one the collector tracks, so a cycle through an old value it holds is collected, also one
    closed after the write (an empty dict, untracked then, tracked once it holds one)."""
    delta = []
    mod.fill({0: 1, 1: True, 2: None}, [0, 1, 2], 5, "hits", delta, set())
    assert delta == ["hits", 0, 1, "hits", 1, True, "hits", 2, None]
    assert delta_entries(delta) == [("hits", 0, 1), ("hits", 1, True), ("hits", 2, None)]

    class Value:
        pass
    old = Value()
    delta = []
    mod.fill({0: old}, [0], 5, "hits", delta, set())
    assert delta == ["hits", 0, old] and gc.is_tracked(delta)
    old.delta, gone = delta, weakref.ref(old)
    del old, delta
    gc.collect()
    assert gone() is None

    class Holder:
        pass
    old, delta = {}, []
    assert not gc.is_tracked(old)
    mod.fill({0: old}, [0], 5, "hits", delta, set())
    holder = Holder()
    holder.delta, old["x"], gone = delta, holder, weakref.ref(holder)
    del old, delta, holder
    gc.collect()
    assert gone() is None


def _version(d):
    """d's version tag (PEP 509), read off the object as CPython 3.11 lays a dict out (after
    the object header and ma_used): what every change of a dict renews."""
    return ctypes.c_uint64.from_address(id(d) + 2 * ctypes.sizeof(ctypes.c_void_p) + ctypes.sizeof(ctypes.c_ssize_t)).value


# (a --with-trace-refs build puts two more words before the tag: not read there)
_TAGGED = sys.version_info[:2] == (3, 11) and sys.implementation.name == "cpython" and not hasattr(sys, "getobjects")


def _tags(dicts) -> list:
    """Each dict's version tag and contents (its items, values by identity), before a call
    that may write them in place (`_renewed_where_changed` after it); [] where tags are not
    read."""
    return [(d, _version(d), [(k, id(v)) for k, v in d.items()]) for d in dicts] if _TAGGED else []


def _stale(tagged: list) -> list:
    """The dicts `_tags` saw whose contents the call changed under the same version tag (to be
    none, raised or not: a write in place, in_place_set, is always followed by its run's
    renewal, in_place_end, as each write through the API renews it)."""
    return [d for d, tag, items in tagged if [(k, id(v)) for k, v in d.items()] != items and _version(d) == tag]


def _renewed_where_changed(tagged: list) -> None:
    stale = _stale(tagged)
    assert not stale, stale


@pytest.mark.skipif(not _TAGGED, reason="the version tag read as CPython 3.11 lays a dict out")
@pytest.mark.parametrize("seed", range(40))
def test_the_writes_in_place_renew_the_version_tag(mod, seed):
    """The position writes made in place in a dict's entries (in_place_set) leave the dict's
    version tag renewed once the call returns, as the writes through the dict's API do: a
    reader that keys what it read by the tag (as the fused passes' constant reads do) never
    takes a changed dict for the one it read. A call that wrote nothing leaves the tag as it
    was, as the Python loop does."""
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    pool = [0, 1, 2, 3, True, False]
    d = dict.fromkeys(range(n + 1), 0)
    for p in d:
        d[p] = rng.choice(pool)
    pos = rng.sample(range(n + 1), rng.randint(0, n))
    v = rng.choice(pool)
    before, tag = dict(d), _version(d)
    mod.fill(d, pos, v, "dev", [], set())
    assert (_version(d) != tag) == (d != before or any(type(d[p]) is not type(before[p]) for p in d))
    # (reference counts laid out by slot, as the map's: each count written in its entry too;
    # and their own dict's tag renewed)
    slots_d, refs = dict.fromkeys(range(n + 1), 0), dict.fromkeys(range(5), 0)
    values = [rng.choice([0, 1, 2, 3]) for _ in pos]
    tags = _version(slots_d), _version(refs)
    args = [slots_d, list(pos), values, "host", refs, [], set(), set()]
    _agree("write_slots", mod, args)
    mod.write_slots(*args)
    assert (_version(slots_d) != tags[0]) == any(values) == (_version(refs) != tags[1])
    tag = _version(refs)
    _agree("release", mod, [slots_d, list(pos), refs, set()])
    mod.release(slots_d, list(pos), refs, set())
    assert (_version(refs) != tag) == any(slots_d[p] for p in pos)
    origin = {q: rng.randrange(n + 1) for q in rng.sample(range(n + 1), rng.randint(0, n))}
    before, tag = dict(d), _version(d)
    mod.move(d, origin, "host", [])
    assert (_version(d) != tag) == (d != before or any(type(d[p]) is not type(before[p]) for p in d))
    before, tag = dict(d), _version(d)
    mod.spare(d, 0, n + 1, 0, "stor", [])
    assert (_version(d) != tag) == (d != before or any(type(d[p]) is not type(before[p]) for p in d))


@pytest.mark.skipif(not _TAGGED, reason="the version tag read as CPython 3.11 lays a dict out")
def test_a_write_that_fails_after_writes_in_place_renews_the_tag(mod):
    """Position 5 is outside the domain: the writes made in place before the KeyError are
    made, recorded, and the dict's tag renewed all the same; the KeyError is the one raised."""
    d = dict.fromkeys(range(4), False)
    tag, delta = _version(d), []
    with pytest.raises(KeyError) as e:
        mod.fill(d, [0, 1, 5, 2], True, "dev", delta, set())
    assert e.value.args == (5,) and _version(d) != tag
    assert d == {0: True, 1: True, 2: False, 3: False} and delta_entries(delta) == [("dev", 0, False), ("dev", 1, False)]


@pytest.mark.skipif(not _TAGGED, reason="the version tag read as CPython 3.11 lays a dict out")
@pytest.mark.parametrize("moved", [False, True])
def test_a_dict_changed_under_a_run_of_writes_ends_as_python_leaves_it(mod, moved):
    """A comparison of a page's value may run code (here its __eq__, at the page after the
    last one written, which takes the last written position out of the dict and puts it back:
    its entry moves; or, with `moved` False, writes another position's value again): the dict
    ends with the contents, order and delta the Python loop leaves, and its tag renewed (the
    last write in place made again through the API; where its entry moved, by the write through
    the API that moved it, after every write in place)."""
    def run(fill):
        d = {}

        class Value:
            __hash__ = None

            def __init__(self, i):
                self.i = i

            def __eq__(self, other):
                if self.i == 3 and 2 in d:
                    if moved:
                        d[2] = d.pop(2)
                    else:
                        d[4] = d[4]
                return self.i == 3          # (position 3 holds the value written: no write)
        for p in range(5):
            d[p] = Value(p)
        delta = []
        tag = _version(d)
        fill(d, [0, 1, 2, 3], Value(9), "hits", delta, set())
        return ([(k, v.i) for k, v in d.items()], [(var, p, old.i) for var, p, old in delta_entries(delta)],
                _version(d) != tag)

    assert run(mod.fill) == run(loops.py_fill)
    items, delta, renewed = run(mod.fill)
    assert renewed and delta == [("hits", 0, 0), ("hits", 1, 1), ("hits", 2, 2)]
    assert items == ([(0, 9), (1, 9), (3, 3), (4, 4), (2, 9)] if moved else [(0, 9), (1, 9), (2, 9), (3, 3), (4, 4)])


def test_no_collection_finds_the_dict_untracked_while_it_holds_a_tracked_value(mod):
    """Mid-run too: a value the collector tracks is written in place only into a dict it
    tracks already (else through the API, which starts tracking it), so no collection could
    find the dict holding it untracked, where a cycle through the dict would be missed. A
    collection starts only at an allocation of an object the collector tracks, and a run of
    writes makes none (its delta is flat, its dirty set grows by reallocation): with the
    threshold at 1 none starts inside it. (When delta entries were tuples, their allocations
    started one at nearly every write, and each found the dict tracked.) Should a run come to
    allocate such objects again, this fails first, and the in-place rule above is what to
    check."""
    class Value:
        pass
    d, value, seen = dict.fromkeys(range(200), 0), Value(), []

    def look(phase, info):
        if phase == "start":
            seen.append((gc.is_tracked(d), any(v is value for v in d.values())))
    delta, pos, dirty = [], list(range(200)), set()      # (made before: each starts a collection)
    threshold = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(look)
    gc.set_threshold(1)
    try:
        mod.fill(d, pos, value, "hits", delta, dirty)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(look)
    assert seen == [] and len(delta) == 600
    assert gc.is_tracked(d) and all(d[p] is value for p in d)


def test_a_value_the_collector_tracks_written_in_place_tracks_the_dict(mod):
    """A dict of ints only is not tracked by the collector; a write of a value it tracks makes
    it tracked (the dict's own rule), so a cycle through the dict is collected: the native
    writes, in place or not, leave the dict tracked exactly when the Python loop does."""
    for fn in (mod.fill, loops.py_fill):
        d = dict.fromkeys(range(4), 0)
        assert not gc.is_tracked(d)
        fn(d, [1, 2], 0, "hits", [], set())
        assert not gc.is_tracked(d)

        class Value:
            pass
        value = Value()
        fn(d, [1, 2], value, "hits", [], set())
        assert gc.is_tracked(d) and d[1] is value and d[2] is value
        value.d, gone = d, weakref.ref(value)
        del value, d
        gc.collect()
        assert gone() is None


@pytest.mark.parametrize("seed", range(60))
def test_slot_states_diff_agrees(mod, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    before = rng.integers(0, 4, n, dtype=np.int8)
    now = before.copy()
    flip = rng.random(n) < 0.2
    now[flip] = rng.integers(0, 4, int(flip.sum()), dtype=np.int8)
    exc, ret, (_, seen) = _agree("diff_bytes", mod, [now, bytearray(before.tobytes())])
    assert exc is None and ret == np.flatnonzero(now != before).tolist() and bytes(seen) == now.tobytes()


def test_slot_states_of_another_length_are_refused(mod):
    exc, _, _ = _agree("diff_bytes", mod, [np.zeros(3, dtype=np.int8), bytearray(4)])
    assert exc is not None and exc[0] is ValueError


@pytest.mark.parametrize("seed", range(80))
def test_page_counts_agree(mod, seed):
    """Exact ints (what the maps hold) take the C comparison and sum; a bool, a float, an int
    past 64 bits or a count near the edge of 64 bits takes Python's, with the same result."""
    rng = random.Random(seed)
    odd = seed % 2 == 1
    counts = {p: rng.choice([-1, 0, 1, 2, *([True, 1.0, 2 ** 63 - 1, 2 ** 70] if odd else [])])
              for p in rng.sample(range(10), rng.randint(0, 6))}
    pages = [rng.choice([-1, -1, *range(10), *([True, 1.0, -1.0, 2 ** 70] if odd else [])])
             for _ in range(rng.randint(0, 8))]
    pages = rng.choice([pages, tuple(pages), None])
    k = rng.choice([1, -1, *([True, 1.0] if odd else [])])
    none = rng.choice([-1, *([-1.0, False] if odd else [])])
    _agree("count_pages", mod, [counts, pages, k, rng.choice([None, {42}]), none])
    if not odd:
        return
    got = {1: 1, 2: True}
    mod.count_pages(got, (1, 2, True, -1), 1, None, -1)
    assert _typed(got) == _typed({1: 3, 2: 2})     # (True is page 1; True + 1 is the int 2)


@pytest.mark.parametrize("seed", range(60))
def test_page_counts_agree_on_counts_in_page_order(mod, seed):
    """Counts laid out as the device-page map's (`dict.fromkeys` of the pages: page p at entry
    p, read off it) and otherwise (`_laid_out`), pages absent from them, an unhashable page
    (the lookup's TypeError, after the counts before it)."""
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    # (the counts made afresh for each side, laid out the same: _agree_made)
    s, in_order = rng.random(), seed % 2

    def counts():
        r = random.Random(s)
        return {p: r.choice([0, 1, 2]) for p in range(n)} if in_order else _laid_out(r, n, [0, 1, 2])
    pages = [rng.randrange(-1, n + 3) for _ in range(rng.randint(0, 10))]
    if seed % 5 == 4:
        pages.insert(rng.randint(0, len(pages)), [1])
    seq, k, dirty = rng.choice([pages, tuple(pages)]), rng.choice([1, -1]), rng.choice([None, set()])
    _agree_made("count_pages", mod, lambda: [counts(), seq, k, None if dirty is None else set(), -1])


@pytest.mark.parametrize("seed", range(120))
def test_slot_owner_test_agrees(mod, seed):
    """Exact int slots and counts over a tuple or list of names take the C path; a slot of 0,
    -1 or TRUE (Python indexes names[h - 1] from the end), a count that is TRUE, 1.0 or past
    61 bits, or names of another type, the object API's; both decide alike."""
    rng = random.Random(seed)
    states = ["idle", "reserved", "protected", "synced", 1, None]
    names = tuple(rng.choice(states) for _ in range(rng.randint(0, 6)))
    odd = seed % 2 == 1
    if odd:
        names = rng.choice([names, list(names), "ab"])
    slots = frozenset(rng.sample(range(1, 9), rng.randint(0, 8))) | (
        frozenset(rng.sample([0, -1, True], rng.randint(0, 2))) if odd else frozenset())
    refs = [{h: rng.choice([0, 0, 1, 1, 2, True, -1, *([1.0, 2 ** 62] if odd else [])])
             for h in rng.sample(range(1, 9), rng.randint(0, 8))} for _ in range(3)]
    _agree("slot_owner_breach", mod, [names, slots, *refs])


def test_slot_owner_test_names_the_breaking_slot(mod):
    names = ("idle", "reserved", "synced")
    assert mod.slot_owner_breach(names, [1, 2, 3], {3: 1}, {2: 1}, {}) is None
    assert mod.slot_owner_breach(names, [1, 2, 3], {3: 1}, {2: 1}, {2: 1}) == (2, "reserved", 0, 2)


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_build_cache_and_fallback(tmp_path):
    """A private cache: the first use builds the extension there and the second loads it;
    HICACHE_NATIVE=0, or a compiler that fails, leaves the Python loops serving (the second
    with one warning saying why)."""
    if not buildcache.can_build_extensions():
        pytest.skip("no compiler or no Python headers here")
    probe = """
        import warnings
        warnings.simplefilter("always")
        from hicache.monitors import fused_native, native
        from hicache.monitors.generated import host_tier
        from hicache.monitors.maps import loops
        print(native.module() is not None, loops.fill is loops.py_fill, native.library_path().parent,
              fused_native.native_inc_all(host_tier) is host_tier.inc_all, repr(native.unavailable_reason()))
    """
    cache = tmp_path / "cache"
    built = _python(probe, {"HICACHE_CACHE_DIR": str(cache), "HICACHE_NATIVE": "1"})
    assert built.returncode == 0, built.stderr
    assert built.stdout.split()[:4] == ["True", "False", str(cache), "False"]
    assert len(list(cache.glob("incmap-*"))) == 1 and len(list(cache.glob("hicache_fusedfn_host_tier-*"))) == 1
    assert not list(cache.glob(".*")), "a build left its temporary files"
    again = _python(probe, {"HICACHE_CACHE_DIR": str(cache), "HICACHE_NATIVE": "1", "CC": "false"})
    # (the same sources, but another compiler: other names, whose builds fail)
    assert again.stdout.split()[:2] == ["False", "True"] and again.stdout.split()[3] == "True"
    assert "native map writes are unavailable" in again.stderr and "inc_all's native form is unavailable" in again.stderr
    off = _python(probe, {"HICACHE_CACHE_DIR": str(cache), "HICACHE_NATIVE": "0"})
    assert off.stdout.split()[:2] == ["False", "True"] and off.stdout.split()[3] == "True"
    assert "HICACHE_NATIVE=0" in off.stdout and "unavailable" not in off.stderr


def test_the_fast_path_readers_read_as_the_python_ones(mod):
    """rt.fast_ap / rt.no_ap (what generated fast paths call) are the C ones here; each reader
    they return reads what the Python one's reads, and raises where it raises."""
    from hicache.monitors import rt
    from hicache.tla.values import Fcn

    class SubFcn(Fcn):          # (not exactly a Fcn: the Python fast_ap's general case)
        __slots__ = ()

    assert rt.fast_ap is mod.fast_ap and rt.no_ap is mod.no_ap
    values = [Fcn({1: "a", 2: True}), SubFcn({1: "a"}), ("x", "y"), (), frozenset({1})]
    keys = [0, 1, 2, 3, True, "a", -1, 2**70, -2**70]
    for f in values:
        for x in keys:
            assert _outcome(rt.fast_ap(f), [x])[:2] == _outcome(rt.py_fast_ap(f), [x])[:2], (f, x)
        assert rt.no_ap(f) is rt.py_no_ap(f)
    assert rt.fast_ap(values[0]).__self__ is values[0].d       # (the dict's own lookup)
    assert type(rt.fast_ap(values[2])).__name__ == "SeqReader"  # (a sequence's: the C reader)


@pytest.mark.parametrize("seed", range(80))
def test_held_once_or_free_agrees(mod, seed):
    rng = random.Random(seed)
    holders = {p: rng.choice([0, 1, 1, 1, 2, -1, True]) for p in rng.sample(range(8), rng.randint(0, 8))}
    free = frozenset(rng.sample(range(8), rng.randint(0, 8)))
    pages = rng.sample(range(8), rng.randint(0, 8))
    _agree("held_once_or_free", mod, [pages, holders, free])
    assert mod.held_once_or_free([1, 2], {1: 1}, frozenset({2})) is True
    assert mod.held_once_or_free([1], {1: 1}, frozenset({1})) is False    # held and free
    assert mod.held_once_or_free([3], {}, frozenset()) is False            # lost: neither


@pytest.mark.parametrize("seed", range(60))
def test_held_once_or_free_agrees_on_holders_in_page_order(mod, seed):
    """Holder counts laid out as the device-page map's (page p at entry p, read off it) and
    otherwise (`_laid_out`), a free set, frozenset, subclass or list, and pages that are no
    exact int (TRUE, 2.0, a frozenset; a set or a list: the counts' lookup's TypeError)."""
    rng = random.Random(seed)
    n = rng.randint(1, 10)
    s = rng.random()

    def holders():
        r = random.Random(s)
        return dict.fromkeys(range(n), 0) | {p: r.choice([0, 1, 1, 2]) for p in range(n)} if seed % 2 else \
            _laid_out(r, n, [0, 1, 1, 1, 2, -1, True])
    free = rng.sample(range(n + 2), rng.randint(0, n + 2))
    free = rng.choice([frozenset(free), set(free), _FreeSet(free), list(free)])
    pages = rng.sample(range(n + 2), rng.randint(0, n + 2))
    if seed % 5 == 4:
        pages.insert(rng.randint(0, len(pages)), rng.choice([True, 2.0, frozenset({1}), {1}, [1]]))
    _agree_made("held_once_or_free", mod, lambda: [list(pages), holders(), free])
    assert mod.held_once_or_free([2, 1], {1: 1, 2: 0}, frozenset({2})) is True
    assert mod.held_once_or_free([2, 1], {1: 1, 2: 0}, {1, 2}) is False


@pytest.mark.parametrize("seed", range(40))
def test_held_once_or_free_asks_a_free_set_of_collisions_and_dummies(mod, seed):
    """The free set's membership read off the slot a page's hash starts at (set_has_small) on
    sets whose pages collide in their tables (p and p + 32k), hold dummies (pages discarded),
    TRUE for 1, 1.0 for 1, ints past one digit, NoPage (-1, whose hash is -2): as `in` decides."""
    rng = random.Random(seed)
    pool = [*range(-2, 40), *range(32, 200, 32), 2 ** 40, 2 ** 40 + 1]
    fs = rng.random()

    def free():     # (made afresh for each side: a copy of a set has no dummies)
        r = random.Random(fs)
        out = set(r.sample(pool, r.randint(0, 30)))
        for p in r.sample(sorted(out), r.randint(0, len(out))):
            out.discard(p)      # (dummies where they were: a page after one probes past it)
        if r.random() < 0.3:
            out.add(r.choice([True, 1.0, False]))
        return r.choice([out, frozenset(out)])

    pages = rng.sample(pool, rng.randint(0, 20))
    holders = {p: rng.choice([0, 1]) for p in pool if rng.random() < 0.8}
    _agree_made("held_once_or_free", mod, lambda: [pages, dict(holders), free()])
    # (each page alone: the answer of `in` for each, both ways)
    for p in pages:
        _agree_made("held_once_or_free", mod, lambda: [[p], {p: 1}, free()])
        _agree_made("held_once_or_free", mod, lambda: [[p], {}, free()])


def test_held_once_or_free_passes_a_dummy_where_a_page_probes_first(mod):
    """A page whose probe starts at a deleted entry's slot (a dummy, then the page one slot
    on) is found free: the dummy is not an empty slot."""
    free = {0, 8}
    free.discard(0)
    assert loops.PYTHON["held_once_or_free"]([8], {8: 0}, free) == mod.held_once_or_free([8], {8: 0}, free)
    assert mod.held_once_or_free([8], {8: 0}, free) == loops.PYTHON["held_once_or_free"]([8], {8: 0}, {8})


class _FreeSet(frozenset):
    """A free set whose `in` is its own (the C path takes only an exact set or frozenset)."""
    def __contains__(self, p):
        return frozenset.__contains__(self, p) != (p == 0)


@pytest.mark.skipif(not _TAGGED, reason="the version tag read as CPython 3.11 lays a dict out")
@pytest.mark.parametrize("seed", range(30))
def test_holder_counts_written_in_place_renew_the_tag(mod, seed):
    """count_pages and commit_rows write a holder count in its entry where the counts are laid
    out by page (the device-page map's): the same counts, dirty pages and state as the Python
    loops, and the counts' version tag renewed once the call returns when a count changed."""
    rng = random.Random(seed)
    counts = dict.fromkeys(range(8), 0)
    for p in counts:
        counts[p] = rng.choice([0, 1, 2])
    pages = tuple(rng.choice([-1, *range(10)]) for _ in range(rng.randint(0, 6)))
    k = rng.choice([1, -1])
    want = dict(counts)
    loops.PYTHON["count_pages"](want, pages, k, set(), -1)
    tagged = _tags([counts])
    dirty = set()
    mod.count_pages(counts, pages, k, dirty, -1)
    assert _typed(counts) == _typed(want) and dirty == {p for p in pages if p != -1}
    _renewed_where_changed(tagged)
    # (dirty pages holding some of the pages already, TRUE for 1, dummies where pages left:
    # the pages the pass adds, as dirty.add adds them)
    ds = rng.random()

    def dirty():    # (made afresh for each side: a copy of a set has no dummies)
        r = random.Random(ds)
        start = set(r.sample(range(-1, 40), r.randint(0, 12))) | ({True} if seed % 3 == 0 else set())
        for p in r.sample(sorted(start, key=repr), r.randint(0, len(start))):
            start.discard(p)
            if r.random() < 0.5:
                start.add(p)
        return start
    _agree_made("count_pages", mod, lambda: [dict.fromkeys(range(8), 1), pages, k, dirty(), -1])
    case = _commit_case(rng, False)
    case[2] = dict.fromkeys(range(8), 0) | case[2]
    py = copy.deepcopy(case)
    tagged = _tags([case[2]])
    # (on the case itself, not a copy: the holders written are the ones whose tag was read)
    got = _called(mod.commit_rows, case)
    assert _typed(got) == _typed(_outcome(loops.PYTHON["commit_rows"], py))
    _renewed_where_changed(tagged)



class _Row:
    """A stand-in for a row value (a function value: its dict as `d`), told apart by identity."""
    def __init__(self, d):
        self.d = d

    def __repr__(self):
        return f"_Row({self.d})"


def _chain_case(rng, odd: bool) -> dict:
    """Random rows of a chain map's state for chains_typed and chains_padded: n chains, each
    a rotation, a length, a page row (the shared empty one, the row built for it, another)
    and a host row (the empty one, another); the map's rows and built rows; odd cases add
    what the map never holds (TRUE, 1.0 or None for a rotation, length or page, a chain past
    the state or no int, an entry no sequence, a row with no dict)."""
    n = rng.randint(0, 5)
    empty, unused = _Row({}), (-1, ())
    odd_vals = [True, 1.0, None, -2] if odd else []
    rows, built, rot, ln, page, host = {}, {}, [], [], [], []
    for c in range(1, n + 1):
        pages = tuple(rng.choice([-1, 0, 1, 2, 3, *odd_vals]) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.8:
            rows[c] = (0, pages)
        if rng.random() < 0.7:
            built[c] = _Row(dict(enumerate(pages)))
        rot.append(rng.choice([0, 1, -1, 2, *odd_vals]))
        ln.append(rng.choice([len(pages), len(pages), 0, 5, *odd_vals]))
        page.append(rng.choice([empty, built.get(c, empty), built.get(c, empty), _Row({0: rng.choice([-1, 1])}),
                                *(["no row"] if odd else [])]))
        host.append(rng.choice([empty, empty, empty, _Row({0: -1})]))
    chains = rng.sample(range(1, n + 1), rng.randint(0, n))
    if odd and rng.random() < 0.4:
        chains.insert(rng.randint(0, len(chains)), rng.choice([n + 1, 0, "c", 1.5]))
    if len(chains) % 3 == 1:
        chains = set(chains)        # (a sync's dirty chains: a set, read off its table)
    return {"chains": chains, "rows": rows, "built": built, "rot": tuple(rot), "len": tuple(ln),
            "page": tuple(page), "host": tuple(host), "empty": empty, "unused": unused}


def _chains_run(fn, case: dict, L: int, n_ids: int, cp: int, name: str) -> tuple:
    calls: list = []

    def beyond(row, hrow, ln):
        calls.append((sorted(row.items()), sorted(hrow.items()), ln))
        if ln == 5:
            raise ValueError("beyond")
        return any(p != -1 for P, p in row.items() if type(ln) is int and P >= ln)
    k = case
    if name == "chains_typed":
        args = (k["chains"], k["rows"], k["built"], k["rot"], k["len"], k["page"], k["host"], k["empty"], L, n_ids,
                cp, -1, -1, k["unused"])
    else:
        args = (k["chains"], k["page"], k["host"], k["len"], k["built"], k["empty"], k["rows"], k["unused"], beyond)
    try:
        ret, exc = fn(*args), None
    except Exception as e:
        ret, exc = None, type(e)
    return ret, exc, calls


@pytest.mark.parametrize("name", ["chains_typed", "chains_padded"])
def test_chain_tests_agree(mod, name):
    """The device-page map's per-chain tests of TypeOK and NoDoubleAllocation both ways on
    random rows: the same answer, the same calls of the walk (with the same rows), or the same
    exception (a chain past the state: IndexError; no int: TypeError; a row with no dict:
    AttributeError; the walk's own)."""
    rng = random.Random(1)
    seen = collections.Counter()
    for i in range(1500):
        case = _chain_case(rng, i % 3 == 2)
        L, n_ids, cp = rng.choice([3, 4, 5]), rng.choice([0, 3, 4]), rng.choice([1, 2])
        want = _chains_run(getattr(loops, "py_" + name), case, L, n_ids, cp, name)
        assert _chains_run(getattr(mod, name), case, L, n_ids, cp, name) == want, (i, case)
        seen[str(want[0]) if want[1] is None else want[1].__name__] += 1
        seen["walked"] += bool(want[2])
    assert seen["True"] >= 200 and seen["False"] >= 100 and seen["IndexError"] >= 20 and seen["TypeError"] >= 20, seen
    if name == "chains_padded":
        assert seen["walked"] >= 200 and seen["ValueError"] >= 20 and seen["AttributeError"] >= 10, seen
    for fn in (getattr(mod, name), getattr(loops, "py_" + name)):
        with pytest.raises(TypeError):
            fn(*([[]] + [[]] * (13 if name == "chains_typed" else 8)))


class _Truth:
    """An object whose truth is drawn (or raises ValueError), each test of it counted."""
    def __init__(self, value, log: list, label):
        self.value, self.log, self.label = value, log, label

    def __bool__(self):
        self.log.append(self.label)
        if self.value is None:
            raise ValueError("no truth")
        return self.value


def _table_binds(make, seed: int) -> list:
    """A steps table's answers on random actions (present with steps, present with None,
    absent, unhashable) and a fallback that answers or raises, with the fallback's calls."""
    rng = random.Random(seed)
    calls: list = []

    def fallback(action, fields):
        calls.append((action, fields))
        if fields == "raise":
            raise RuntimeError("fallback")
        return ("fallback", action)
    table = {a: rng.choice([None, (("A", ()),), [], 0]) for a in rng.sample("abcdef", rng.randint(0, 6))}
    out = []
    bind = make(table, fallback)
    for _ in range(8):
        action = rng.choice(["a", "b", "c", "d", "e", "f", "g", ["unhashable"]])
        fields = rng.choice([{}, {"k": 1}, "raise"])
        try:
            ret, exc = bind(action, fields), None
        except Exception as e:
            ret, exc = None, (type(e), str(e).split(":")[0])
        out.append((ret, exc, list(calls)))
    return out


def test_steps_table_agrees(mod):
    """A map's bind over a table of steps both ways: a table entry returned itself (an empty
    or false one too), None and a missing action given to the fallback with the event's
    fields, an unhashable action's TypeError, a fallback's exception; refusals of what is no
    dict or no callable."""
    seen = collections.Counter()
    for seed in range(300):
        want = _table_binds(loops.py_steps_table, seed)
        assert _table_binds(mod.steps_table, seed) == want, seed
        for ret, exc, _ in want:
            seen["ok" if exc is None else exc[0].__name__] += 1
            seen["fallback"] += ret is not None and type(ret) is tuple and ret[:1] == ("fallback",)
    assert seen["ok"] >= 1000 and seen["TypeError"] >= 50 and seen["RuntimeError"] >= 50, seen
    assert seen["fallback"] >= 300, seen
    steps = (("A", ()),)
    assert mod.steps_table({"a": steps}, lambda a, f: None)("a", {}) is steps
    for make in (mod.steps_table, loops.py_steps_table):
        with pytest.raises(TypeError):
            make([("a", 1)], lambda a, f: None)
        with pytest.raises(TypeError):
            make({}, 5)


@pytest.mark.parametrize("twin", ["native", "python"])
def test_a_steps_table_in_a_cycle_is_collected(mod, twin):
    """A table whose fallback refers back to its holder (a bound method of the map that holds
    the table) is in a cycle the collector frees, as the Python twin's closure is."""
    make = mod.steps_table if twin == "native" else loops.py_steps_table

    class Holder:
        def other(self, action, fields):
            return ("fallback", action)
    h = Holder()
    h.bind = make({}, h.other)
    assert h.bind("a", {}) == ("fallback", "a")
    gone = weakref.ref(h)
    del h
    gc.collect()
    assert gone() is None


def _probe_runs(make, seed: int) -> list:
    """A quiet probe's answers on random truths (true, false, raising) of its objects and its
    attribute (present, absent: AttributeError), with the order of the tests it made."""
    rng = random.Random(seed)
    log: list = []

    def obj(i):
        return rng.choice([[], [i], set(), {i}, _Truth(rng.choice([True, False, False, None]), log, i)])

    class Holder:
        pass
    holder = Holder()
    if rng.random() < 0.9:
        holder.log = obj(0)
    before, after = tuple(obj(1 + i) for i in range(rng.randint(0, 3))), tuple(obj(8 + i) for i in range(rng.randint(0, 2)))
    quiet = make(before, holder, "log", after)
    out = []
    for _ in range(3):
        del log[:]
        try:
            ret, exc = quiet(), None
        except Exception as e:
            ret, exc = None, type(e)
        out.append((ret, exc, list(log)))
        if rng.random() < 0.5:
            holder.log = obj(0)         # (the attribute read again at each call)
    return out


def test_quiet_probe_agrees(mod):
    """A map's quiet test both ways: each object before the attribute, the attribute, each
    after it tested in order until one is true; an object whose truth raises, an attribute
    missing (AttributeError), the attribute rebound between calls; refusals of parts of other
    types."""
    seen = collections.Counter()
    for seed in range(400):
        want = _probe_runs(loops.py_quiet_probe, seed)
        assert _probe_runs(mod.quiet_probe, seed) == want, seed
        for ret, exc, _ in want:
            seen[str(ret) if exc is None else exc.__name__] += 1
    assert seen["True"] >= 100 and seen["False"] >= 300, seen
    assert seen["ValueError"] >= 50 and seen["AttributeError"] >= 20, seen
    for make in (mod.quiet_probe, loops.py_quiet_probe):
        with pytest.raises(TypeError):
            make([], object(), "x", ())
        with pytest.raises(TypeError):
            make((), object(), 5, ())
        with pytest.raises(TypeError):
            make((), object(), "x", [])
    # (it holds what a map's monitor may hold: collected with it)
    import gc
    import weakref

    class Cache:
        pass
    cache = Cache()
    cache.probe = mod.quiet_probe((), cache, "probe", ())
    gone = weakref.ref(cache)
    del cache
    gc.collect()
    assert gone() is None


def _padded_row(pages):
    """A stand-in for the maps' padded row: a new value per call, telling the pages apart."""
    return ("row", tuple(pages))


def _commit_case(rng, odd: bool) -> list:
    """Random arguments of commit_rows: n chains with rows of NoPage (-1) and pages, holder
    counts, page rows, the state's rot, len and page tuples, and changes: unused, the same
    entry, other pages, NoPage alone, another rotation; odd cases add what the map never
    holds (TRUE and 1.0 for a page or a rotation, a chain past the state, a state without
    len, an entry that is no sequence)."""
    n = rng.randint(0, 6)
    odd_pages = [True, 1.0] if odd else []

    def entry():
        pages = tuple(rng.choice([-1, *range(8), *odd_pages]) for _ in range(rng.randint(0, 4)))
        return (rng.choice([0, 1, *([True] if odd else [])]), rng.choice([pages, (-1,) * len(pages)]))
    rows = {c: entry() for c in rng.sample(range(1, n + 1), rng.randint(0, n))}
    holders = {p: rng.choice([0, 1, 2]) for p in rng.sample(range(8), rng.randint(0, 8))}
    page_rows = {c: _padded_row(e[1]) for c, e in rows.items() if rng.random() < 0.7}
    empty = ("row", ())
    s = {"rot": tuple(rows.get(c, (-1, ()))[0] for c in range(1, n + 1)),
         "len": tuple(len(rows.get(c, (-1, ()))[1]) for c in range(1, n + 1)),
         "page": tuple(page_rows.get(c, empty) for c in range(1, n + 1)), "host": ()}
    changed = {}
    for c in rng.sample(range(1, n + 1), rng.randint(0, n)):
        was = rows.get(c, (-1, ()))
        changed[c] = rng.choice([(-1, ()), was, entry(), (was[0], (-1,) * len(was[1])), (1 - was[0], was[1])])
    if odd:
        if rng.random() < 0.3:
            changed[n + rng.randint(1, 2)] = entry()        # (IndexError at its entries)
        if rng.random() < 0.1:
            del s[rng.choice(["rot", "len", "page"])]        # (KeyError)
        if rng.random() < 0.1 and changed:
            changed[rng.choice(list(changed))] = None        # (TypeError: not subscriptable)
    # (the dirty pages' start: none, a set of pages already dirty, or (odd) no set)
    dirty = rng.choice([None, set(rng.sample(range(8), rng.randint(0, 3))), *([[1]] if odd else [])])
    return [changed, rows, holders, page_rows, s, [("x", None, 0)], empty, _padded_row, -1, dirty]


def test_commit_rows_agrees(mod):
    """The chain maps' commit both ways on random rows and changes: the same dirty sets,
    rows, holder counts, page rows, state and delta, or the same exception at the same point."""
    rng = random.Random(0)
    seen = _outcomes("commit_rows", mod, [_commit_case(rng, i % 3 == 2) for i in range(600)])
    assert seen["ok"] >= 400 and len(seen) >= 3, seen
    rows, holders, page_rows = {1: (0, (4, 5))}, {4: 1, 5: 1}, {1: ("row", (4, 5))}
    s = {"rot": (0, -1), "len": (2, 0), "page": (("row", (4, 5)), ("row", ())), "host": ()}
    delta = []
    start = {9}
    got = mod.commit_rows({1: (0, (-1, -1)), 2: (0, (6,))}, rows, holders, page_rows, s, delta, ("row", ()),
                          _padded_row, -1, start)
    assert got == ({1, 2}, {4, 5, 6, 9}) and got[1] is start and holders == {4: 0, 5: 0, 6: 1}
    assert rows == {1: (0, (-1, -1)), 2: (0, (6,))} and page_rows == {2: ("row", (6,))}
    assert s == {"rot": (0, 0), "len": (2, 1), "page": (("row", ()), ("row", (6,))), "host": ()}
    assert delta_entries(delta) == [("rot", None, (0, -1)), ("len", None, (2, 0)),
                                    ("page", None, (("row", (4, 5)), ("row", ())))]


@pytest.mark.parametrize("seed", range(40))
def test_overwrite_agrees(mod, seed):
    """A padded row's pages written over its first positions, shorter or longer than the
    row (a key it lacked is added, as the Python loop adds it), from a tuple or a list; a
    value that is no sequence raises TypeError in both."""
    rng = random.Random(seed)
    row = dict.fromkeys(range(rng.randint(0, 6)), -1)
    pages = [rng.choice(VALUES) for _ in range(rng.randint(0, 8))]
    _agree("overwrite", mod, [row, rng.choice([pages, tuple(pages)])])
    with pytest.raises(TypeError):
        mod.overwrite({}, 5)


def _row_of(d, kk):
    """padded_row's fcn in the tests: the copy's items in their order, and kk"""
    return list(d.items()), kk


class _PadDict(dict):
    """a dict of another type: no pad"""


def _no_row(d, kk):
    raise ValueError("no row", len(d), kk)


@pytest.mark.parametrize("seed", range(60))
def test_padded_row_agrees(mod, seed):
    """A chain's page row both ways: the pad (laid out as the map's, position k at entry k, or
    otherwise, `_laid_out`) copied, the pages over its first positions (fewer or more than it
    holds: a key it lacked is added, as the Python loop adds it; a tuple or a list), fcn called
    on the copy and kk; the pad itself left as it was. A pad that is no exact dict, pages that
    are no sequence and a failing fcn raise the same in both."""
    rng = random.Random(seed)
    pad = _laid_out(rng, rng.randint(0, 8), [-1, 0, 1, True])
    pages = [rng.choice(VALUES) for _ in range(rng.randint(0, 10))]
    _agree("padded_row", mod, [pad, rng.choice([pages, tuple(pages)]), _row_of, rng.choice([2, None])])
    _agree("padded_row", mod, [pad, pages, _no_row, 2])
    for bad in ([_PadDict(pad), pages, _row_of, 2], [list(pad), pages, _row_of, 2]):
        _agree("padded_row", mod, bad)
    for f in (mod.padded_row, loops.py_padded_row):
        with pytest.raises(TypeError):
            f(pad, 5, _row_of, 2)       # (pages no sequence: the messages differ, as overwrite's)
    with pytest.raises(TypeError):
        mod.padded_row(pad, pages, _row_of)
    # (a pad laid out with dead entries reaches the loop only made afresh, not deep-copied)
    made = random.Random(seed).random()

    def make():
        r = random.Random(made)
        pad = _laid_out(r, r.randint(0, 8), [-1, 0, 1, True])
        return [pad, [r.choice(VALUES) for _ in range(r.randint(0, 10))], _row_of, 2]
    _agree_made("padded_row", mod, make)


def test_tree_nodes_walks_as_the_tree_does(mod):
    """The nodes under a root both ways, in radix.Tree.nodes()'s order: on random trees of
    the runtime's own (inserted, split, evicted), and on nodes whose children are no dict
    (TypeError) or no attribute at all (AttributeError)."""
    from hicache.runtime.radix import RadixTree
    rng = random.Random(9)
    walked = 0
    for _ in range(40):
        tree = RadixTree(page_size=1, seed=b"s")
        for _ in range(rng.randint(0, 12)):
            # (pages of one of two byte strings: the keys share prefixes, and nodes split)
            pages = rng.randint(1, 5)
            key = b"".join(rng.choice([b"\0", b"\1"]) * tree.pb for _ in range(pages))
            tree.insert(key, list(range(pages)))
        want = list(tree.nodes())
        for f in (mod.tree_nodes, loops.py_tree_nodes):
            got = f(tree.root)
            assert type(got) is list and len(got) == len(want) and all(a is b for a, b in zip(got, want))
        walked += len(want)
    assert walked > 100
    bad = _WalkNode("bad")
    bad.children = [1]
    for root_children in ({0: bad}, [bad]):
        top = _WalkNode("top")
        top.children = root_children
        _agree_made("tree_nodes", mod, lambda: [top])
        assert _called(mod.tree_nodes, [top])[0][0] is TypeError
    assert _called(mod.tree_nodes, [object()])[0][0] is AttributeError
    assert _called(loops.py_tree_nodes, [object()])[0][0] is AttributeError


def test_byte_names_agrees(mod):
    """The slot names of state bytes both ways: every byte through the table (a list or a
    tuple, entries of any kind), a byte past it the table's IndexError; raw that is no exact
    bytes, a table that is no list or tuple: TypeError."""
    rng = random.Random(3)
    for _ in range(300):
        table = [rng.choice(VALUES) for _ in range(rng.randint(0, 6))]
        raw = bytes(rng.randrange(0, len(table) + (2 if rng.random() < 0.2 else 0) or 1)
                    for _ in range(rng.randint(0, 20)))
        _agree("byte_names", mod, [raw, rng.choice([table, tuple(table)])])
    for args in ([bytearray(b"\x00"), ["idle"]], [b"\x00", {0: "idle"}], [b"\x00", "idle"], [[0], ["idle"]]):
        _agree("byte_names", mod, args)
        assert _outcome(mod.byte_names, args)[0][0] is TypeError
    assert mod.byte_names(b"\x01\x00\x01", ("a", "b")) == ("b", "a", "b")


@pytest.mark.parametrize("seed", range(60))
def test_chain_rows_agrees(mod, seed):
    """The from-scratch chain map's rows both ways: chains 1..n, some with no entry (the
    unused chain), some with pages (a list or a tuple, none of them, some or all NoPage, values
    equal to NoPage without being it: True, 1.0 against NoPage 1), rot whatever the entry
    holds; keys past n and of other kinds ignored. Refused alike: rows no exact dict, n no
    exact int in [0, 2**31), an entry no 2-tuple, pages no list or tuple, a failing fcn."""
    rng = random.Random(seed)
    none = rng.choice([-1, 1])
    pool = [none, none, 0, 2, 3, True, 1.0, "a", None]
    n = rng.randint(0, 9)
    rows = {}
    for c in range(1, n + 3):
        if rng.random() < 0.7:
            pages = [rng.choice(pool) for _ in range(rng.choice([0, 1, 3, 6]))]
            rows[c] = (rng.choice([0, 1, none, "r", None]), rng.choice([pages, tuple(pages)]))
    rows["x"] = (0, [5])
    pad = dict.fromkeys(range(rng.randint(0, 8)), none)
    empty = ("empty",)
    got = _agree("chain_rows", mod, [rows, n, pad, empty, _row_of, 2, none])
    exc, ret, _ = got
    assert exc is None and len(ret[0]) == len(ret[1]) == len(ret[2]) == n
    # (the shared empty row is the one given, by identity, for chains of no page)
    for f in (mod.chain_rows, loops.py_chain_rows):
        _, ln, page, built = f(rows, n, pad, empty, _row_of, 2, none)
        assert all((page[c - 1] is empty) == (c not in built or built[c][0] is empty) for c in range(1, n + 1))
        assert set(built) == {c for c in range(1, n + 1) if ln[c - 1]}
    _agree("chain_rows", mod, [rows, n, pad, empty, _no_row, 2, none])
    bad_rows = dict(rows, **{})
    bad_rows[1] = rng.choice([(0, [1], 2), [0, [1]], (0, {1: 2}), (0, 3), None])
    for args in ([bad_rows, max(n, 1), pad, empty, _row_of, 2, none],
                 [list(rows.items()), n, pad, empty, _row_of, 2, none],
                 [rows, rng.choice([-1, 1 << 31, 2.0, True, "3"]), pad, empty, _row_of, 2, none],
                 [rows, n, list(pad), empty, _row_of, 2, none]):
        _agree("chain_rows", mod, args)
    with pytest.raises(TypeError):
        mod.chain_rows(rows, n, pad, empty, _row_of, 2)


def test_a_padded_row_tracks_its_copy_as_python_does(mod):
    """The copy of a pad of ints only, which the collector does not track, is tracked once it
    holds a value the collector tracks (the dict's own rule, which the write in the copy's entry
    keeps): a cycle through it is collected; no reference to a value written is leaked."""
    class Box:
        pass
    for f in (mod.padded_row, loops.py_padded_row):
        assert f({0: -1, 1: -1}, [[]], lambda d, kk: gc.is_tracked(d), None) is True
        assert f({0: -1, 1: -1}, [5], lambda d, kk: gc.is_tracked(d), None) is False
        box = Box()
        gone = weakref.ref(box)
        f({0: -1}, [box], lambda d, kk: setattr(d[0], "d", d), None)
        del box
        gc.collect()
        assert gone() is None
        v, pad = object(), dict.fromkeys(range(5), -1)
        before = sys.getrefcount(v)
        for _ in range(100):
            f(pad, [v, v], lambda d, kk: None, None)
        assert sys.getrefcount(v) == before and pad == dict.fromkeys(range(5), -1)


def test_commit_rows_leaves_a_tracked_rot_tuple_tracked(mod):
    """A collection between commit_rows' copy of `rot` and a later chain's write of a value the
    collector tracks (run here in `padded`, as any allocation could) may untrack the copy, then
    of ints only: the published tuple is tracked, as the twin's list turned into a tuple is."""
    def run(commit_rows):
        tracked = []

        def padded(pages):
            gc.collect()
            return ("row", tuple(pages))
        s = {"rot": (0, 0), "len": (0, 0), "page": ("e", "e")}
        commit_rows({1: (7, [5]), 2: (tracked, [6])}, {}, {}, {}, s, [], "e", padded, -1, None)
        gc.collect()
        return gc.is_tracked(s["rot"]), s["rot"]
    assert run(mod.commit_rows) == run(loops.py_commit_rows) == (True, (7, []))


@pytest.mark.parametrize("seed", range(80))
def test_ints_within_agrees(mod, seed):
    """A row's pages are PageIds or NoPage, exact ints: the C pass and the Python loop agree
    on rows of ints in and out of range, NoPage, bools, floats equal to a page, a string and
    an int past 64 bits, in tuples, lists and sets."""
    rng = random.Random(seed)
    n = rng.randint(0, 6)
    items = [rng.choice([0, 1, n - 1, n, -1, -2, True, False, 1.0, "a", 2 ** 70]) for _ in range(rng.randint(0, 5))]
    for pages in (tuple(items), items, set(filter(lambda x: not isinstance(x, float), items))):
        _agree("ints_within", mod, [pages, n, rng.choice([-1, 0, n])])
    assert mod.ints_within((0, 3, -1), 4, -1) is True
    assert mod.ints_within((4,), 4, -1) is False          # past the pool
    assert mod.ints_within((True,), 4, -1) is False       # TRUE is not page 1
    assert mod.ints_within((1.0,), 4, -1) is False
    assert mod.ints_within((2 ** 70,), 4, -1) is False    # (no overflow into range)
    assert mod.ints_within((), 0, -1) is True
    with pytest.raises(TypeError):
        mod.ints_within(5, 4, -1)                         # not iterable: as the loop raises
    for bad in ([(1,), 4.0, -1], [(1,), 2 ** 70, -1], [(1,), 4, 2 ** 70], [(1,), True, -1]):
        _agree("ints_within", mod, bad)                   # (bounds: integers of 64 bits)



# ---------------------------------------------------------------- the HostTier map's slot and page tests
def _outcomes(name, mod, cases) -> collections.Counter:
    """Each case's arguments run both ways (they must agree); how many ended in which way:
    "ok", or the exception's type and message."""
    seen: collections.Counter = collections.Counter()
    for args in cases:
        exc, _, _ = _agree(name, mod, args)
        seen["ok" if exc is None else f"{exc[0].__name__}: {exc[1][0]}"] += 1
    return seen


def test_slot_changes_agree(mod):
    """Random changed slots, states and holders; among them slots past the names (the
    write's IndexError) and states past the table (the read's), each at the same point; and
    what the C loop reads directly only for the map's own types (a bytearray, lists, exact
    int slots in range) taken through the object API otherwise: a negative or TRUE slot, a
    names tuple (the write's TypeError), a table tuple."""
    rng = random.Random(0)
    cases = []
    for i in range(400):
        n = rng.randint(0, 8)
        raw = bytearray(rng.randrange(4) for _ in range(n))
        names = [rng.choice(["idle", "synced"]) for _ in range(max(0, n + rng.choice([0, 0, -1])))]
        table = ["idle", "reserved", "protected", "synced"][:rng.choice([4, 4, 3])]
        hs = rng.sample(range(n), rng.randint(0, n))
        if i % 4 == 3 and n:
            hs.append(rng.choice([-1, True, -n]))
            names = rng.choice([names, tuple(names)])
            table = rng.choice([table, tuple(table)])
        slot_page = {h: rng.choice(["x", "y", None]) for h in rng.sample(range(n + 1), rng.randint(0, n + 1))}
        if i % 2:
            # (laid out by slot, as the map's: each holder read off its entry)
            slot_page = {**dict.fromkeys(range(n + 1)), **slot_page}
        cases.append([rng.choice([hs, tuple(hs)]), raw, names, table, slot_page, {99}])
    seen = _outcomes("slot_changes", mod, cases)
    assert seen["ok"] >= 100, seen
    assert seen["IndexError: list assignment index out of range"] >= 5, seen
    assert seen["IndexError: list index out of range"] >= 5, seen
    assert seen["TypeError: 'tuple' object does not support item assignment"] >= 5, seen


def test_slot_changes_write_names_and_return_the_holders(mod):
    names, dirty = ["idle", "idle", "idle"], set()
    held = mod.slot_changes([0, 2], bytearray([3, 0, 1]), names, ["idle", "reserved", "protected", "synced"],
                            {0: "x", 1: "y", 2: None}, dirty)
    assert held == {"x"} and names == ["synced", "idle", "reserved"] and dirty == {1, 3}


@pytest.mark.parametrize("seed", range(100))
def test_first_not_in_state_agrees(mod, seed):
    rng = random.Random(seed)
    names = [rng.choice(["idle", "synced", "synced", 1]) for _ in range(rng.randint(0, 5))]
    slots = [rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, True]) for _ in range(rng.randint(0, 6))]
    _agree("first_not_in_state", mod, [rng.choice([names, tuple(names)]), slots, "synced"])
    assert mod.first_not_in_state(["synced", "idle"], [1, 2], "synced") == 2
    assert mod.first_not_in_state(["synced"], [1, 0], "synced") == 0        # no slot
    assert mod.first_not_in_state(["synced"], [1, 1], "synced") is None


class _Falsy:
    """A value whose truth cannot be told (bool() raises): the test reads each value's truth
    only up to the first it asks for. (Equal to every other _Falsy: the arguments after each
    call are compared, each call's on its own copy.)"""
    def __bool__(self):
        raise ValueError("no truth here")

    def __eq__(self, other):
        return type(other) is _Falsy

    __hash__ = object.__hash__


def test_first_where_agrees(mod):
    """Random rows and positions, asking for a true and for a false value (want given as any
    truthy or falsy object); among them positions the row lacks (KeyError) and a value whose
    truth raises (ValueError), each at the same point, so only when reached."""
    rng = random.Random(0)
    cases = []
    for _ in range(400):
        n = rng.randint(0, 8)
        row = {p: rng.choice([0, 0, 1, 2, False, True, None, "", "x", ()])
               for p in rng.sample(range(n + 1), rng.randint(0, n + 1))}
        if row and rng.random() < 0.3:
            row[rng.choice(sorted(row))] = _Falsy()
        pos = rng.sample(range(n + 1), rng.randint(0, n + 1))
        cases.append([row, rng.choice([pos, tuple(pos)]), rng.choice([True, False, 1, 0, "yes", ""])])
    seen = _outcomes("first_where", mod, cases)
    assert seen["ok"] >= 150, seen
    assert sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 10, seen
    assert seen["ValueError: no truth here"] >= 3, seen
    assert mod.first_where({1: 0, 2: 3, 3: 4}, [1, 2, 3], True) == 2
    assert mod.first_where({1: 5, 2: 0, 3: None}, [1, 3, 2], False) == 3
    assert mod.first_where({1: 5}, [1], False) is None and mod.first_where({}, [], True) is None


def test_first_page_where_agrees(mod):
    """first_page_where is first_where (its twin is that one): random rows of the map's page
    values (ints, bools, a large int) and other values (None, a str, one whose truth raises),
    positions each way (an int past the row: KeyError; a large or non-int position), and want
    as a bool or any other truthy or falsy object, where C reads through first_where itself."""
    rng = random.Random(1)
    cases = []
    for _ in range(600):
        n = rng.randint(0, 8)
        values = [0, 1, 7, -1, False, True] + ([None, "x", 2 ** 40] if rng.random() < 0.3 else [])
        row = {p: rng.choice(values) for p in rng.sample(range(n + 1), rng.randint(0, n + 1))}
        if rng.random() < 0.4:
            # (in the positions' order, as the map's rows are: position p at entry p where
            # the row holds every position before it; a position deleted and added again,
            # its entry then the last: the copy each run takes keeps the order, not the dead
            # entry, which the asserts below leave in place)
            row = {p: row[p] for p in sorted(row)}
            if row and rng.random() < 0.3:
                p = rng.choice(sorted(row))
                row[p] = row.pop(p)
        if row and rng.random() < 0.1:
            row[rng.choice(sorted(row))] = _Falsy()
        if rng.random() < 0.1:
            row = dict(row) if rng.random() < 0.5 else collections.OrderedDict(row)
            row[2 ** 40] = 1
        pos = rng.sample(range(n + 1), rng.randint(0, n + 1))
        if pos and rng.random() < 0.1:
            pos[rng.randrange(len(pos))] = rng.choice([2 ** 40, 1.0, -1])
        cases.append([row, rng.choice([pos, tuple(pos)]), rng.choice([True, False, True, False, 1, ""])])
    seen = _outcomes("first_page_where", mod, cases)
    assert seen["ok"] >= 300 and sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 10, seen
    assert mod.first_page_where({1: 0, 2: 3, 3: True}, [1, 2, 3], True) == 2
    assert mod.first_page_where({1: 5, 2: False, 3: None}, (1, 2, 3), False) == 2
    assert mod.first_page_where({-1: 0}, [-1], False) == -1 and mod.first_page_where({}, [], True) is None
    # (entry 1 holds TRUE, equal to 1 but no int: read by lookup; entry 1 deleted, 1 added again)
    assert mod.first_page_where({0: 0, True: 1, 2: 0}, [2, 1], True) == 1
    moved = dict.fromkeys(range(4), 0)
    del moved[1]
    moved[1] = 5
    assert mod.first_page_where(moved, [0, 1], True) == 1


@pytest.mark.parametrize("seed", range(100))
def test_first_slot_not_in_agrees(mod, seed):
    """As first_not_in_state over spec slots, or over runtime slots shifted first: slots of
    every kind (past the names, negative, a bool, a big int, one that cannot be added to)."""
    rng = random.Random(seed)
    names = [rng.choice(["idle", "synced", "synced", "".join(["syn", "ced"]), 1]) for _ in range(rng.randint(0, 5))]
    slots = [rng.choice([-2, -1, 0, 1, 2, 3, 4, 5, 6, True, 2 ** 70, None if seed % 9 == 0 else 1])
             for _ in range(rng.randint(0, 6))]
    _agree("first_slot_not_in", mod, [rng.choice([names, tuple(names)]), rng.choice([slots, tuple(slots)]),
                                      "synced", rng.choice([True, False, 1, 0])])
    assert mod.first_slot_not_in(["synced", "idle"], [0, 1], "synced", True) == 2
    assert mod.first_slot_not_in(["synced"], [0, -1], "synced", True) == 0        # no slot
    assert mod.first_slot_not_in(["synced"], (1, 1), "synced", False) is None


def _mutating_name(slots: list):
    """A state name whose comparison empties `slots`: the Python code a comparison may run."""
    class Mutating:
        def __ne__(self, other):
            del slots[:]
            return False
    return Mutating()


@pytest.mark.parametrize("runtime", [False, True])
def test_first_slot_not_in_reads_the_slots_before_comparing(mod, runtime):
    """A name's comparison that empties the slots list changes nothing of what is tested
    (both read the slots first): C once read the list after it, past its end."""
    got = []
    for f in (mod.first_slot_not_in, loops.py_first_slot_not_in):
        slots = [1 - runtime] * 3 + [2 - runtime] * 5
        names = [_mutating_name(slots), "synced"]
        got.append(f(names, slots, "synced", runtime))
    assert got[0] == got[1] is None


def test_first_page_where_follows_a_list_a_lookup_changes(mod):
    """A lookup that runs a colliding key's __eq__, which replaces the positions' items: C
    reads the list as Python's loop does, its length and each item as they are then."""
    got = []
    for f in (mod.first_page_where, loops.py_first_page_where):
        pos = [1] * 64 + [5] + [1] * 64

        class Colliding:
            def __hash__(self):
                return 5

            def __eq__(self, other):
                pos[:] = [9] * 3
                return False
        got.append((f({1: 0, Colliding(): 0, 5: 0, 9: 1}, pos, True), len(pos)))
    assert got[0] == got[1] and got[1][1] == 3        # (the lookup did replace them)


def test_variables_of_agrees(mod):
    """Random flat deltas (variable, key, old value, three items a write): runs of one
    variable's writes, equal names that are other objects, whole-variable writes (key None),
    lists and tuples, and a length that is no multiple of three (a variable read at each third
    item, as slicing does); anything but a list or tuple is refused (TypeError)."""
    rng = random.Random(0)
    names = ["dev", "host", "".join(["d", "ev"]), "slot", 1, True]
    cases = []
    for _ in range(300):
        delta = []
        for _ in range(rng.randint(0, 12)):
            var = rng.choice(names)
            for _ in range(rng.randint(1, 3)):
                delta.extend((var, rng.choice([None, *range(4)]), rng.randint(0, 3)))
        if delta and rng.random() < 0.1:
            del delta[rng.randrange(len(delta)):]
        cases.append([rng.choice([delta, tuple(delta)])])
    seen = _outcomes("variables_of", mod, cases)
    assert seen["ok"] == 300, seen
    for f in (mod.variables_of, loops.py_variables_of):
        for bad in (iter(["dev", 1, 0]), {"dev"}):
            with pytest.raises(TypeError, match="a delta is a list or a tuple, not "):
                f(bad)
    assert mod.variables_of(["dev", 1, 0, "dev", 2, 0, "host", 1, 0, "dev", 3, 0]) == {"dev", "host"}
    assert mod.variables_of([]) == set() and mod.variables_of(("dev", 1)) == {"dev"}


def test_nodes_at_and_prefix_breach_agree(mod):
    """Random positions and host rows; among them positions past the keys (IndexError),
    positions past L (skipped) and pages the host row lacks (KeyError); and what the C
    loops read directly only for the map's own types (a list of tuples, exact int
    positions and slots) taken through the object API otherwise: a negative or TRUE
    position, keys as a tuple, a key that is a list, a slot of 1.0."""
    rng = random.Random(0)
    at, along = [], []
    for i in range(400):
        n = rng.randint(0, 8)
        keys = [(rng.choice("abc"), i) for i in range(n)]
        positions = frozenset(rng.sample(range(n + 2), rng.randint(0, n + 1)))
        if i % 4 == 3:
            keys = rng.choice([keys, tuple(keys), [list(k) for k in keys]])
            positions |= frozenset(rng.sample([-1, True], rng.randint(0, 2)))
        at.append([keys, positions, rng.choice([rng.randint(0, n + 1), True])])
        host = {p: rng.choice([0, 0, 1, 2, False, True, 1.0, 0.0]) for p in rng.sample(range(n + 1), rng.randint(0, n + 1))}
        if rng.random() < 0.4:
            host = {p: host[p] for p in sorted(host)}      # (the map's order: position p at entry p)
        along.append([host, rng.sample(range(n + 1), rng.randint(0, n + 1)), rng.choice([None, *range(n + 2)])])
    seen = _outcomes("nodes_at", mod, at)
    assert seen["ok"] >= 100 and seen["IndexError: list index out of range"] >= 5, seen
    seen = _outcomes("prefix_breach", mod, along)
    assert seen["ok"] >= 100 and sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 5, seen
    assert mod.prefix_breach({1: 0, 2: 0, 3: 5}, [2, 3], 1) == (3, 2)
    assert mod.prefix_breach({0: 1, True: 0, 2: 5}, [2], 1) == (2, 1)
    assert mod.prefix_breach({1: 0, 2: 4, 3: 5}, [2, 3], None) is None     # no parent page: root
    assert mod.prefix_breach({1: 0, 2: 4}, [2], 1) == (2, 1)


def _remove_case(rng, i):
    """A map's removal of a node's pages from a prefix of L positions: the holes (distinct
    positions below L, any order), and the keys and node positions the moves renumber. One
    case in four takes the other paths: holes as a tuple or a set, TRUE or 1.0 among them
    (equal to a position, another type), L as a float, keys as a tuple (whose write raises
    TypeError), keys as lists, a node missing from npos (KeyError)."""
    L = rng.randint(0, 12)
    holes = rng.sample(range(L), rng.randint(0, L))
    nodes = "abcd"
    keys = [(rng.choice(nodes), p) for p in range(L)]
    npos = {x: list(range(L)) for x in nodes}
    odd = i % 4 == 3
    if odd:
        holes = rng.choice([holes, tuple(holes), set(holes), holes + [rng.choice([True, 1.0])],
                            holes + [rng.choice([None, "a"])]])
        L = float(L) if rng.random() < 0.2 else L
        keys = rng.choice([keys, tuple(keys), [list(k) for k in keys]])
        if rng.random() < 0.6:
            npos.pop(rng.choice(nodes))
    return holes, L, keys, npos


def test_vacate_and_renumber_agree(mod):
    """Random removals both ways: where each hole's page comes from (and the new L), then
    the moved pages' keys, node positions and dirt; the map's own types (a list of exact int
    holes, an int L, a list of (node, index) tuples) in C, anything else through the object
    API as Python takes it, each exception at the same point."""
    rng = random.Random(0)
    vac, ren = [], []
    for i in range(400):
        holes, L, keys, npos = _remove_case(rng, i)
        vac.append([holes, L])
        exc, got, _ = _outcome(loops.py_vacate, [holes, L])
        origin = got[0] if exc is None else {}
        dirty = set(rng.sample(range(13), rng.randint(0, 6)))
        ren.append([origin, keys, npos, dirty])
    seen = _outcomes("vacate", mod, vac)
    # (a hole that does not order with the others: sorted's TypeError, from both)
    assert seen["ok"] >= 350 and sum(v for k, v in seen.items() if k.startswith("TypeError")) >= 5, seen
    seen = _outcomes("renumber", mod, ren)
    assert seen["ok"] >= 250 and seen["TypeError: 'tuple' object does not support item assignment"] >= 5, seen
    assert sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 5, seen
    # (a page moved before moves again when the hole it filled becomes the last)
    assert mod.vacate([1, 3], 5) == ({1: 4}, 3)
    assert mod.vacate([4, 2], 5) == ({2: 3}, 3)
    assert mod.vacate([], 5) == ({}, 5)
    keys, npos, dirty = [("a", 0), ("b", 0), ("a", 1), ("b", 1)], {"a": [0, 2], "b": [1, 3]}, {3}
    mod.renumber({0: 3, 1: 2}, keys, npos, dirty)
    assert keys == [("b", 1), ("a", 1), ("a", 1), ("b", 1)] and npos == {"a": [0, 1], "b": [1, 0]} and dirty == {0, 3}


def test_remove_pages_agrees(mod):
    """Random removals over several columns both ways (the map's _remove in one call): each
    column's dict, the reference counts, the delta, the keys, the node positions and the dirt
    as the Python composition of vacate, release, move, spare and renumber leaves them, the
    new L returned; a hole or a spare position outside a column's domain, or a node missing
    from npos, raises the same KeyError at the same point (the writes before it made)."""
    rng = random.Random(1)
    cases = []
    for i in range(400):
        L = rng.randint(0, 12)
        holes = rng.sample(range(L), rng.randint(0, L))
        if i % 6 == 5 and L > 1:
            # (a hole equal to position 1 but no int: the moves' writes at keys the C loop
            # does not index, so no position's value is taken from its reads)
            holes = [h for h in holes if h != 1] + [rng.choice([True, 1.0])]
        nodes = "abcd"
        keys = [(rng.choice(nodes), p) for p in range(L)]
        npos = {x: list(range(L)) for x in nodes}
        if i % 5 == 4:
            npos.pop(rng.choice(nodes))
        # (a domain of L + 1 positions, or one short of L: a KeyError in some column)
        n = L + 1 if i % 7 else max(L - 1, 0)
        refs = {h: rng.choice([-1, 0, 1, 2]) for h in rng.sample(range(1, 5), rng.randint(0, 4))}
        cols = []
        for var, spare_value, slotted in (("dev", False, False), ("host", 0, True), ("hits", 0, False),
                                          ("backupOp", 0, True)):
            pool = [0, 1, 2, 3, True, False] if slotted else VALUES
            cols.append((var, {p: rng.choice(pool) for p in range(n)}, spare_value, refs if slotted else None))
        dirty = set(rng.sample(range(13), rng.randint(0, 6)))
        cases.append([tuple(cols), holes, L, keys, npos, [("x", 0, 0)], dirty, {9}])
    seen = _outcomes("remove_pages", mod, cases)
    assert seen["ok"] >= 250 and sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 30, seen
    dev, host = {0: True, 1: False, 2: True, 3: False}, {0: 4, 1: 0, 2: 5, 3: 0}
    refs, keys, npos = {4: 1, 5: 1}, [("a", 0), ("b", 0), ("b", 1), ("c", 0)], {"a": [0], "b": [1, 2], "c": [3]}
    delta, dirty, slots = [], {3}, set()
    cols = (("dev", dev, False, None), ("host", host, 0, refs))
    assert mod.remove_pages(cols, [0, 1], 4, keys, npos, delta, dirty, slots) == 2
    # (hole 1 takes position 3's page, hole 0 position 2's; positions 2 and 3 become spare)
    assert dev == {0: True, 1: False, 2: False, 3: False} and host == {0: 5, 1: 0, 2: 0, 3: 0}
    assert refs == {4: 0, 5: 1} and slots == {4} and keys == [("b", 1), ("c", 0)]
    assert npos == {"a": [0], "b": [1, 0], "c": [1]} and dirty == {1, 2, 3}
    assert delta_entries(delta) == [("dev", 2, True), ("host", 0, 4), ("host", 2, 5)]


def test_remove_pages_takes_holes_in_any_order(mod):
    """Removals of many holes both ways, given increasing (a node's positions as they were
    handed out), decreasing, or shuffled, fewer or more than the 64 the native loop sorts by
    insertion: the same moves, writes and renumbering."""
    rng = random.Random(2)
    cases = []
    for i in range(120):
        L = rng.randint(1, 160)
        holes = rng.sample(range(L), rng.randint(1, min(L, rng.choice([8, 30, 64, 65, 100]))))
        holes.sort(reverse=i % 3 == 1)
        if i % 3 == 2:
            rng.shuffle(holes)
        keys = [(rng.choice("ab"), p) for p in range(L)]
        npos = {x: list(range(L)) for x in "ab"}
        cols = (("dev", {p: rng.choice([False, True]) for p in range(L + 1)}, False, None),
                ("host", {p: rng.choice([0, 1, 2, 3]) for p in range(L + 1)}, 0, {1: 2, 2: 1}))
        cases.append([cols, holes, L, keys, npos, [], set(rng.sample(range(L), min(L, 5))), set()])
    seen = _outcomes("remove_pages", mod, cases)
    assert seen["ok"] == 120, seen


class _PlainNode:
    """A tree node as the map keys it: hashed and compared by identity (object's own), what
    remove_pages' renumbering reads directly."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _plain_named(x):
    """x with each _PlainNode replaced by its name (runs of one case built twice compared)."""
    if isinstance(x, _PlainNode):
        return "node", x.name
    if isinstance(x, dict):
        return {_plain_named(k): _plain_named(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x), tuple(_plain_named(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return type(x), frozenset(_plain_named(v) for v in x)
    return type(x), x


def _plain_removal(rng):
    """A removal whose keys name nodes of the default hash: the renumbering's direct path, and
    its fallbacks: a node missing from npos (KeyError), a row too short for its page index
    (IndexError), a negative page index, keys of lists or of 3-tuples, an empty dirty set."""
    nodes = [_PlainNode(c) for c in "abcd"]
    L = rng.randint(0, 14)
    holes = rng.sample(range(L), rng.randint(0, L))
    keys = [(rng.choice(nodes), p) for p in range(L)]
    npos = {x: list(range(L)) for x in nodes}
    odd = rng.random()
    if odd < 0.15:
        for x in rng.sample(nodes, 3):
            npos.pop(x)
    elif odd < 0.25:
        npos[rng.choice(nodes)] = list(range(rng.randint(0, L)))
    elif odd < 0.35 and L:
        keys[rng.randrange(L)] = (rng.choice(nodes), -1)
    elif odd < 0.45:
        keys = [list(k) if rng.random() < 0.5 else k + (0,) for k in keys]
    cols = (("dev", {p: rng.choice([False, True]) for p in range(L + 1)}, False, None),
            ("host", {p: rng.choice([0, 1, 2, 3]) for p in range(L + 1)}, 0, {1: 2, 2: 1}))
    dirty = set(rng.sample(range(15), rng.choice([0, 0, 3, 6])))
    return [cols, holes, L, keys, npos, [], dirty, set()]


def _run_named(fn, args):
    try:
        ret, exc = fn(*args), None
    except Exception as e:      # (the same type and message must come from both)
        ret, exc = None, (type(e), _plain_named(e.args))
    return exc, _plain_named((ret, args))


def test_remove_pages_renumbers_plain_nodes_as_python(mod):
    """remove_pages over nodes hashed by identity (the map's, whose renumbering C makes
    directly) both ways, each case built twice from one seed: the same keys, node positions,
    dirt, writes and exceptions, the fallbacks' included."""
    seen = collections.Counter()
    for seed in range(300):
        got = _run_named(mod.remove_pages, _plain_removal(random.Random(seed)))
        want = _run_named(loops.py_remove_pages, _plain_removal(random.Random(seed)))
        assert got == want, seed
        seen["ok" if want[0] is None else want[0][0].__name__] += 1
    assert seen["ok"] >= 150 and seen["KeyError"] >= 5 and seen["IndexError"] >= 5, seen


class _Node:
    """A tree node as the frame reads it: its id (None: a node without one, AttributeError)."""

    def __init__(self, nid):
        if nid is not None:
            self.id = nid

    def __repr__(self):
        return f"_Node({getattr(self, 'id', None)!r})"

    def __eq__(self, other):
        return type(other) is _Node and getattr(self, "id", None) == getattr(other, "id", None)

    __hash__ = object.__hash__


def test_holders_outside_agree(mod):
    """Random changed slots, holders and named ids both ways: a slot with no holder, a holder
    of None (as none), a holder without an id (AttributeError), an unhashable slot
    (TypeError), ids as a tuple, a set, or one whose members compare with its own `==`; runs
    of one holder's slots (its verdict kept), broken by a slot with none or another's."""
    rng = random.Random(0)
    cases = []
    for i in range(400):
        nodes = [_Node(k) for k in range(4)] + ([_Node(None)] if i % 5 == 4 else [])
        slot_page = {h: rng.choice([*nodes, None]) for h in rng.sample(range(8), rng.randint(0, 8))}
        if i % 3 == 0:      # (runs: a node's slots together)
            run = rng.choice(nodes)
            slot_page.update((h, run) for h in range(rng.randint(0, 4), rng.randint(4, 8)))
        if i % 2:
            # (laid out by slot, as the map's: each holder read off its entry)
            slot_page = {**dict.fromkeys(range(9)), **slot_page}
        slots = rng.sample(range(9), rng.randint(0, 9))
        if i % 7 == 6:
            slots.insert(rng.randint(0, len(slots)), [1])
        ids = tuple(rng.sample(range(5), rng.randint(0, 3)))
        cases.append([rng.choice([slots, tuple(slots)]), slot_page, rng.choice([ids, set(ids), [float(x) for x in ids]])])
    seen = _outcomes("holders_outside", mod, cases)
    assert seen["ok"] >= 250 and sum(v for k, v in seen.items() if k.startswith("TypeError")) >= 5, seen
    assert sum(v for k, v in seen.items() if k.startswith("AttributeError")) >= 5, seen
    a, b = _Node(1), _Node(2)
    assert mod.holders_outside([3, 4, 5, 6], {3: a, 4: b, 6: None}, (1,)) == [(4, b)]
    assert mod.holders_outside([1, 2, 3, 4], {1: b, 2: b, 3: a, 4: b}, (1,)) == [(1, b), (2, b), (4, b)]


class _TreeNode:
    """A node as the walk reads it: its `parent` (a property that raises when `broken`)."""

    def __init__(self, name, parent=None, broken=False):
        self.name, self._parent, self.broken = name, parent, broken

    @property
    def parent(self):
        if self.broken:
            raise AttributeError(f"{self.name} has no parent to read")
        return self._parent

    def __repr__(self):
        return f"_TreeNode({self.name!r})"


def _walk(fn, todo, root, mapped: dict, fail_on):
    """Run one walk with callbacks that map as the maps do (enter maps x; leave unmaps x
    and what is mapped below it) and record their calls; raise in the call on `fail_on`."""
    calls = []

    def enter(x):
        calls.append(("enter", x.name))
        if x.name == fail_on:
            raise RuntimeError(f"enter {x.name}")
        mapped[x] = True

    def leave(x):
        calls.append(("leave", x.name))
        mapped.pop(x, None)
    try:
        fn(todo, root, mapped, enter, leave)
        exc = None
    except Exception as e:      # (the same type and message must come from both)
        exc = (type(e), e.args)
    return exc, calls, sorted(x.name for x in mapped)


def test_walk_journaled_agrees(mod):
    """Random trees and journals both ways, the same enter and leave calls in the same order
    and the same mapped nodes after: journaled parents after their children, the root
    journaled, a detached node (parent None) and what hangs below it, a subtree whose top is
    neither mapped nor journaled (left after a pass that makes no progress), a node whose
    parent cannot be read (AttributeError), an enter that raises; journals as a list, a
    tuple, a set."""
    rng = random.Random(0)
    seen = collections.Counter()
    for i in range(500):
        root = _TreeNode("root")
        nodes = []
        for k in range(rng.randint(0, 10)):
            parent = rng.choice([root, root, None, *nodes])
            nodes.append(_TreeNode(k, parent, broken=(i % 9 == 8 and rng.random() < 0.2)))
        mapped = {x: True for x in nodes if rng.random() < 0.4}
        todo = rng.sample(nodes, rng.randint(0, len(nodes))) + ([root] if rng.random() < 0.2 else [])
        todo = rng.choice([todo, tuple(todo), set(todo)])
        fail_on = rng.choice([None] * 8 + [x.name for x in nodes[:2]])
        want = _walk(loops.py_walk_journaled, todo, root, dict(mapped), fail_on)
        got = _walk(mod.walk_journaled, todo, root, dict(mapped), fail_on)
        assert got == want, (i, todo, mapped)
        seen["ok" if want[0] is None else want[0][0].__name__] += 1
        seen["left"] += any(c[0] == "leave" for c in want[1])
    assert seen["ok"] >= 300 and seen["AttributeError"] >= 5 and seen["RuntimeError"] >= 5, seen
    assert seen["left"] >= 100, seen
    # parents first whatever the journal's order: b hangs below a, which hangs below the root
    root = _TreeNode("root")
    a = _TreeNode("a", root)
    b = _TreeNode("b", a)
    c = _TreeNode("c", _TreeNode("x"))          # below a node neither mapped nor journaled
    assert _walk(mod.walk_journaled, [b, c, a], root, {}, None) == \
        (None, [("enter", "a"), ("enter", "b"), ("leave", "c")], ["a", "b"])


class _PageNode(_TreeNode):
    """A tree node as the tree-form WriteThroughPrefix reads it: its parent (see _TreeNode)
    and its children (a dict, or `_Kids`, read through `.values()`)."""

    def __init__(self, name, broken=False):
        super().__init__(name, broken=broken)
        self.children = {}

    def __deepcopy__(self, memo):
        return self         # (the tree is read, never written: both runs read the same nodes)


class _Kids(collections.UserDict):
    """Children of another mapping type than dict (their values read as Python reads them)."""


def _prefix_tree_case(rng, i):
    """A random tree of nodes under a root, their pages at positions (keys, npos), a host row
    and dirty positions; among them nodes without pages, pages the host row lacks (KeyError),
    a node whose parent cannot be read (AttributeError), children of another mapping type, a
    node's pages as a tuple, host values that are bools or floats."""
    root = _PageNode("root")
    nodes = [root]
    npos, keys = {}, []
    for k in range(rng.randint(0, 7)):
        x = _PageNode(k, broken=i % 9 == 8 and rng.random() < 0.2)
        par = rng.choice(nodes)
        x._parent = par
        par.children[k] = x
        nodes.append(x)
        pages = list(range(len(keys), len(keys) + rng.randint(0, 3)))
        keys.extend((x, j) for j in range(len(pages)))
        npos[x] = tuple(pages) if i % 5 == 4 and rng.random() < 0.3 else pages
    if i % 4 == 3:
        for x in nodes:
            x.children = _Kids(x.children)
    if i % 6 == 5:
        npos[root] = [len(keys)]        # (the root's pages are never its children's parent)
    n = len(keys)
    host = {p: rng.choice([0, 0, 1, 2, *([False, True, 1.0, 0.0] if i % 2 else [])])
            for p in range(n + 1) if i % 7 != 6 or rng.random() < 0.8}
    positions = frozenset(rng.sample(range(n + 2), rng.randint(0, n + 1)))
    return [keys, positions, rng.choice([n, n, rng.randint(0, n)]), npos, host, root]


def test_tree_prefix_breach_agrees(mod):
    """Random trees both ways: the same verdict, witness or exception, in nodes_at's order."""
    rng = random.Random(0)
    seen = _outcomes("tree_prefix_breach", mod, [_prefix_tree_case(rng, i) for i in range(600)])
    assert seen["ok"] >= 300 and sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 5, seen
    assert sum(v for k, v in seen.items() if k.startswith("AttributeError")) >= 3, seen
    root, a, b = _PageNode("root"), _PageNode("a"), _PageNode("b")
    a._parent, b._parent, root.children, a.children = root, a, {"a": a}, {"b": b}
    keys, npos = [(a, 0), (a, 1), (b, 0)], {a: [0, 1], b: [2]}
    assert mod.tree_prefix_breach(keys, {0}, 3, npos, {0: 3, 1: 4, 2: 5}, root) is None
    assert mod.tree_prefix_breach(keys, {0}, 3, npos, {0: 3, 1: 0, 2: 5}, root) == (2, 1)    # a child's
    assert mod.tree_prefix_breach(keys, {2}, 3, npos, {0: 3, 1: 0, 2: 5}, root) == (2, 1)    # its own
    assert mod.tree_prefix_breach(keys, {2}, 2, npos, {0: 3, 1: 0, 2: 5}, root) is None      # past L


def test_shifted_agrees(mod):
    """Runtime slots as spec slots both ways: exact ints (their sum in C, 2**61 and past it
    by Python's +), TRUE, 1.0, an int past 64 bits, and items + 1 refuses (None, a str:
    TypeError at the same item); as a list, a tuple, a set, a range."""
    rng = random.Random(0)
    items = [0, 1, 7, -1, 2 ** 61 - 2, 2 ** 61, 2 ** 70, True, 1.0, None, "a"]
    cases = []
    for i in range(400):
        xs = [rng.choice(items[:9]) for _ in range(rng.randint(0, 8))]
        if i % 5 == 4:
            xs.insert(rng.randint(0, len(xs)), rng.choice(items[9:]))
        cases.append([rng.choice([xs, tuple(xs), list(dict.fromkeys(xs))])])
    cases.append([range(3, 9)])
    seen = _outcomes("shifted", mod, cases)
    assert seen["ok"] >= 300 and sum(v for k, v in seen.items() if k.startswith("TypeError")) >= 30, seen
    assert mod.shifted([0, 4, 2 ** 61, True]) == [1, 5, 2 ** 61 + 1, 2]


def test_request_step_agree(mod):
    """The HostTier map's request step both ways on random live requests: free slots, a
    request with no phase, locked nodes that are none, the root, mapped or out of the tree
    (None: the full rebuild), rows past old's end, phases that are no str (1, TRUE, which
    equal but are other values), a true row of reqLen (None, nothing written); and old as a
    list, a dict (KeyError), None or absent (None), reqLen absent (KeyError), a locked node of
    1.0 beside a root of 1, an unhashable request (TypeError). What each wrote (s, the delta,
    the dirty rows) is compared as well."""
    rng = random.Random(0)
    phases = ["idle", "matched", "running", "".join(["run", "ning"]), 1, True]
    cases = []
    for i in range(500):
        rids = rng.sample(range(10, 20), rng.randint(0, 5))
        qtab = [rng.choice([None, r, r]) for r in rids]
        phase = {r: rng.choice(phases) for r in rids if rng.random() < 0.8}
        by_id = {k: f"node {k}" for k in rng.sample(range(1, 8), rng.randint(0, 7))}
        root = rng.choice([0, 0, 1])
        req_node = {r: rng.choice([None, root, *range(1, 8)]) for r in rids if rng.random() < 0.8}
        old = tuple(rng.choice(phases) for _ in range(rng.randint(0, 6)))
        s = {"req": old, "reqLen": (0,) * len(old), "len": 3}
        if i % 6 == 5:
            s["req"] = rng.choice([list(old), dict(enumerate(old, 5)), None, old])
            if rng.random() < 0.2:
                del s[rng.choice(["req", "reqLen"])]
            if rids and rng.random() < 0.5:
                req_node[rids[0]] = 1.0
            if rng.random() < 0.3:
                qtab.insert(0, [1])
        elif i % 6 == 4 and old:
            s["reqLen"] = (0,) * (len(old) - 1) + (rng.choice([4, 0.0, False]),)
        cases.append([qtab, phase, req_node, by_id, root, s, [("len", None, 2)], {rng.randint(1, 3)}])
    seen = _outcomes("request_step", mod, cases)
    assert seen["ok"] >= 350 and sum(v for k, v in seen.items() if k.startswith("TypeError")) >= 5, seen
    assert sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 3, seen
    outcomes = [_outcome(loops.py_request_step, c) for c in cases]
    assert sum(1 for exc, ret, _ in outcomes if exc is None and ret is None) >= 50     # (the full rebuild)
    assert sum(1 for _, ret, _ in outcomes if ret is True) >= 50 and sum(1 for _, ret, _ in outcomes if ret is False) >= 25
    s = {"req": ("idle", "idle"), "reqLen": (0, 0)}
    delta, dirty = [], set()
    assert mod.request_step([None, 5, 6], {5: "matched"}, {5: 1, 6: None}, {1: 0}, 0, s, delta, dirty) is True
    assert s["req"] == ("idle", "matched", "idle") and delta == ["req", None, ("idle", "idle")] and dirty == {2, 3}
    assert mod.request_step([None, 5, 6], {5: "matched"}, {5: 1, 6: None}, {1: 0}, 0, s, delta, dirty) is False
    assert len(delta) == 3      # (the same rows: nothing written)
    s = {"req": ("idle",), "reqLen": (0,)}
    assert mod.request_step([], {}, {}, {}, 0, s, delta, dirty) is False and s["req"] == ("idle",)
    assert mod.request_step([5], {5: "running"}, {5: 9}, {1: 0}, 0, s, delta, dirty) is None
    s["reqLen"] = (4,)
    assert mod.request_step([5], {5: "running"}, {5: 1}, {1: 0}, 0, s, delta, dirty) is None
    assert s["req"] == ("idle",) and len(delta) == 3


class _BindMap:
    """What a request binder reads and writes of its map: the guards' pre-state, the flag, and
    the node-holding tables it reads at each use (requeue: a set, or a list, whose `|=` and
    `add` are not a set's)."""

    def __init__(self, rng: random.Random):
        self.phase_before = self.lock_before = "unset"
        self.req_dirty = False
        self.requeue = rng.choice([set(), {"n0"}, ["n0"]])
        self.loading_nodes = {r: rng.choice([set(), {f"n{r}"}, {f"n{r}", "n1"}]) for r in rng.sample(range(6), 3)}
        if rng.random() < 0.05:
            self.loading_nodes[rng.randrange(6)] = 0          # (falsy: no update)
        self.by_id = {k: f"node {k}" for k in rng.sample(range(6), 3)}

    def seen(self) -> tuple:
        return (self.phase_before, self.lock_before, self.req_dirty, sorted(self.requeue),
                sorted((k, sorted(v) if isinstance(v, set) else v) for k, v in self.loading_nodes.items()))


class _PropBindMap(_BindMap):
    """The flag behind a property whose writes are logged (a data descriptor: the dict entry
    of its name, kept stale, is never what a read or a write sees) and lock_before a class
    attribute until written: the binder reads and writes them as Python does."""

    lock_before = "class"

    def __init__(self, rng: random.Random):
        self.writes = []
        super().__init__(rng)
        del self.lock_before

    @property
    def req_dirty(self):
        return self.__dict__["_dirty"]

    @req_dirty.setter
    def req_dirty(self, value):
        self.writes.append(value)
        self.__dict__["_dirty"] = value
        self.__dict__["req_dirty"] = "stale"

    def seen(self) -> tuple:
        return (*super().seen(), list(self.writes))


class _HookBindMap(_BindMap):
    """Every write through a __setattr__ that logs it, and requeue served by __getattr__:
    the binder takes their paths, not the dict's."""

    def __init__(self, rng: random.Random):
        object.__setattr__(self, "writes", [])
        super().__init__(rng)

    def __setattr__(self, name, value):
        self.writes.append(name)
        object.__setattr__(self, "_requeue" if name == "requeue" else name, value)

    def __getattr__(self, name):
        if name == "requeue":
            return self._requeue
        raise AttributeError(name)

    def seen(self) -> tuple:
        return (*super().seen(), list(self.writes))


class _SlotBindMap:
    """The same map in slots (no instance dict)."""

    __slots__ = ("phase_before", "lock_before", "req_dirty", "requeue", "loading_nodes", "by_id")
    __init__ = _BindMap.__init__
    seen = _BindMap.seen


#: the maps a run draws from (their attributes read and written by the generic calls' rules)
_BIND_MAPS = (_BindMap, _BindMap, _PropBindMap, _HookBindMap, _SlotBindMap)


def _request_binds(make, seed: int) -> tuple:
    """A random run of request-binder calls made by `make` (the C one or its Python twin):
    (each call's return or exception, the map's and bookkeeping's state after each)."""
    rng = random.Random(seed)
    rids = [None, 0, 1, 2, 3, 4, 5, [7]]             # ([7]: unhashable, TypeError)
    phase = {r: rng.choice(["matched", "running", 1]) for r in rng.sample(range(6), 3)}
    ending = set(rng.sample(range(6), 1))
    req_node = {r: rng.choice([None, 0, 3]) for r in rng.sample(range(6), 3)}
    qtab = [rng.choice([None, 9, 8]) for _ in range(rng.randint(0, 4))]
    qslot = {r: rng.choice([1, 2, 5, 0, -1, "x"]) for r in rng.sample(range(6), rng.randint(0, 3))}
    m = _BIND_MAPS[seed % len(_BIND_MAPS)](rng)
    calls = []

    def binder(action, fields):
        calls.append((action, dict(fields)))
        if fields.get("fail"):
            raise RuntimeError("the binder's own")
        rid = fields.get("rid")
        if isinstance(rid, int):              # (moves the phases on, as a binder does)
            if action == "RequestMatch":
                phase[rid] = "matched"
            elif action == "RequestFinish":
                phase.pop(rid, None)
        return [(action, None)]
    bind = make(binder, phase, ending, req_node, qslot, qtab, {"RequestMatch": 1, "RequestFinish": None},
                frozenset({"PrefetchStart", "DeviceInsert"}), frozenset({"BackupStart"}))
    out = []
    for _ in range(12):
        action = rng.choice(["RequestMatch", "RequestFinish", "PrefetchStart", "BackupStart", "DeviceEvict"])
        fields = {} if rng.random() < 0.1 else {"rid": rng.choice(rids)}
        if rng.random() < 0.5:
            fields["node"] = rng.choice([None, 0, 1, 2, 3, 4, 5, [1]])
        if rng.random() < 0.05:
            fields["fail"] = True
        try:
            ret, exc = bind(m, action, fields), None
        except Exception as e:
            ret, exc = None, (type(e), e.args)
        out.append((ret, exc, m.seen(), dict(phase), list(qtab), dict(qslot), list(calls)))
    return tuple(out)


def test_request_binders_agree(mod):
    """IncrementalHostTierMap's request step both ways on random runs: requests taking their
    slot (a free one, or one past the table's end) and freeing it (the table's trailing free
    slots dropped), their load-backs' nodes re-mapped, a copy's node re-mapped; a request
    that is not live, one ending, none; an unhashable request or node (TypeError), a slot
    number that is no int or out of the table (TypeError, IndexError: the same writes made
    before), a binder that raises; a requeue that is a list."""
    seen = collections.Counter()
    for seed in range(600):
        want = _request_binds(loops.py_request_binder, seed)
        got = _request_binds(mod.request_binder, seed)
        assert got == want, seed
        for ret, exc, *_ in want:
            seen["ok" if exc is None else exc[0].__name__] += 1
        seen["took"] += sum(len(b[4]) > len(a[4]) for a, b in zip(want, want[1:]))
        seen["freed"] += sum(len(b[4]) < len(a[4]) for a, b in zip(want, want[1:]))
    assert seen["ok"] >= 3000 and seen["TypeError"] >= 100 and seen["RuntimeError"] >= 50, seen
    assert seen["IndexError"] >= 10 and seen["took"] >= 200 and seen["freed"] >= 50, seen
    # a request's first match takes the first free slot; its finish frees it, and the free
    # slots at the table's end are dropped
    phase, qslot, qtab = {}, {}, [None, 4]
    m = _BindMap(random.Random(0))
    m.loading_nodes, m.requeue = {5: {"a"}}, set()

    def binder(action, fields):
        if action == "RequestMatch":
            phase[fields["rid"]] = "matched"
        else:
            phase.pop(fields["rid"])
        return "steps"
    bind = mod.request_binder(binder, phase, set(), {}, qslot, qtab, {"RequestMatch": 1, "RequestFinish": None},
                              frozenset(), frozenset())
    assert bind(m, "RequestMatch", {"rid": 5}) == "steps"
    assert qtab == [5, 4] and qslot == {5: 1} and m.requeue == {"a"} and m.req_dirty is True
    assert (m.phase_before, m.lock_before) == (None, None)
    qtab[1] = None
    bind(m, "RequestFinish", {"rid": 5})
    assert qtab == [] and qslot == {} and m.phase_before == "matched"

def test_a_request_binder_sees_a_class_changed_under_it(mod):
    """The C request step keeps, for each attribute it writes of the map, the type it found
    without a class attribute of that name (its version tag); a property set on the class
    afterwards takes the next write, as Python's setattr gives it."""
    for make in (loops.py_request_binder, mod.request_binder):
        cls = type("Fresh", (_BindMap,), {})
        m = cls(random.Random(0))
        bind = make(lambda action, fields: "steps", {}, set(), {}, {}, [], {}, frozenset(), frozenset())
        bind(m, "RequestMatch", {"rid": 1})
        assert m.req_dirty is True
        writes = []
        cls.req_dirty = property(lambda self: "prop", lambda self, value: writes.append(value))
        m.__dict__["req_dirty"] = False
        bind(m, "RequestMatch", {"rid": 1})
        assert writes == [True] and m.__dict__["req_dirty"] is False, make


# ---------------------------------------------------------------- the fused pass's loops in C
# A function of the generated fused pass's shape, with what the translator must get right:
# short-circuits that skip a read that would raise, a conditional expression, `is` and `is
# not` against a class (of a value whose type no instance overrides __class__ on, and of one
# that says it is an int), `in`, a string constant no C literal could hold as it is, an int
# past 63 bits (its loop stays Python) and a lambda (its loop stays Python).

class _SaysInt:
    """A value whose `__class__` says int: `x.__class__ is int` reads the attribute (false,
    so that `not x` lets the class tests decide the predicate)."""
    __class__ = property(lambda self: int)

    def __bool__(self) -> bool:
        return False


class _IntSaysBool(int):
    """An int subclass whose `__class__` says bool: not one of the exact types the class test
    decides inline (its attribute is read, as for any other value)."""
    __class__ = property(lambda self: bool)


class _StrSaysInt(str):
    """A str subclass whose `__class__` says int (see _IntSaysBool)."""
    __class__ = property(lambda self: int)


def _sample_fused(C, s, D, V=None, skip=frozenset()):
    try:
        _a0 = s["f"].__getitem__
        _r1 = C["S"]
        for e_X in it(D["X"]):
            _e0 = _a0(e_X)
            if not ((((_e0.__class__ is int and _e0 in _r1 and e_X != 'qu"o\\te\u00e9\0') or
                      (_e0 == "ok" if e_X < 3 else not _e0)) and _e0.__class__ is not float)
                    or (_e0.__class__ is int and not _e0 and e_X == 1)):
                raise FastPathFailed()
        for e_Y in it(D["Y"]):
            if not (e_Y != 2**70):
                raise FastPathFailed()
        for e_Z in it(D["Z"]):
            if not ((lambda z: z)(e_Z) is not None):
                raise FastPathFailed()
        return True
    except Exception:
        return False


def _sample_module(fn):
    """A module holding the sample fused pass `fn` and the names it reads."""
    import types
    gen = types.ModuleType("sample_fused")
    gen.inc_all, gen.it, gen.FastPathFailed, gen.fast_ap, gen.no_ap = fn, it, FastPathFailed, fast_ap, no_ap
    return gen


def test_a_fused_pass_translates_as_its_python_decides(mod):
    from hicache.monitors import fused_native
    gen = _sample_module(_sample_fused)
    csrc, _, loops_ = fused_native.translate(_sample_fused)
    assert [lp.element for lp in loops_] == ["e_X"]          # (Y: a big int; Z: a lambda)
    looped = fused_native.loops_native(gen)
    assert looped is not _sample_fused and looped.__globals__["_native_loop_0"] is not None
    # (what serves: the function whole, Y's and Z's loops run as Python from it)
    whole = fused_native.native_inc_all(gen)
    assert type(whole).__name__ == "FusedPass"
    rng = random.Random(3)
    values = [0, 1, 2, True, False, "ok", "no", None, 'qu"o\\te\u00e9\0', (1,), 1.5, _SaysInt(), _IntSaysBool(0),
              _StrSaysInt("")]
    seen = collections.Counter()
    for _ in range(3000):
        keys = list(range(6)) + ['qu"o\\te\u00e9\0']
        f = {k: rng.choice(values) for k in keys if rng.random() < 0.9}        # (a key missing: KeyError)
        C = {"S": frozenset(rng.sample([0, 1, 2, 3], rng.randint(0, 4)))}
        D = {d: frozenset(rng.sample(keys[:6], rng.randint(0, 3))) for d in "XYZ"}
        if rng.random() < 0.1:
            D["X"] = D["X"] | {keys[6]}                                          # ('<' on a str: TypeError)
        want = _sample_fused(C, {"f": f}, D)
        assert looped(C, {"f": f}, D) is want, (f, C, D)
        assert whole(C, {"f": f}, D) is want, (f, C, D)
        seen[want] += 1
    assert seen[True] > 100 and seen[False] > 100, seen


# ---------------------------------------------------------------- the fused pass compiled whole
# The set-up's constructs (fused_whole.py): flags as `and`/`or` values and `in`/`is`/`not`,
# method calls, subscripts, conditional values, a builtin, arithmetic, a negation and a
# tuple; a loop whose predicate reads a tuple built before it; and statements that stay
# Python (a generator expression, a lambda's loop), run from C with the names they read.

def _sample_whole(C, s, D, V=None, skip=frozenset()):
    """A sample fused pass of the generated shape."""
    try:
        _k0 = "A" not in skip
        _k1 = "B" not in skip
        if (_k0 and (V is None or "f" in V)):
            _u0 = _k0 and (V is None or not V.isdisjoint(C["R"]))
            _a0 = fast_ap(s["f"]) if _u0 or _k1 else no_ap(s["f"])
            _r1 = C["S"]
            _t2 = (_r1, len(_r1) * 2 - 1)
            for e_X in it(D["X"]):
                _e0 = _a0(e_X)
                if not ((not _u0 or _e0 in _r1) and (not _k1 or (_e0 != _t2[1] and _t2[1] != -_e0))
                        and (_e0 if e_X < 2 else True)):
                    raise FastPathFailed()
        if _k1 and D["Y"] and not all(y != 3 for y in D["Y"]):
            raise FastPathFailed()
        for e_Z in it(D["Z"]):
            if not ((lambda z: z % 2)(e_Z) == C["parity"]):
                raise FastPathFailed()
        if C.get("w"):
            _r9 = C["w"]
        if D["W"]:
            for e_W in it(D["W"]):
                if not (e_W < _r9):          # (_r9 unbound unless C["w"]: UnboundLocalError)
                    raise FastPathFailed()
        return True
    except Exception:
        return False


def test_a_fused_pass_compiles_whole_as_its_python_decides(mod):
    from hicache.monitors import fused_native, fused_whole
    from hicache.tla.values import Fcn
    csrc, escapes = fused_whole.translate(_sample_whole)
    assert len(escapes) == 2 and "pred_0" in csrc          # (Y's `all`, Z's lambda; X's loop in C)
    whole = fused_native.native_inc_all(_sample_module(_sample_whole))
    assert type(whole).__name__ == "FusedPass"
    rng = random.Random(4)
    values = [0, 1, 2, 3, True, False, None, "ok", (1,)]
    seen = collections.Counter()
    for _ in range(4000):
        f = Fcn({k: rng.choice(values) for k in range(5) if rng.random() < 0.9})   # (a key missing: KeyError)
        C = {"S": frozenset(rng.sample([0, 1, 2, 3, "ok"], rng.randint(0, 5))), "R": frozenset({"f", "g"}),
             "parity": rng.choice([0, 1, None])}
        if rng.random() < 0.05:
            del C["S"]                                                          # (a missing constant)
        C["w"] = rng.choice([None, 0, 3, 9])
        D = {d: frozenset(rng.sample(range(5), rng.randint(0, 3))) for d in "XYZW"}
        V = rng.choice([None, frozenset(), frozenset({"f"}), frozenset({"g"}), {"f", "h"}])
        skip = rng.choice([frozenset(), frozenset({"A"}), frozenset({"B"}), frozenset({"A", "B"})])
        args = rng.choice([(C, {"f": f}, D), (C, {"f": f}, D, V), (C, {"f": f}, D, V, skip)])
        want = _sample_whole(*args)
        assert whole(*args) is want, args
        seen[want] += 1
    assert seen[True] > 300 and seen[False] > 300, seen
    with pytest.raises(TypeError):
        whole(C, {"f": f}, D, V=None)          # (by position only, as the monitors call it)
    with pytest.raises(TypeError):
        whole(C, {"f": f})


def test_a_whole_pass_lets_what_is_no_exception_through(mod):
    """The pass does not hold on any Exception, as the Python's `except Exception` makes it;
    a KeyboardInterrupt (a BaseException) raised by a read goes through, in C and in an
    escaped statement alike."""
    from hicache.monitors import fused_native
    from hicache.tla.values import Fcn

    class Interrupting(dict):
        def __missing__(self, key):
            raise KeyboardInterrupt

    whole = fused_native.native_inc_all(_sample_module(_sample_whole))
    C = Interrupting({"S": frozenset({1, 5}), "R": frozenset({"f"}), "w": None})
    f = Fcn(Interrupting({0: 1}))
    nothing = frozenset()
    assert whole(C, {"f": f}, {"X": frozenset({0}), "Y": nothing, "Z": nothing, "W": nothing}) is True
    with pytest.raises(KeyboardInterrupt):                      # (f[1], read in C)
        whole(C, {"f": f}, {"X": frozenset({1}), "Y": nothing, "Z": nothing, "W": nothing})
    with pytest.raises(KeyboardInterrupt):                      # (C["parity"], read by Z's lambda loop)
        whole(C, {"f": f}, {"X": nothing, "Y": nothing, "Z": frozenset({1}), "W": nothing})
    C["parity"] = 0
    assert whole(C, {"f": f}, {"X": nothing, "Y": nothing, "Z": frozenset({1}), "W": nothing}) is False
    assert whole(C, {"f": f}, {"X": nothing, "Y": nothing, "Z": frozenset({2}), "W": nothing}) is True


def _sample_no_reads(C, s, D, V=None, skip=frozenset()):
    """A sample pass whose readers are no_ap's where V leaves their conjuncts out, and whose
    loop applies the one it holds whichever it is."""
    try:
        _u0 = V is None or "f" in V
        _a0 = fast_ap(s["f"]) if _u0 else no_ap(s["f"])
        _a1 = no_ap(s["g"])
        for e_X in it(D["X"]):
            if not (_a0(e_X) != 3 and _a1(e_X) != 4):
                raise FastPathFailed()
        return True
    except Exception:
        return False


def test_a_whole_pass_reads_no_ap_as_its_python(mod):
    """The set-up's `no_ap(x)` is rt's no_ap's one answer, rt._NO_READ, with no call, where the
    module's no_ap is rt's (fused_whole's no_reader); a module binding another no_ap has it
    called, once a call, with what it returns applied: the pass decides as the Python does,
    and calls that no_ap as often."""
    import types
    from hicache.monitors import fused_native, fused_whole, rt
    from hicache.tla.values import Fcn
    assert "no_reader(" in fused_whole.translate(_sample_no_reads)[0]
    calls = []

    def other_no_ap(f):
        calls.append(f)
        return f.d.get if type(f) is Fcn else rt._NO_READ

    rng = random.Random(15)
    # (calls.append: a builtin other than rt's no_ap, returning None, which no running conjunct
    # reads: called as the Python calls it)
    for no_ap_of in (no_ap, rt.py_no_ap, other_no_ap, calls.append):
        # (a copy of the function reading this no_ap, as its module does: a pass is made once
        # per function)
        names = dict(_sample_no_reads.__globals__, no_ap=no_ap_of)
        fn = types.FunctionType(_sample_no_reads.__code__, names, "inc_all", _sample_no_reads.__defaults__)
        gen = _sample_module(fn)
        gen.no_ap = no_ap_of
        whole = fused_native.native_inc_all(gen)
        assert type(whole).__name__ == "FusedPass"
        seen = collections.Counter()
        for _ in range(1500):
            s = {v: Fcn({k: rng.choice([0, 3, 4]) for k in range(4) if rng.random() < 0.9}) if rng.random() < 0.9
                 else rng.choice([(3, 4), None, 4]) for v in "fg"}
            D = {"X": frozenset(rng.sample(range(4), rng.randint(0, 3)))}
            V = rng.choice([None, frozenset(), frozenset({"f"}), {"g"}])
            del calls[:]
            want = fn({}, s, D, V)
            called = list(calls)
            del calls[:]
            assert whole({}, s, D, V) is want, (no_ap_of, s, D, V)
            assert calls == called
            seen[want] += 1
        assert seen[True] > 100 and seen[False] > 100, (no_ap_of, seen)


_kept_readers: list = []


def _sample_seq_reads(C, s, D, V=None, skip=frozenset()):
    """A sample pass reading a sequence through its reader at every element (fused_whole's
    SeqAt, made anew, or the one its site keeps reused, as the sequence changes; rt's reader
    of it made only for a read outside 1..n), a constant indexed by an int (a tuple's item
    read off it), a name that may be unbound and a global nothing binds."""
    try:
        _a0 = fast_ap(s["q"])
        if C.get("keep"):
            _kept_readers.append(_a0)        # (a Python statement: the reader held past the pass)
        _r1 = C["R"][1]
        _r2 = C["R"][0]
        if C.get("m"):
            _r3 = _bound_nowhere             # noqa: F821 (a NameError where read)
        for e_X in it(D["X"]):
            if not (_a0(e_X) != _r1 and _r2 != e_X):
                raise FastPathFailed()
        if D["Y"]:
            for e_Y in it(D["Y"]):
                if not (e_Y != _r3):          # (_r3 unbound unless C["m"]: UnboundLocalError)
                    raise FastPathFailed()
        return True
    except Exception:
        return False


def test_a_whole_pass_reads_sequences_constants_and_globals_as_its_python(mod):
    """The set-up's reads where it borrows them (names bound at every use, globals, tuples
    indexed by an int) and a sequence's reader, made again or reused in place as the
    sequence changes from step to step, and kept whole while a statement holds it: the
    pass decides as the Python does, and a held reader still reads its own sequence."""
    from hicache.monitors import fused_native, fused_whole
    csrc, escapes = fused_whole.translate(_sample_seq_reads)
    assert len(escapes) == 1 and "global_missing" in csrc
    gen = _sample_module(_sample_seq_reads)
    gen._kept_readers = _kept_readers
    whole = fused_native.native_inc_all(gen)
    assert type(whole).__name__ == "FusedPass"
    rng = random.Random(6)
    values = [0, 1, 2, "a", None, True]
    seqs = [tuple(rng.choice(values) for _ in range(rng.randint(0, 4))) for _ in range(6)]
    seen = collections.Counter()
    kept = []
    for _ in range(3000):
        q = rng.choice(seqs) if rng.random() < 0.5 else tuple(rng.choice(values) for _ in range(rng.randint(0, 4)))
        R = rng.choice([(0, 5), (7, "a", 3), (1,), (), [2, 1], {0: 1, 1: 2}, (True, None)])
        C = {"R": R, "m": rng.random() < 0.1, "keep": rng.random() < 0.05}
        D = {"X": frozenset(rng.sample([-1, 0, 1, 2, 3, 4, 5, True, "a"], rng.randint(0, 3))),
             "Y": frozenset(rng.sample([0, 5], rng.randint(0, 1)))}
        want = _sample_seq_reads(C, {"q": q}, D)
        del _kept_readers[:]
        assert whole(C, {"q": q}, D) is want, (q, C, D)
        kept += [(r, q) for r in _kept_readers]
        del _kept_readers[:]
        seen[want] += 1
    assert seen[True] > 300 and seen[False] > 300, seen
    assert kept
    for r, q in kept:
        assert [r(i) for i in range(1, len(q) + 1)] == list(q)
        with pytest.raises(Exception):
            r(len(q) + 1)


def _keeps_a_name(C, s, D, V=None, skip=frozenset()):
    """An untranslatable statement (a lambda) binding a name a later statement reads."""
    try:
        _r0 = (lambda: C["S"])()
        if not (0 in _r0):
            raise FastPathFailed()
        return True
    except Exception:
        return False


def _reads_before_binding(C, s, D, V=None, skip=frozenset()):
    """An untranslatable loop reading a name it binds only later in its body (the value
    before the loop, from another statement, on its first element)."""
    try:
        _e0 = 1
        for e_X in it(D["X"]):
            if not ((lambda: _e0)() == 1):
                raise FastPathFailed()
            _e0 = e_X
        return True
    except Exception:
        return False


def test_a_pass_whose_escapes_would_lose_a_name_is_not_compiled_whole(mod):
    """A statement run as Python keeps what it binds: one whose binding another statement
    reads, or that reads a name before binding it, leaves the function to fused_native's
    loops (or the Python), which decide as the Python does."""
    from hicache.monitors import fused_native, fused_whole
    for fn in (_keeps_a_name, _reads_before_binding):
        assert fused_whole.translate(fn) is None, fn.__name__
        got = fused_native.native_inc_all(_sample_module(fn))
        assert type(got).__name__ != "FusedPass"
    assert _keeps_a_name({"S": {0}}, {}, {}) is True and _keeps_a_name({"S": {1}}, {}, {}) is False
    assert fused_native.native_inc_all(_sample_module(_reads_before_binding))({}, {}, {"X": frozenset({1, 2})}) \
        is _reads_before_binding({}, {}, {"X": frozenset({1, 2})})


class _Slotted:
    __slots__ = ("a", "b")


class _Journal:
    """A journal that is not a set: anything with `add` serves."""

    def __init__(self):
        self.seen = []

    def add(self, x):
        self.seen.append(x)


@pytest.mark.parametrize("make", ["native", "python"])
def test_a_tracked_class_journals_each_write_of_a_journaled_field(mod, make):
    """Both forms of `tracked_class` (C and the Python that defines it): a field keeps the
    base's slot (AttributeError while unset, and the class reads the slot's descriptor), each
    write of a journaled field stores and adds the object to every journal in that field's
    list as it is at that write (a journal appended later sees the writes after), a write of
    another field journals nothing, a delete of a journaled field is refused and leaves the
    value while another field's goes through; it cannot be subclassed (a subclass's writes
    would be the generic ones)."""
    fn = mod.tracked_class if make == "native" else loops.py_tracked_class
    journals: dict = {"a": [set()]}
    cls = fn(_Slotted, journals, "T")
    assert cls.__name__ == "T" and cls.__slots__ == () and cls.__mro__[1] is _Slotted
    fixed = cls.__dict__["_hicache_journals"]
    assert dict(fixed) == journals and fixed["a"] is journals["a"] and cls.a is _Slotted.__dict__["a"]
    with pytest.raises(TypeError):
        fixed["b"] = []         # (read-only: the journaled names are the class's for good)
    journals["b"] = [set()]     # (the caller's dict is not the class's: b stays unjournaled)
    x, y = cls(), cls()
    with pytest.raises(AttributeError):
        x.a
    x.a = 1
    assert x.a == 1 and journals["a"][0] == {x}
    later = _Journal()
    journals["a"].append(later)
    y.a = "v"
    setattr(y, "a", None)
    x.b = 2                     # (not journaled)
    assert (x.a, y.a, x.b) == (1, None, 2)
    assert journals["a"][0] == {x, y} and later.seen == [y, y] and journals["b"][0] == set()
    with pytest.raises(AttributeError, match="journaled field 'a'"):
        del y.a
    assert y.a is None and later.seen == [y, y]
    del x.b
    with pytest.raises(AttributeError):
        x.b
    del journals["a"][0]
    x.a = 3
    assert later.seen == [y, y, x]
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("U", (cls,), {"__slots__": ()})
    with pytest.raises(AttributeError):
        x.c = 1                 # (no such slot: the base's refusal)
    with pytest.raises(TypeError):
        setattr(x, 7, 1)
    assert later.seen == [y, y, x]

    class Name(str):
        pass
    setattr(x, Name("a"), 5)    # (a str subclass equal to the field's name is that field)
    assert x.a == 5 and later.seen == [y, y, x, x]


@pytest.mark.parametrize("make", ["native", "python"])
def test_a_tracked_class_journals_the_object_after_the_store(mod, make):
    """The object is journaled after its write is stored (a journal reading the field at the
    add sees the new value), and a write the base refuses journals nothing."""
    fn = mod.tracked_class if make == "native" else loops.py_tracked_class
    seen = []

    class Reading:
        def add(self, obj):
            seen.append(obj.a)
    reading = Reading()
    journals = {"a": [reading], "c": [reading]}
    cls = fn(_Slotted, journals, "T")
    x = cls()
    x.a = "new"
    assert seen == ["new"]
    with pytest.raises(AttributeError):
        x.c = 1                 # (journaled, but no such slot: refused before any journal)
    assert seen == ["new"]


@pytest.mark.parametrize("make", ["native", "python"])
def test_many_tracked_classes_each_journal_their_own_fields(mod, make):
    """More journaled names than the C side's pointer filter holds (32): each class still
    journals exactly its own fields, and a field another class journals, written on this
    one, journals nothing."""
    fields = [f"f{i}" for i in range(40)]
    base = type("Wide", (), {"__slots__": tuple(fields)})
    fn = mod.tracked_class if make == "native" else loops.py_tracked_class
    made = [(f, fn(base, {f: [set()]}, f"T{f}")) for f in fields]
    for i, (f, cls) in enumerate(made):
        x = cls()
        setattr(x, f, i)
        other = fields[(i + 1) % len(fields)]
        setattr(x, other, -i)
        mine = cls._hicache_journals[f][0]
        assert mine == {x} and getattr(x, f) == i and getattr(x, other) == -i
    for f, cls in made:
        assert len(cls._hicache_journals[f][0]) == 1


@pytest.mark.parametrize("make", ["native", "python"])
def test_a_tracked_class_whose_journal_holds_its_object_is_collected(mod, make):
    """The cycle class -> journals -> journal -> object -> class, referenced from nowhere else,
    is garbage."""
    fn = mod.tracked_class if make == "native" else loops.py_tracked_class
    journals: dict = {"a": [set()]}
    cls = fn(_Slotted, journals, "T")
    x = cls()
    x.a = 1
    assert journals["a"][0] == {x}
    ref = weakref.ref(cls)
    del cls, x, journals
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("make", ["native", "python"])
def test_tracked_class_refuses_what_it_cannot_track(mod, make):
    fn = mod.tracked_class if make == "native" else loops.py_tracked_class

    class Own:
        __slots__ = ("a",)

        def __setattr__(self, k, v):
            object.__setattr__(self, k, v)
    with pytest.raises(TypeError, match="journals"):
        fn(_Slotted, [], "T")
    with pytest.raises(TypeError, match="journals"):
        fn(_Slotted, {"a": set()}, "T")
    with pytest.raises(TypeError, match="generic way"):
        fn(Own, {}, "T")
    with pytest.raises(TypeError):
        fn(len, {}, "T")


class _MapNode:
    """A tree node as remap_node reads it (the watched fields, its id and its ops in flight),
    named for the comparison; hashed by identity, as the runtime's nodes are."""

    __slots__ = ("name", "id", "parent", "n", "device", "loading", "stored", "hit_count", "host", "inflight")

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"_MapNode({self.name!r})"


def _named(x):
    """x with every _MapNode replaced by its name, dicts by their items in order, and every
    value tagged with its type (TRUE is not 1 to the map)."""
    if isinstance(x, _MapNode):
        return "node", x.name
    if isinstance(x, dict):
        return dict, [(_named(k), _named(v)) for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return type(x), [_named(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return type(x), frozenset(_named(v) for v in x)
    return type(x), x


def _remap_run(fn, seed: int, own=None, cls=None):
    """Build one random map state and node set from `seed`, re-map a random sequence of its
    nodes with `fn` (their fields changed between some calls), and return (the exception
    raised, if any, as type and args; the callbacks' calls; every container after). `own`: the
    node_slots the context holds itself (the native module's, which remap_node computes inline,
    or its Python twin), its calls not recorded, the nodes' slots then also tuples, slots that
    are no exact ints (a bool, a float: its fallback) and blocking copies' slots longer than
    the node; else a recording wrapper of host_tier's."""
    from hicache.monitors.maps.host_tier import node_slots

    rng = random.Random(seed)
    calls = []
    root = _MapNode("root")
    nodes = []
    slot_pool = [0, 1, 2, 3, 4, True, 2.0]

    def set_fields(x):
        x.id = rng.choice([x.name, x.name, x.name, "shared"])
        x.parent = rng.choice([root, root, None, *nodes[:4]])
        x.n = rng.choice([0, 1, 2, 3, 3, 4, True, 2.0])
        x.device = rng.choice([None, "dev"])
        x.loading = rng.choice([None] * 12 + [5, 5, 13])
        x.stored = rng.choice([0, 1, None, True, "", "s"])
        x.hit_count = rng.choice([0, 1, 2, 5, True, 1.5])
        x.host = rng.choice([None, None, [rng.randrange(5) for _ in range(rng.randint(0, 5))]])
        x.inflight = rng.choice([None] * 4 + [[], ["w"], ["w"], ["r"]] * 3 + [["boom"]])
        if own is not None and x.host is not None:
            x.host = rng.choice([list, tuple])(rng.choice([rng.randrange(600), True, 2.0]) if rng.random() < 0.05
                                               else rng.randrange(600) for _ in x.host)

    for k in range(rng.randint(1, 5)):
        x = (cls or _MapNode)(f"n{k}")
        set_fields(x)
        nodes.append(x)
    npos = {x: rng.sample(range(12), rng.randint(0, 4)) for x in nodes if rng.random() < 0.5}
    up = {x: rng.choice([root, None, *nodes]) for x in nodes if rng.random() < 0.5}
    kids = {p: {x for x in nodes if rng.random() < 0.4} for p in [root, *nodes] if rng.random() < 0.5}
    nval = {}
    slot_changed = {x for x in nodes if rng.random() < 0.3}
    sync_backup = {x.name: [rng.randrange(5) for _ in range(rng.randint(0, 3))] for x in nodes if rng.random() < 0.2}
    if own is not None:
        sync_backup.update({x.name: rng.choice([list, tuple])(rng.randrange(600) for _ in range(rng.randint(0, 6)))
                            for x in nodes if rng.random() < 0.2})
    # (positions 9..11 missing in some cases: a KeyError from some write)
    size = 12 if rng.random() < 0.85 else 9
    node_cols = tuple((var, {p: rng.choice(pool) for p in range(size)})
                      for var, pool in (("dev", [False, True, 0, 1]), ("stor", [False, True]),
                                        ("hits", [0, 1, 2, True]), ("loadReq", [0, 1, 5, False])))
    tree_refs = {h: rng.choice([0, 1, 2]) for h in range(1, 6) if rng.random() < 0.5}
    backup_refs = {h: rng.choice([0, 1]) for h in range(1, 6) if rng.random() < 0.5}
    if rng.random() < 0.5:
        # (laid out by slot, as the map's: the counts written in their entries)
        tree_refs, backup_refs = ({**dict.fromkeys(range(6), 0), **refs} for refs in (tree_refs, backup_refs))
    slot_cols = (("host", {p: rng.choice(slot_pool) for p in range(size)}, tree_refs),
                 ("backupOp", {p: rng.choice(slot_pool) for p in range(size)}, backup_refs))

    def in_flight(x):
        calls.append(("in_flight", x.name))
        if x.inflight == ["boom"]:
            raise RuntimeError("no op to read")
        return x.inflight == ["w"]

    def slots_of(hs, pending, n, backing):
        calls.append(("node_slots", hs, pending, n, backing))
        return node_slots(hs, pending, n, backing)

    def resize(m, x, pos, n):
        calls.append(("resize", m, x.name, list(pos), n))
        del pos[int(n):]
        pos.extend((7 + i) % 12 for i in range(len(pos), int(n)))

    def loading_req(m, x):
        calls.append(("loading_req", m, x.name))
        if x.loading == 13:
            raise LookupError("no request slot")
        return x.loading % 3

    # (slot_page empty, or laid out by slot as the map's: its holders read and written in their
    # entries)
    slot_page = dict.fromkeys(range(8 if own is None else 600)) if len(nodes) % 2 else {}
    ctx = (npos, {}, up, kids, nval, slot_changed, sync_backup, slot_page, node_cols, slot_cols, in_flight,
           slots_of if own is None else own, resize, loading_req)
    delta, changed, dirty, slots = ["x", 0, 0], {}, {11}, {9}
    step = (delta, changed, dirty, slots, "the map")
    exc = None
    # (the dicts the re-mapping writes by position, in place where it can: slot_page, the
    # node and slot columns, the reference counts)
    written, stale = [slot_page, *(col for _, col in node_cols), *(d for _, col, refs in slot_cols for d in (col, refs))], []
    try:
        for i in range(rng.randint(1, 8)):
            x = rng.choice(nodes)
            if rng.random() < 0.3:
                set_fields(x)
            calls.append(("remap", x.name))
            tagged = _tags(written)
            try:
                fn(ctx, step, x)
            finally:
                stale += _stale(tagged)          # (each call's, raised or not)
    except Exception as e:      # (the same type and message from both)
        exc = type(e), e.args
    assert not stale, stale
    calls.append(("slot writes", sum(v in ("host", "backupOp") for v in delta[0::3])))
    if cls is not None:
        calls.append(("reads", cls.log[:]))
    ids = [(x.name, x.id) for x in nodes]
    if cls is not None:
        del cls.log[:]
    return exc, calls, _named((ctx[:10], step[:4], ids))


def _seeded_runs_agree(run, py_fn, c_fn, seeds: int = 600) -> list:
    """Each seed's `run` both ways (Python's `py_fn`, the native `c_fn`), which must agree;
    the Python way's outcomes, in the seeds' order."""
    outcomes = []
    for seed in range(seeds):
        want = run(py_fn, seed)
        assert run(c_fn, seed) == want, seed
        outcomes.append(want)
    return outcomes


def test_remap_node_agrees(mod):
    """The incremental HostTier map's re-mapping of a node both ways, over random sequences of
    nodes (re-mapped as they are, unchanged, or with new fields): the same callbacks' calls
    in the same order, every container written the same (positions, ids, parent links, the
    values kept, the changed nodes, the slot holders, each variable's dict, the reference
    counts, the delta, the dirty positions and slots), the same exception at the same point:
    a position outside a variable's domain (KeyError), a node holding fewer host slots than
    pages (node_slots' ValueError), a callback's own error."""
    seen = collections.Counter()
    for want in _seeded_runs_agree(_remap_run, loops.py_remap_node, mod.remap_node):
        seen["ok" if want[0] is None else want[0][0].__name__] += 1
        seen["resized"] += any(c[0] == "resize" for c in want[1])
        seen["slots"] += want[1][-1][1] > 0
    assert seen["ok"] >= 250 and seen["resized"] >= 200 and seen["slots"] >= 200, seen
    assert min(seen[k] for k in ("KeyError", "ValueError", "RuntimeError", "LookupError")) >= 5, seen


def test_remap_node_computes_its_own_node_slots_as_python_does(mod):
    """The re-mapping with the context's node_slots the native module's own (which remap_node
    computes in C, its lists not made, each page's value made an object only where written)
    against the Python re-mapping with node_slots' Python twin: the same writes, delta,
    reference counts and exceptions, over host slots beyond the small ints, tuples, slots
    that are no exact ints (the lists' path), blocking copies' slots, nodes holding fewer
    slots than pages (ValueError)."""
    seen = collections.Counter()
    for seed in range(600):
        want = _remap_run(loops.py_remap_node, seed, loops.py_node_slots)
        assert _remap_run(mod.remap_node, seed, mod.node_slots) == want, seed
        seen["ok" if want[0] is None else want[0][0].__name__] += 1
        seen["slots"] += want[1][-1][1] > 0
    assert seen["ok"] >= 250 and seen["slots"] >= 200 and seen["ValueError"] >= 5, seen


class _LoggedNode(_MapNode):
    """A node whose attribute reads go through a Python __getattribute__, which logs them (the
    native re-mapping's reads then take the object API's way)."""

    __slots__ = ()
    log: list = []

    def __getattribute__(self, name):
        if name != "name":
            _LoggedNode.log.append((object.__getattribute__(self, "name"), name))
        return object.__getattribute__(self, name)


def test_remap_node_reads_a_node_s_fields_as_python_does(mod):
    """Nodes whose attribute reads are a Python __getattribute__ (no slot read directly): the
    same fields read in the same order both ways, the same writes."""
    for seed in range(150):
        want = _remap_run(loops.py_remap_node, seed, cls=_LoggedNode)
        assert _remap_run(mod.remap_node, seed, cls=_LoggedNode) == want, seed
        assert want[1][-1][0] == "reads" and want[1][-1][1], seed


def test_node_slots_agree(mod):
    """A node's per-page slot values both ways: host slots (a list, a tuple, more than the
    pages: cut, fewer: ValueError), a blocking copy's slots (cut or padded), neither; backing
    of either truth; slots that are no ints (TypeError from the +) and a page count that is
    no int >= 0 (TypeError)."""
    rng = random.Random(0)
    cases = []
    for i in range(400):
        n = rng.randint(0, 6)
        hs = rng.choice([None, None, [rng.randrange(700) for _ in range(rng.randint(0, 8))]])
        pending = rng.choice([None, [rng.randrange(700) for _ in range(rng.randint(0, 8))]])
        if i % 25 == 24 and hs:
            hs[0] = rng.choice(["x", 2.5, True])
        if hs is not None and rng.random() < 0.3:
            hs = tuple(hs)
        if pending is not None and rng.random() < 0.3:
            pending = tuple(pending)
        if i % 20 == 19:
            n = rng.choice([2.0, True, -1, "2"])
        cases.append([hs, pending, n, rng.choice([False, True, 0, 1, None, "w"])])
    seen = _outcomes("node_slots", mod, cases)
    assert seen["ok"] >= 250 and sum(v for k, v in seen.items() if k.startswith("ValueError")) >= 20, seen
    assert seen["TypeError: node_slots: n must be an int >= 0"] >= 10, seen
    # (a count past 2**61 pages, which no node has, is refused alike: the C reads counts below it)
    seen = _outcomes("node_slots", mod, [[None, None, 1 << 61, False], [[1, 2], None, (1 << 61) + 5, True],
                                         [None, None, 1 << 70, False]])
    assert seen == {"OverflowError: node_slots: n is past 2**61 pages": 3}, seen


def test_spread_and_enumerated_agree(mod):
    """The from-scratch HostTier map's per-page functions both ways: node values (of any
    kind, TRUE beside 1 kept apart) over runs of pages (0 pages too) and the spare page;
    runs that are no exact ints >= 0 (TypeError), lists of two lengths (ValueError), no
    lists (TypeError), and more than 2**61 pages (OverflowError, refused alike)."""
    rng = random.Random(0)
    cases = []
    for i in range(400):
        k = rng.randint(0, 7)
        values = [rng.choice([0, 1, 2, True, False, "x", None, 2.5]) for _ in range(k)]
        runs = [rng.choice([0, 1, 1, 3, 18, 300]) for _ in range(k)]
        if i % 20 == 19 and runs:
            runs[rng.randrange(k)] = rng.choice([True, 2.0, -1, "3", None])
        if i % 30 == 29:
            runs.append(1)
        spare = rng.choice([0, False, -1])
        if i % 40 == 39:
            cases.append([tuple(values), runs, spare] if i % 80 == 39 else [values, tuple(runs), spare])
        else:
            cases.append([values, runs, spare])
    seen = _outcomes("spread", mod, cases)
    assert seen["ok"] >= 300 and seen["TypeError: spread: runs must hold exact ints >= 0"] >= 5, seen
    assert seen["ValueError: spread: values and runs differ in length"] >= 5, seen
    assert sum(v for k, v in seen.items() if k.startswith("TypeError: spread: values must be a list")) >= 2, seen
    seen = _outcomes("spread", mod, [[[1, 2], [1 << 60, (1 << 60) + 1], 0], [[1], [1 << 70], 0], [[1, 2], [2, 1 << 61], 0]])
    assert seen == {"OverflowError: spread: past 2**61 pages": 3}, seen
    assert mod.spread([True, 1], [2, 1], False) == {0: True, 1: True, 2: 1, 3: False}
    assert [type(v) for v in mod.spread([True, 1], [2, 1], False).values()] == [bool, bool, int, bool]
    seen = _outcomes("enumerated", mod, [[[rng.choice([0, True, "y", 7]) for _ in range(rng.randint(0, 300))]]
                                         for _ in range(60)] + [[(1, 2)], [None]])
    assert seen["ok"] == 60 and sum(seen.values()) == 62, seen


@pytest.mark.parametrize("seed", range(40))
def test_spread_and_enumerated_over_a_pad_agree(mod, seed):
    """Both per-page functions built over a pad: a dict of the result's size (laid out as the
    map's flat function is, position k at entry k, or otherwise, `_laid_out`: its copy then
    keeps its order, a key missing from it added), one of another size (not used: a new
    dict), None; a pad that is no exact dict refused alike (TypeError). Over the flat
    function's own pad the result equals the one built without it, in the same key order,
    value and type for value and type, and the pad is left as it was."""
    rng = random.Random(seed)
    k = rng.randint(0, 6)
    values = [rng.choice([0, 1, True, False, "x", (1,), None]) for _ in range(k)]
    runs = [rng.choice([0, 1, 3, 9]) for _ in range(k)]
    total = sum(runs)
    spare = rng.choice([0, False])
    made = rng.random()

    def pad_of(r, size):
        how = r.random()
        return dict.fromkeys(range(size), r.choice([0, False])) if how < 0.5 else _laid_out(r, size, [0, -1, True])

    def make_spread():
        r = random.Random(made)
        return [list(values), list(runs), spare, pad_of(r, r.choice([total + 1, total + 1, total, total + 2]))]
    _agree_made("spread", mod, make_spread)

    def make_enumerated():
        r = random.Random(made)
        return [list(values), pad_of(r, r.choice([k, k, k + 1]))]
    _agree_made("enumerated", mod, make_enumerated)
    for f, g in ((mod.spread, loops.py_spread), (mod.enumerated, loops.py_enumerated)):
        flat = dict.fromkeys(range(total + 1 if f is mod.spread else k), 0)
        before = dict(flat)
        args = [values, runs, spare] if f is mod.spread else [values]
        for h in (f, g):
            over, plain = h(*args, flat), h(*args)
            assert list(over.items()) == list(plain.items())
            assert [type(v) for v in over.values()] == [type(v) for v in plain.values()]
            assert flat == before and all(type(v) is int for v in flat.values())
        for bad in ([1], "pad", frozenset()):
            _agree("spread" if f is mod.spread else "enumerated", mod, [*args, bad])
            assert _outcome(f, [*args, bad])[0][0] is TypeError


def test_one_owner_breach_agrees(mod):
    """SlotInOneOwner from a state's values both ways: slot states (interned names, equal
    strs made anew, other objects), references in and out of the slots' range (NoSlot, a
    negative, one past the last) on the tree, backup and fetch sides, breaches of each kind
    and none; NotImplemented where a value is no exact int (TRUE, 2.0); sequences that are
    no tuple or list (TypeError). And where it answers, it names what the generic count
    (`count_pages`, `slot_owner_breach`) names."""
    rng = random.Random(0)
    states = ["idle", "reserved", "synced", "protected", "".join(["re", "served"]), None]
    cases = []
    for i in range(500):
        n = rng.randint(0, 9)
        names = tuple(rng.choice(states) for _ in range(n)) if i % 50 else [rng.choice(states) for _ in range(n)]
        vals = [[rng.choice([0, 0, 1, 2, 3, n, n + 1, -1, rng.randint(0, n)]) for _ in range(rng.randint(0, 9))]
                for _ in range(3)]
        if i % 25 == 24 and vals[i % 3]:
            vals[i % 3][0] = rng.choice([True, 2.0, "1"])
        if i % 60 == 59:
            vals[1] = set(vals[1])
        cases.append([names, vals[0], tuple(vals[1]) if i % 2 and type(vals[1]) is list else vals[1], tuple(vals[2])])
    seen = collections.Counter()
    for args in cases:
        exc, got, _ = _agree("one_owner_breach", mod, args)
        seen["error" if exc else "NotImplemented" if got is NotImplemented else "none" if got is None else "breach"] += 1
        if exc is None and got is not NotImplemented:
            tree, other = {}, {}
            loops.py_count_pages(tree, list(args[1]), 1, None, 0)
            loops.py_count_pages(other, list(args[2]) + list(args[3]), 1, None, 0)
            assert got == loops.py_slot_owner_breach(args[0], range(1, len(args[0]) + 1), tree, other, {}), args
    assert seen["breach"] >= 200 and seen["none"] >= 20 and seen["NotImplemented"] >= 10 and seen["error"] >= 5, seen


def test_parent_breach_agrees(mod):
    """WriteThroughPrefix in tree form both ways: random forests of pages (a parent page
    before its child), host copies or none, a breach or none; values that are no exact ints
    (TRUE, 0.0, a str: compared as Python compares them), a parent page missing from host
    (KeyError), parents that are no tuple or list, a host that is no dict (TypeError)."""
    rng = random.Random(0)
    cases = []
    for i in range(500):
        n = rng.randint(0, 12)
        parent = tuple(rng.randrange(-1, k) if k else -1 for k in range(n))
        host = {k: rng.choice([0, 0, 3, 5, 7]) for k in range(n)}
        if i % 20 == 19 and n:
            host[rng.randrange(n)] = rng.choice([True, False, 0.0, "x", None])
        if i % 40 == 39 and n:
            del host[rng.randrange(n)]
        args = [parent if i % 30 else list(parent), host]
        if i % 90 == 89:
            args = [set(parent), host] if i % 180 == 89 else [parent, list(host.values())]
        cases.append(args)
    seen = _outcomes("parent_breach", mod, cases)
    assert seen["ok"] >= 400 and sum(v for k, v in seen.items() if k.startswith("KeyError")) >= 3, seen
    assert sum(v for k, v in seen.items() if k.startswith("TypeError")) >= 4, seen
    breaches = sum(1 for args in cases if _called(loops.py_parent_breach, args)[1])
    assert breaches >= 100, breaches


class _Writer:
    """An op in flight as host_write_in_flight reads it: its writes_host a plain attribute."""

    def __init__(self, writes_host):
        self.writes_host = writes_host


def _tree_pages_case(rng, i: int):
    """A random forest of _MapNodes in preorder (each node's parent before it; now and then
    a parent outside the walk), their fields of the runtime's kinds and of others (a TRUE, a
    2.5, a truthy object), a blocking copy's slots for some, and a load_req_of that logs its
    calls: (make, calls) where make() builds the arguments afresh."""
    def make():
        r = random.Random(i)
        nodes, calls = [], []
        outside = _MapNode("outside")
        outside.id = 10_000
        for k in range(r.randint(0, 7)):
            x = _MapNode(f"x{k}")
            x.id = k if k % 3 else f"id{k}"
            x.parent = r.choice([None, outside, *nodes[-3:]]) if nodes or k else None
            x.n = r.choice([0, 1, 2, 3, 5, 18])
            if i % 25 == 24 and k == 1:
                x.n = r.choice([True, -1, 2.0, "2", 1 << 62])
            x.device = r.choice([None, list(range(3))])
            x.loading = r.choice([None, None, "load"])
            x.stored = r.choice([False, True, 0, 1, [], [1]])
            x.hit_count = r.choice([0, 1, 2, 3, 7, True, 2.5])
            x.host = r.choice([None, [r.randrange(1, 200) for _ in range(x.n if type(x.n) is int and 0 <= x.n < 30 else 2)]])
            x.inflight = r.choice([[], [], [_Writer(True)], [_Writer(False), _Writer(1)]])
            nodes.append(x)
        sync = {x.id: [r.randrange(1, 200) for _ in range(4)] for x in nodes if r.random() < 0.2}

        def load_req_of(x):
            calls.append(x.name)
            return r.choice([0, 3, 7, -1, True])
        # (the module's own node_slots, computed inline by the C walk, or another called:
        # a stand-in that maps the slots wrong, one whose result does not unpack into two)
        slots = [loops.node_slots, loops.node_slots, loops.py_node_slots, _flagged_slots, _one_list][i % 5] \
            if i % 7 else _one_list
        return [iter(nodes) if i % 2 else nodes, sync, load_req_of, slots], calls
    return make


def _flagged_slots(hs, pending, n, backing):
    host, backup = loops.py_node_slots(hs, pending, n, backing)
    return [h != 0 for h in host], tuple(backup)


def _one_list(hs, pending, n, backing):
    return loops.py_node_slots(hs, pending, n, backing)[:1]


def test_tree_pages_agrees(mod):
    """The from-scratch HostTier map's walk both ways over random forests: the same lists,
    the same `loading`, the same calls of load_req_of in the same order; the module's own
    node_slots or another (a wrong one, one whose result does not unpack: ValueError); a
    node's n that is no int in [0, 2**61) (TypeError), a sync_backup that is no dict
    (TypeError)."""
    rng = random.Random(0)
    seen = collections.Counter()
    for i in range(400):
        make = _tree_pages_case(rng, i)
        (args, calls), (args2, calls2) = make(), make()
        got, want = _called(mod.tree_pages, args), _called(loops.PYTHON["tree_pages"], args2)
        assert _named(got[:2]) == _named(want[:2]) and calls == calls2, i
        exc, ret = want[0], want[1]
        seen["error" if exc else "loading" if ret[8] else "pages" if ret[5] else "empty"] += 1
    assert seen["pages"] >= 80 and seen["loading"] >= 80 and seen["error"] >= 50 and seen["empty"] >= 20, seen
    (args, _), = [_tree_pages_case(rng, 0)()]
    args[1] = list(args[1].items())
    assert _named(_called(mod.tree_pages, args)[:2]) == _named(_called(loops.PYTHON["tree_pages"], args)[:2])
    assert _called(mod.tree_pages, args)[0][0] is TypeError


class _WalkNode(_MapNode):
    """A tree node as chain_walk reads it: its device pages, page count and children."""

    __slots__ = ("children",)


def _chain_walk_case(rng, i: int):
    """chain_walk's arguments over a random forest, made afresh by make(): nodes with device
    pages (a list, a tuple, None; pages of several kinds, repeated ones) or none, n an int
    (0, negative: no page) or now and then no int, children a dict or now and then not; bases
    ints or None; cp a positive int."""
    def make():
        r = random.Random(i)
        bad = r.random() < 0.25

        def node(name, depth):
            x = _WalkNode(name)
            x.n = r.choice([0, 1, 2, 3, 5, -1]) if not (bad and r.random() < 0.1) else r.choice([2.5, "2", None])
            x.device = r.choice([None, None, [r.choice([0, 1, 7, 7, True, -1]) for _ in range(r.randint(0, 4))],
                                 (3, 4), 5 if bad and r.random() < 0.2 else None])
            kids = [node(f"{name}.{k}", depth + 1) for k in range(r.randint(0, 3 if depth < 3 else 0))]
            x.children = {k: c for k, c in enumerate(kids)}
            if bad and r.random() < 0.1:
                x.children = list(kids)
            return x
        roots = [node(f"r{k}", 0) for k in range(r.randint(0, 4))]
        bases = [r.choice([None, 0, 1, 3, 10]) for _ in roots]
        if bad and r.random() < 0.2:
            bases = bases[:-1] or [0]
        return [rng_choice(r, [roots, tuple(roots)]), bases, r.choice([1, 2, 4]), r.choice([-1, 0])]
    return make


def rng_choice(r, options):
    return options[r.randrange(len(options))]


@pytest.mark.parametrize("seed", range(60))
def test_pending_allocs_agrees(mod, seed):
    """The chain map's pass over the allocation log both ways: entries newest first, pages
    still allocated and in no row kept (the others NoPage), an entry with none kept dropped
    from the log, the others appended to rows with their rotation; the log, the held set and
    the rows as they are left, compared. Refused alike: an entry no 3-tuple, pages no
    iterable, the log no dict, held no set, rows no list (TypeError), aids that do not sort."""
    rng = random.Random(seed)
    none = -1
    log = {}
    for aid in rng.sample(range(1, 40), rng.randint(0, 12)):
        pages = [rng.choice([0, 1, 2, 3, 4, 5, 6, 7, none]) for _ in range(rng.randint(0, 5))]
        log[aid] = (rng.choice([0, 1, 3]), rng.choice([0, 2, 5]), rng.choice([pages, tuple(pages)]))
    allocated = set(rng.sample(range(8), rng.randint(0, 8)))
    held = set(rng.sample(range(8), rng.randint(0, 3)))
    cp = rng.choice([1, 2, 4])
    rows = [("node", 0, [1])]
    want = _agree("pending_allocs", mod, [log, rng.choice([allocated, frozenset(allocated)]), held, cp, none, rows])
    assert want[0] is None
    if log:
        bad = dict(log)
        aid = rng.choice(list(bad))
        bad[aid] = rng.choice([list(bad[aid]), bad[aid][:2], (0, 0, 5)])
        got = _agree("pending_allocs", mod, [bad, allocated, held, cp, none, rows])
        assert got[0] is not None and got[0][0] is TypeError
    for args in ([list(log.items()), allocated, held, cp, none, rows], [log, allocated, frozenset(held), cp, none, rows],
                 [log, allocated, held, cp, none, tuple(rows)], [{1: (0, 0, [1]), "a": (0, 0, [2])}, allocated, held,
                                                                  cp, none, rows]):
        got = _agree("pending_allocs", mod, args)
        assert got[0] is not None and got[0][0] is TypeError


def test_pending_allocs_drops_the_settled_and_keeps_the_newest_claim(mod):
    """A page in two entries belongs to the newer (the older one keeps NoPage there); an
    entry whose pages are all inserted or freed leaves the log."""
    for f in (mod.pending_allocs, loops.py_pending_allocs):
        log = {1: (0, 0, [3, 4]), 2: (1, 0, [4, 5]), 3: (0, 0, [6])}
        held, rows = {6}, []
        f(log, {3, 4, 5, 6}, held, 2, -1, rows)
        assert rows == [(("alloc", 2), 1, [4, 5]), (("alloc", 1), 0, [3, -1])]
        assert list(log) == [1, 2] and held == {3, 4, 5, 6}


def test_chain_walk_agrees(mod):
    """The from-scratch chain map's walk of the tree both ways over random forests: the same
    rows (node, rot, pages) in the same order, the same held pages, the same error (a node's
    n no int where its pages are made of it, its device pages no iterable, its children no
    dict, roots and bases of other lengths or kinds)."""
    rng = random.Random(5)
    seen = collections.Counter()
    for i in range(400):
        make = _chain_walk_case(rng, i)
        got, want = _called(mod.chain_walk, make()), _called(loops.PYTHON["chain_walk"], make())
        assert _named(got[:2]) == _named(want[:2]), i
        exc, ret = want[0], want[1]
        seen["error" if exc else "held" if ret[1] else "rows" if ret[0] else "empty"] += 1
    assert seen["held"] >= 100 and seen["error"] >= 30 and seen["empty"] >= 10, seen
    for args in ([{}, [], 1, -1], [[], None, 1, -1], [[], [0], 1, -1]):
        assert _named(_called(mod.chain_walk, args)[:2]) == _named(_called(loops.py_chain_walk, args)[:2])
        assert _called(mod.chain_walk, args)[0][0] is TypeError


class _Op:
    """An op in a node's `inflight` as host_write_in_flight reads it: its writes_host a plain
    value, absent, or a property that raises (AttributeError: taken as absent by getattr's
    default; any other error: raised), its reads logged."""

    def __init__(self, log, name, how):
        self._log, self._name, self._how = log, name, how

    def __getattr__(self, attr):     # (writes_host only: the others are the instance's own)
        self._log.append(("op", self._name, attr))
        if self._how == "absent":
            raise AttributeError(attr)
        if self._how == "boom":
            raise RuntimeError("no writes_host to read")
        if self._how == "stop":
            raise StopIteration("no writes_host")   # (in the twin's generator: RuntimeError)
        return self._how


class _Truthy:
    """A value whose truth test is logged, or raises."""

    def __init__(self, log, value):
        self._log, self._value = log, value

    def __bool__(self):
        self._log.append(("bool", self._value))
        if self._value == "boom":
            raise ValueError("no truth")
        return bool(self._value)


class _Ops(list):
    """A list of ops (no exact list: read through the object API) whose truth and iteration
    are logged, or raise."""

    def __init__(self, log, ops, how=None):
        super().__init__(ops)
        self._log, self._how = log, how

    def __bool__(self):
        self._log.append(("ops bool", self._how))
        if self._how == "bool":
            raise ValueError("no truth")
        return len(self) > 0

    def __iter__(self):
        self._log.append(("ops iter", self._how))
        if self._how == "iter":
            raise TypeError("not iterable now")
        return super().__iter__()


class _InflightNode:
    """A node whose `inflight` reads are logged (each read gives `values[i]`, the i-th read's),
    or raise AttributeError when it has none."""

    def __init__(self, log, values):
        self._log, self._values, self._reads = log, values, 0

    @property
    def inflight(self):
        self._log.append(("inflight", self._reads))
        if self._values is None:
            raise AttributeError("inflight")
        v = self._values[min(self._reads, len(self._values) - 1)]
        self._reads += 1
        return v


class _PlainOp:
    """An op with a plain writes_host attribute (read directly, no __getattr__)."""

    def __init__(self, writes_host):
        self.writes_host = writes_host


def _in_flight_run(fn, seed: int):
    """One random node, built from `seed`, given to `fn`: (its result with its type, or the
    exception's type and args; every read and truth test made, in order)."""
    rng = random.Random(seed)
    log = []

    def op(i):
        how = rng.choice([True, False, 0, 1, "", "w", None, "absent", "absent", "boom", "stop", "truthy", "truthy"])
        if how == "truthy":
            how = _Truthy(log, rng.choice([True, False, 0, "boom"]))
        if how in ("absent", "boom", "stop") or rng.random() < 0.6:
            return _Op(log, i, how)
        return _PlainOp(how)

    def ops():
        items = [op(i) for i in range(rng.choice([0, 0, 1, 1, 2, 3]))]
        kind = rng.choice(["list", "list", "tuple", "set", "deque", "logged", "logged", "bad", "none", "int"])
        if kind == "tuple":
            return tuple(items)
        if kind == "set":
            return set(items[:1])       # (one op: a set of several iterates them by their ids)
        if kind == "deque":
            return collections.deque(items)
        if kind == "logged":
            return _Ops(log, items)
        if kind == "bad":
            return _Ops(log, items or [op(0)], rng.choice(["bool", "iter"]))
        if kind == "none":
            return None
        if kind == "int":
            return rng.choice([0, 3])       # (true, then not iterable: TypeError)
        return items

    reads = None if rng.random() < 0.05 else [ops() for _ in range(rng.choice([1, 1, 2]))]
    x = _InflightNode(log, reads)
    try:
        r = fn(x)
        out = (type(r), r)
    except Exception as e:      # (the same type and message from both, and the same cause)
        cause = e.__cause__
        out = (type(e), e.args, None if cause is None else (type(cause), cause.args), e.__context__ is cause)
    return out, log


def test_host_write_in_flight_agrees(mod):
    """Whether a node's host copy is being written, both ways (the runtime's own function, the
    native one): the same answer (a bool), the same reads of `inflight` (twice: tested, then
    iterated) and of each op's writes_host up to the first true one, the same truth tests, the
    same exception at the same point: no `inflight` (AttributeError), an op's writes_host
    absent (False) or raising, a truth test or an iteration that raises, an `inflight` that is
    true but no iterable (TypeError); ops in a list, tuple, set, deque or a list subclass."""
    from hicache.runtime.cache import host_write_in_flight
    assert loops.py_host_write_in_flight is host_write_in_flight
    seen = collections.Counter()
    for seed in range(1500):
        want = _in_flight_run(host_write_in_flight, seed)
        assert _in_flight_run(mod.host_write_in_flight, seed) == want, seed
        seen[want[0][1] if want[0][0] is bool else want[0][0].__name__] += 1
    assert seen[True] >= 150 and seen[False] >= 300, seen
    assert min(seen[k] for k in ("AttributeError", "RuntimeError", "ValueError", "TypeError")) >= 10, seen
    # (an op's StopIteration comes out of both as the generator's RuntimeError, caused by it)
    stop = _Op([], 0, "stop")
    node = _InflightNode([], [[stop]])
    with pytest.raises(RuntimeError, match="generator raised StopIteration") as got:
        mod.host_write_in_flight(node)
    assert type(got.value.__cause__) is StopIteration and got.value.__context__ is got.value.__cause__


class _SubtreeNode(_MapNode):
    """A tree node as the unmapping reads it: remap_node's fields and its `children` (a dict
    of name -> node, or a mapping of another type whose values() the walk calls)."""

    __slots__ = ("children",)


class _Load:
    """A node's load-back as the unmapping reads it: its request's `rid` (none: read as None)."""

    def __init__(self, rid):
        if rid is not None:
            self.rid = rid


class _UnmapMap:
    """The map as the unmapping writes it: L (unset: an AttributeError) and req_dirty."""

    __slots__ = ("L", "req_dirty")


class _Children(dict):
    """A children mapping that is no exact dict (its values() called, not read off)."""


def _unmap_run(fn, seed: int):
    """Build one random mapped tree from `seed`, unmap a random node's subtree with `fn` and
    return (the exception raised, if any, as type and args; every container after, nodes
    named; the nodes unmapped and the delta entries written, counted)."""
    rng = random.Random(seed)
    nodes = []
    for k in range(rng.randint(1, 8)):
        x = _SubtreeNode(f"n{k}")
        x.children = _Children() if rng.random() < 0.1 else {}
        if rng.random() < 0.95:
            x.id = rng.choice([x.name, x.name, "shared"])
        x.loading = rng.choice([None] * 4 + [_Load(1), _Load(2), _Load(None), 7, _Load([1])])
        parent = rng.choice([None, *nodes])
        if parent is not None:
            parent.children[x.name] = x
        nodes.append(x)
    mapped = [x for x in nodes if rng.random() < 0.7]
    L = 0
    npos, keys = {}, []
    for x in mapped:
        n = rng.randint(0, 3)
        npos[x] = list(range(L, L + n))
        keys.extend((x, i) for i in range(n))
        L += n
    # (the positions shuffled: a node's pages anywhere in the prefix)
    order = rng.sample(range(L), L)
    keys = [keys[order.index(p)] for p in range(L)]
    for x in npos:
        npos[x] = [order[p] for p in npos[x]]
    size = L + 1 if rng.random() < 0.9 else max(L - 1, 0)        # (short: a KeyError)
    tree_refs = {h: rng.choice([0, 1, 2]) for h in range(1, 5) if rng.random() < 0.5}
    backup_refs = {h: rng.choice([0, 1]) for h in range(1, 5) if rng.random() < 0.5}
    if rng.random() < 0.5:
        # (laid out by slot, as the map's: the released counts written in their entries)
        tree_refs, backup_refs = ({**dict.fromkeys(range(5), 0), **refs} for refs in (tree_refs, backup_refs))
    cols = (("dev", {p: rng.choice([False, True]) for p in range(size)}, False, None),
            ("host", {p: rng.choice([0, 1, 2, 3]) for p in range(size)}, 0, tree_refs),
            ("backupOp", {p: rng.choice([0, 0, 4]) for p in range(size)}, 0, backup_refs))
    by_id = {x.id: x for x in mapped if hasattr(x, "id") and rng.random() < 0.8}
    up = {x: rng.choice([None, *nodes]) for x in nodes if rng.random() < 0.6}
    kids = {p: {x for x in nodes if rng.random() < 0.4} for p in [None, *nodes] if rng.random() < 0.5}
    nval = {x: ("values", x.name) for x in mapped if rng.random() < 0.7}
    loading_nodes = {rid: {x for x in nodes if rng.random() < 0.5} for rid in (1, 2, None) if rng.random() < 0.6}
    m = _UnmapMap()
    m.req_dirty = False
    if rng.random() < 0.95:
        m.L = L
    ctx = (npos, by_id, up, kids, nval, "the rest of remap_node's context")
    step = ([("x", 0, 0)], {}, {11}, {9}, m)
    unmapping = (keys, cols, loading_nodes, [])
    exc = None
    tagged = _tags([d for _, col, _, refs in cols for d in (col, refs) if d is not None])
    try:
        fn(ctx, step, unmapping, rng.choice(nodes))
    except Exception as e:      # (the same type and message from both)
        exc = type(e), e.args
    _renewed_where_changed(tagged)
    state = (ctx[:5], step[:4], unmapping, getattr(m, "L", None), m.req_dirty)
    return exc, _named(state), (len(unmapping[3]), len(step[0]) - 1)


def test_unmap_subtree_agrees(mod):
    """The incremental HostTier map's unmapping of a detached node and what hangs below it,
    both ways, over random trees: the nodes visited in the same order, every container
    written the same (left, by_id, nval, the parent links, npos, keys, each column, the
    reference counts, the delta, the dirty positions and slots, loading_nodes, m.L and
    m.req_dirty), the same exception at the same point: a node without an id
    (AttributeError), a column short of a position (remove_pages' KeyError), an unhashable
    request (TypeError), a map without L (AttributeError)."""
    seen = collections.Counter()
    for want in _seeded_runs_agree(_unmap_run, loops.py_unmap_subtree, mod.unmap_subtree):
        seen["ok" if want[0] is None else want[0][0].__name__] += 1
        seen["left"] += want[2][0]
        seen["written"] += want[2][1] > 0
    assert seen["ok"] >= 300 and seen["left"] >= 400 and seen["written"] >= 200, seen
    assert min(seen[k] for k in ("KeyError", "AttributeError", "TypeError")) >= 5, seen


def test_extend_positions_agrees(mod):
    """A node's new pages both ways: random nodes, positions already held and counts (none
    new, or fewer than held: nothing appended, the count returned as Python computes it), and
    a count or L that is no int (a float, TRUE: the same TypeError)."""
    rng = random.Random(0)
    cases = []
    for i in range(300):
        k = rng.randint(0, 5)
        pos, L = rng.sample(range(40), k), rng.randint(k, 40)
        keys = [(("n", j), j) for j in range(rng.randint(0, 3))]
        n = rng.randint(max(0, k - 2), k + 8)
        if i % 10 == 9:
            n, L = rng.choice([(float(n), L), (n, True), (n, 2.0)])
        cases.append([("node", i), keys, pos, n, L, set(rng.sample(range(50), rng.randint(0, 4)))])
    seen = _outcomes("extend_positions", mod, cases)
    assert seen["ok"] >= 250 and seen["TypeError: extend_positions: n and L must be ints"] >= 20, seen
    keys, pos, dirty = [], [7], set()
    assert mod.extend_positions("x", keys, pos, 3, 10, dirty) == 12
    assert (keys, pos, dirty) == ([("x", 1), ("x", 2)], [7, 10, 11], {10, 11})


class _BindMap:
    """A map as load_bind calls it: its request step, `_bind_step`, logs and answers."""

    def __init__(self, log):
        self.log = log

    def _bind_step(self, m, action, fields):
        self.log.append(("step", m is self, action, dict(fields)))
        if fields.get("fail"):
            raise KeyError("step")
        return ("steps", action)


def _slow_bind(m, action, fields):
    m.log.append(("slow", action, dict(fields)))
    if fields.get("fail"):
        raise ValueError("slow")
    return None if action == "LoadBackLayer" else m._bind_step(m, action, fields)


_BindMap.bind = _slow_bind


class _PatchedBindMap(_BindMap):
    """A subclass whose own bind (a profiler's wrapper, say) load_bind must call instead."""

    def bind(self, action, fields):
        self.log.append(("patched", action))
        return _slow_bind(self, action, fields)


class _NoneBindMap(_BindMap):
    bind = None


@pytest.mark.parametrize("twin", ["native", "python"])
def test_a_load_bind_in_a_cycle_is_collected(mod, twin):
    """A load bind whose slow path is a bound method of its map (the map's dict holds the
    bind: a cycle) is freed by the collector, as the Python twin's closure is."""
    make = mod.load_bind if twin == "native" else loops.py_load_bind

    class Holder:
        def other(self, action, fields):
            return ("slow", action)
    h = Holder()
    h.bind = make(weakref.ref(h), frozenset({"x"}), h.other)
    gone = weakref.ref(h)
    del h
    gc.collect()
    assert gone() is None


def test_load_binds_agree(mod):
    """IncrementalHostTierMap's bind as a callable both ways on random events: the load-back
    events by the class's bind, the others by the map's request step read off it at each call
    (replaced between calls, as python_bind does), errors from either (the same exception, the
    same calls before it), a non-string action (unhashable: TypeError from the set test), and
    a call after the map is gone (ReferenceError); a class whose bind is another (a subclass's:
    called, bound to the map) or None (its call's TypeError)."""
    events = frozenset({"LoadBackLayer", "LoadBackStart", "LoadBackFinish", "LoadBackFail"})
    actions = [*events, "RequestMatch", "BackupStart", "DeviceEvict", ["unhashable"]]

    def run(make, seed):
        rng = random.Random(seed)
        log: list = []
        m = rng.choice([_BindMap, _BindMap, _BindMap, _PatchedBindMap, _NoneBindMap])(log)
        bind = make(weakref.ref(m), events, _slow_bind)
        out = []
        for i in range(40):
            if rng.random() < 0.03:
                m._bind_step = lambda m2, a, f, log=log: log.append(("replaced", a)) or "replaced"
            action = rng.choice(actions)
            fields = {"rid": rng.randint(0, 3), "fail": rng.random() < 0.1}
            try:
                out.append(("ok", bind(action, fields)))
            except Exception as e:
                out.append((type(e), e.args))
        del m       # (no cycle holds it: gone at once)
        try:
            bind("RequestMatch", {})
        except ReferenceError as e:
            out.append((ReferenceError, e.args))
        return out, log

    kinds: collections.Counter = collections.Counter()
    for seed in range(60):
        got, want = run(mod.load_bind, seed), run(loops.py_load_bind, seed)
        assert _typed(got) == _typed(want), seed
        for r in want[0]:
            kinds[r[0] if r[0] == "ok" else r[0].__name__] += 1
        kinds.update(entry[0] for entry in want[1])
    assert kinds["ok"] >= 1000 and kinds["KeyError"] >= 10 and kinds["ValueError"] >= 20, kinds
    assert kinds["TypeError"] >= 20 and kinds["ReferenceError"] == 60, kinds
    assert kinds["slow"] >= 500 and kinds["step"] >= 200 and kinds["replaced"] >= 50, kinds
    assert kinds["patched"] >= 100 and kinds["TypeError"] >= 100, kinds
    with pytest.raises(TypeError):
        mod.load_bind(lambda: None, events, _slow_bind)
    with pytest.raises(TypeError):
        mod.load_bind(weakref.ref(_BindMap([])), set(events), _slow_bind)


#: 3.13's PyWeakref_GetRef over 3.11's API, as pythoncapi_compat defines it (its documented
#: contract: 1 and a new reference, 0 and NULL when the referent is gone, -1 and NULL on error)
_GET_REF = """#include <Python.h>
static int PyWeakref_GetRef(PyObject *ref, PyObject **pobj) {
    if (ref == NULL || !PyWeakref_Check(ref)) {
        *pobj = NULL;
        PyErr_SetString(PyExc_TypeError, "expected a weakref");
        return -1;
    }
    PyObject *obj = PyWeakref_GetObject(ref);
    *pobj = NULL;
    if (obj == NULL)
        return -1;
    if (obj == Py_None)
        return 0;
    *pobj = Py_NewRef(obj);
    return 1;
}
"""


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="the module built here takes the 3.13 branch itself")
def test_load_bind_on_the_3_13_weakref_api(mod, tmp_path):
    """load_bind's 3.13 branch (PyWeakref_GetRef: PyWeakref_GetObject is deprecated there),
    built here with the branch forced on over a GetRef of 3.11's API: the same calls and
    errors as the Python twin, collected in a cycle, the map's reference count unchanged by
    calls (the new reference released on every path), ReferenceError once the map is gone."""
    source = (native.SOURCE.read_text().replace("#include <Python.h>\n", _GET_REF, 1))
    branch = "#if PY_VERSION_HEX >= 0x030D0000\n    /* (PyWeakref_GetObject is deprecated"
    assert source.count(branch) == 1
    path = tmp_path / "incmap313.c"
    path.write_text(source.replace(branch, "#if 1\n    /* (PyWeakref_GetObject is deprecated"))
    try:
        m313 = buildcache.Extension("incmap313", native.NAME, path, native.ABI_VERSION).load()
    except (buildcache.BuildFailed, ImportError, OSError) as e:
        pytest.skip(f"not built: {e}")
    test_load_binds_agree(m313)
    test_a_load_bind_in_a_cycle_is_collected(m313, "native")
    for cls in (_BindMap, _PatchedBindMap):
        m = cls([])
        bind = m313.load_bind(weakref.ref(m), frozenset({"LoadBackLayer"}), _slow_bind)
        held = sys.getrefcount(m)
        for action in ("LoadBackLayer", "RequestMatch"):
            for fail in (False, True):
                try:
                    bind(action, {"fail": fail})
                except (KeyError, ValueError):
                    assert fail
        assert sys.getrefcount(m) == held
        del m
        with pytest.raises(ReferenceError, match="its map is gone"):
            bind("RequestMatch", {})


class _Touching:
    """A count (or a holder) whose comparisons and hash change the set a loop walks, once: a
    step that runs Python code. `keep`: the change keeps the set's size (one item out, another
    in), which the set iterator does not see; else one item is added, which it reports at its
    next step (RuntimeError). `eq`: the value it equals (so that the loop goes on past it)."""

    def __init__(self, target: set, keep: bool, eq):
        self.target, self.keep, self.eq, self.done = target, keep, eq, False

    def _touch(self):
        if not self.done:
            self.done = True
            if self.keep:
                self.target.discard(min(self.target))
            self.target.add(50)

    def __eq__(self, other):
        self._touch()
        return other == self.eq

    def __gt__(self, other):
        self._touch()
        return False

    def __lt__(self, other):
        self._touch()
        return False

    def __hash__(self):
        self._touch()
        return 7


class _TouchingIds(tuple):
    """Ids whose search runs `touching`'s change of a set (when set)."""
    touching = None

    def __contains__(self, x):
        if self.touching is not None:
            self.touching._touch()
        return tuple.__contains__(self, x)


def _walked_set(rng, items, mode):
    """A set (or frozenset) of `items`, laid out as a dirty set is: built in order, or with
    items deleted and put back (dummies in its table before them), or copied afresh."""
    s = set()
    for x in items:
        s.add(x)
    if mode == "deleted" and s:
        for x in rng.sample(sorted(s), rng.randint(1, len(s))):
            s.discard(x)
            s.add(x + 100)
            s.discard(x + 100)
            s.add(x)
    return frozenset(s) if mode == "frozen" else s


@pytest.mark.parametrize("seed", range(60))
def test_dirty_set_walks_agree(mod, seed):
    """The loops over a sync's dirty sets (slot_owner_breach, held_once_or_free, nodes_at,
    holders_outside) read an exact set or frozenset off its table: the same items in the set
    iterator's order, over tables with dummies, and, where a step runs Python code that changes
    the set (a count's comparison, a holder's hash, an id's search), the iterator's
    RuntimeError at the next step (a change of its size) or the same walk on (size kept).
    The reference counts laid out by slot (dict.fromkeys), read off their entries."""
    rng = random.Random(seed)
    mode = rng.choice(["order", "deleted", "frozen"])
    items = rng.sample(range(1, 9), rng.randint(1, 8))
    touch = rng.choice([None, False, True]) if mode != "frozen" else None
    states = ("idle", "reserved", "synced")
    names = tuple(rng.choice(states) for _ in range(8))

    def owner_args():
        r = random.Random(seed)
        s = _walked_set(r, items, mode)
        refs = []
        for _ in range(2):
            d = dict.fromkeys(range(10), 0) if r.random() < 0.7 else {}
            d.update({h: r.choice([0, 0, 1, 1, 2]) for h in r.sample(range(1, 9), r.randint(0, 8))})
            refs.append(d)
        if touch is not None:
            h = min(items)
            refs[0][h] = _Touching(s, touch, 0 if names[h - 1] in ("idle", "reserved") else 1)
            refs[1][h] = 1 if names[h - 1] == "reserved" else 0
        return [names, s, refs[0], refs[1], r.choice([{}, {2: 1}])]

    def held_args():
        r = random.Random(seed)
        s = _walked_set(r, [p - 1 for p in items], mode)
        holders = {p: r.choice([0, 1, 1]) for p in r.sample(range(8), r.randint(0, 8))}
        free = frozenset(p for p in range(8) if holders.get(p, 0) == 0 and r.random() < 0.9)
        if touch is not None:
            p = min(s)
            holders[p] = _Touching(s, touch, 1)
            free -= {p}
        return [s, holders, free]

    def nodes_args():
        r = random.Random(seed)
        s = _walked_set(r, items, mode)
        keys = [(r.choice("abc"), i) for i in range(10)]
        if touch is not None:
            keys[min(items)] = (_Touching(s, touch, None), 0)
        return [keys, s, r.randint(0, 10)]

    def holders_args():
        r = random.Random(seed)
        s = _walked_set(r, items, mode)
        nodes = [_Node(k) for k in range(3)]
        slot_page = {**dict.fromkeys(range(10)), **{h: r.choice([*nodes, None]) for h in range(1, 9)}}

        ids = _TouchingIds(r.sample(range(3), r.randint(0, 2)))
        if touch is not None:
            ids.touching = _Touching(s, touch, None)
        return [s, slot_page, ids]

    for name, make in (("slot_owner_breach", owner_args), ("held_once_or_free", held_args),
                       ("nodes_at", nodes_args), ("holders_outside", holders_args)):
        _agree_made(name, mod, make)
    if touch is False:
        # (the change of size reported, as by the set iterator, by every loop whose step ran it)
        exc, _, _ = _called(mod.nodes_at, nodes_args())
        assert exc is None or exc[0] is RuntimeError


class _ReversedSet(set):
    """A set subclass iterating in reverse of its table's order: the loops walk it through its
    own __iter__, as Python's for statement does, never off its table."""

    def __iter__(self):
        return iter(list(super().__iter__())[::-1])


def test_dirty_set_subclasses_walk_by_their_own_iter(mod):
    """Only an exact set or frozenset is read off its table: a subclass's own order is what both
    forms see (holders_outside lists its holders in the walk's order)."""
    def holders_args():
        nodes = [_Node(k) for k in range(3)]
        slot_page = {**dict.fromkeys(range(10)), 1: nodes[0], 2: nodes[1], 3: nodes[2]}
        return [_ReversedSet([1, 2, 3]), slot_page, _TouchingIds([])]

    got = _agree_made("holders_outside", mod, holders_args)
    assert [h for h, _ in got[1]] == [3, 2, 1], got


class _Mutating:
    """A walk's callback that adds to (or, size kept, swaps an item of) the set being walked
    the first time it is called."""

    def __init__(self, s: set, grow: bool):
        self.s, self.grow, self.calls = s, grow, []

    def __call__(self, x):
        self.calls.append(getattr(x, "id", None))
        if len(self.calls) == 1:
            if self.grow:
                self.s.add(_Free(99))
            else:
                self.s.discard(x)
                self.s.add(_Free(98))


class _Free:
    """A journaled node whose parent link is cut (what `leave` takes), hashed by its id: the
    set's table is laid out the same in both runs (an address hash would differ)."""

    def __init__(self, nid):
        self.id, self.parent = nid, None

    def __hash__(self):
        return self.id


@pytest.mark.parametrize("grow", [True, False])
def test_walk_journaled_agrees_when_leave_changes_the_set(mod, grow):
    """walk_journaled reads an exact todo set off its table: a `leave` callback that changes the
    set's size makes both forms raise the iterator's RuntimeError at the next item; one that
    keeps it walks on the same way in both."""
    def run(walk):
        todo = {_Free(k) for k in range(4)}
        leave = _Mutating(todo, grow)
        try:
            walk(todo, object(), set(), lambda x: None, leave)
            err = None
        except RuntimeError as e:
            err = str(e)
        return err, leave.calls

    got, want = run(mod.walk_journaled), run(loops.PYTHON["walk_journaled"])
    assert got == want
    assert (want[0] is not None) == grow


def test_no_read_is_configured_once(mod):
    """The native no_ap's answer is set once per process (the compiled fused passes take it
    in place of its calls): configuring the same object again is allowed, another refused,
    and no_ap still answers the first."""
    from hicache.monitors import rt
    if rt.no_ap is not mod.no_ap:
        pytest.skip("rt reads through its Python no_ap")
    mod.configure_readers(rt.Fcn, rt.py_fast_ap, rt._NO_READ, rt.seq_error)
    with pytest.raises(RuntimeError, match="set once per process"):
        mod.configure_readers(rt.Fcn, rt.py_fast_ap, lambda x: 4, rt.seq_error)
    assert mod.no_ap(object()) is rt._NO_READ

