"""Two monitors of one spec in one process (two caches, each with its strict HostTier
monitor): the native fast path they share (fused_native's `native_inc_all`, one compiled
pass per spec and process) keeps caches at its sites across calls, `RangeSite` among them
(an element loop's `x in r`: the exact frozenset it last met and whether that holds exactly
the ints lo..hi). Each such cache holds the immutable object it was made of and is used only
when handed that same object, and it is rewritten whole before any Python code can run
(the reference it drops is released last): a cache another monitor's binding left there is
relearned, never read for this one's. So one monitor's checks and violations are those it
has alone, whatever the other checked just before."""
from __future__ import annotations

import pytest

from hicache.monitors.runtime import ProtocolViolation

from tests.monitors.tiny_cache import serve, tiny_cache

#: the requests served, each on both caches in turn
REQUESTS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9], [1, 2, 3, 4], [7, 8], [10, 11, 12, 13], [5]]

#: the smaller cache's sizes: its constants differ from the other's, HSlots among them
SMALL = dict(host_pages=6)


def _record(mon) -> list:
    return [(m.steps, m.checked, [(h.seq, str(h.action), h.delta is not None) for h in m.history],
             m.rmap.reference_state()) for m in (mon, *mon.companions)]


def _ranges(mon) -> dict:
    """The constants of the monitor's last checked binding that are sets of ints (what an
    element loop's `x in r` keeps a RangeSite for)."""
    C = mon._checked_C
    return {k: v for k, v in C.items() if type(v) is frozenset and len(v) > 1 and all(type(x) is int for x in v)}


def test_two_caches_monitors_check_as_each_does_alone(tmp_path):
    """Legal runs: served in turn on a cache and a smaller one (another HSlots), each
    monitor takes the steps, checks and mapped states it takes with the other absent."""
    alone = {}
    for name, kw in (("big", {}), ("small", SMALL)):
        c, mon = tiny_cache(tmp_path / f"alone-{name}", {"mode": "strict"}, **kw)
        try:
            for toks in REQUESTS:
                serve(c, toks)
            alone[name] = _record(mon)
        finally:
            c.close()
    big, mb = tiny_cache(tmp_path / "big", {"mode": "strict"})
    small, ms = tiny_cache(tmp_path / "small", {"mode": "strict"}, **SMALL)
    try:
        for toks in REQUESTS:
            serve(big, toks)
            serve(small, toks)
        rb, rs = _ranges(mb), _ranges(ms)
        # (the sites see the two bindings' sets in turn: HSlots differs)
        assert rb.keys() == rs.keys() and any(rb[k] != rs[k] for k in rb)
        assert mb._inc_all is ms._inc_all      # (one pass for the spec, its sites with it)
        assert _record(mb) == alone["big"] and _record(ms) == alone["small"]
    finally:
        big.close()
        small.close()


@pytest.mark.parametrize("other_first", [False, True])
def test_a_host_slot_outside_one_caches_range_is_caught_after_the_others_check(tmp_path, other_first):
    """A node's host slot written past the smaller cache's slots but within the bigger one's
    (a value the bigger binding's interval holds): the smaller cache's monitor names the
    same step and conjunct whether or not the bigger cache's monitor checked a step (its
    sites left holding its own interval) just before; and the bigger cache's monitor goes
    on checking, undisturbed by the other's violation."""
    big, mb = tiny_cache(tmp_path / "big", {"mode": "strict"})
    small, ms = tiny_cache(tmp_path / "small", {"mode": "strict"}, **SMALL)
    try:
        serve(small, [1, 2])
        serve(big, [1, 2])
        (x,) = small.tree.root.children.values()
        assert x.host is not None and len(x.host) == 2
        if other_first:
            serve(big, [1, 2, 3])
        x.host = [x.host[0], SMALL["host_pages"]]        # the fault: no slot of the smaller cache
        assert SMALL["host_pages"] < big.cfg.host_pages
        with pytest.raises(ProtocolViolation) as e:
            serve(small, [5])
        assert e.value.property == "TypeOK" and e.value.conjunct.startswith("host \\in")
        assert e.value.step == 6 and e.value.action == "RequestMatch"
        before = mb.checked
        for toks in REQUESTS:
            serve(big, toks)
        assert not mb.tripped and mb.checked == mb.steps > before
    finally:
        big.close()
        small.close()
