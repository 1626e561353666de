"""The cross-rank digest covers which tokens each page holds, not only the tree's shape.

Two real caches in the zoo's lockstep group (hicache.monitors.zoo.RankGroup: a strict
HostTier monitor per rank, digests exchanged through LocalCollective): ranks whose trees
have the same shape but cache different token prefixes must fail the exchange, naming the
page key and the page; ranks that cache the same tokens in different host slots (a
rank-local choice) must agree.
"""
from __future__ import annotations

import pytest

from hicache.explain import explain
from hicache.explain.html import render
from hicache.explain.report import to_json, to_text
from hicache.monitors.digest import Contribution, divergence
from hicache.monitors.maps.host_tier import HostTierMap
from hicache.monitors.runtime import ProtocolViolation
from hicache.monitors.workload import WorkloadConfig
from hicache.monitors.zoo import RankFault, RankGroup
from hicache.runtime.allocator import HostSlotState as S
from hicache.tla.itf import read_itf
from hicache.tla.values import Fcn
from tiny_cache import serve

W = WorkloadConfig()          # page_size 2
BASE = [11, 12, 13, 14, 15, 16, 17, 18]


def _group(tmp_path) -> RankGroup:
    return RankGroup(2, W, "write_through", RankFault(), str(tmp_path))


def _serve_each(g: RankGroup, per_rank: list[list[list[int]]]) -> None:
    """Rank r serves per_rank[r] (its own token lists), then both reach the cache check."""
    for c, reqs in zip(g.caches, per_rank):
        for toks in reqs:
            serve(c, toks)
    g.check("end")


def _slots(g: RankGroup, r: int) -> list[list[int] | None]:
    return [x.host for x in g.caches[r].tree.nodes()]


def test_same_shape_different_tokens_diverge_at_the_differing_page(tmp_path):
    # both ranks: a 4-page path, then a 1-page branch after page 1 (shape identical); rank 1's
    # path differs from rank 0's in its third page only (tokens 15, 16 -> 95, 96)
    other = [11, 12, 13, 14, 95, 96, 17, 18]
    g = _group(tmp_path)
    try:
        with pytest.raises(ProtocolViolation) as ei:
            _serve_each(g, [[BASE, BASE[:2] + [50, 51]], [other, other[:2] + [50, 51]]])
    finally:
        g.close()
    e = ei.value
    assert e.property == "RankStateDigestsEqual" and e.kind == "digest"
    assert e.arguments["diverging_ranks"] == [1] and e.arguments["fields"] == ["_pageKey"]
    # the trace names the page: in the maps' preorder, page 0 is (11, 12), page 1 the branch
    # (50, 51), pages 2-4 the rest of the path, so the third page of the path is page 3
    views = [c.view for c in g.coll.paired]
    assert views[0]["_shape"] == views[1]["_shape"] == (-1, 0, 0, 2, 3)
    differ = [p for p, (a, b) in enumerate(zip(views[0]["_pageKey"], views[1]["_pageKey"])) if a != b]
    assert differ == [3]
    meta = read_itf(e.trace_path)["#meta"]["violation"]
    assert meta["divergence"]["fields"] == ["_pageKey"]
    assert meta["divergence"]["elements"] == {"_pageKey": differ}
    # hicache explain reads the new field from the exchange's views
    ex = explain(e.trace_path)
    assert ex.ranks["fields"] == ["_pageKey"] and ex.ranks["diverging_ranks"] == [1]
    assert "Digest fields that differ: _pageKey" in to_text(ex)
    assert to_json(ex)["ranks"]["fields"] == ["_pageKey"] and "_pageKey" in render(ex)


def test_same_tokens_in_different_host_slots_agree(tmp_path):
    g = _group(tmp_path)
    try:
        # rank 1 takes and returns three host slots first: its free list then hands out the
        # same slots in another order (no event: a rank-local allocator history)
        host = g.caches[1].host
        taken = host.reserve(3)
        host.move(taken, S.RESERVED, S.IDLE)
        _serve_each(g, [[BASE, BASE[:2] + [50, 51]]] * 2)     # no violation
        assert _slots(g, 0) != _slots(g, 1)                   # yet the slot numbers differ
        views = [m.digest_view() for m in g.maps]
        assert views[0] == views[1] and len(views[0]["_pageKey"]) == 5
    finally:
        g.close()


def test_reference_and_incremental_maps_give_the_same_view(tmp_path):
    g = _group(tmp_path)
    try:
        _serve_each(g, [[BASE, BASE[:2] + [50, 51]]] * 2)
        c = g.caches[0]
        ref = HostTierMap(c).digest_view()
        assert ref == g.maps[0].digest_view()
        # page ids are per page, in preorder: the shared first page, then either branch
        assert ref["_pageKey"][0] == g.maps[1].digest_view()["_pageKey"][0]
        assert len(set(ref["_pageKey"])) == len(ref["_pageKey"])
    finally:
        g.close()


def test_divergence_names_the_differing_elements():
    ref = {"a": (1, 2, 3), "b": 7, "c": (1,), "dev": Fcn({0: True, 1: True, 2: False})}
    cs = [Contribution(0, "check", 1, ref), Contribution(1, "check", 1, ref),
          Contribution(2, "check", 1, {"a": (1, 9, 3), "b": 8, "c": (1, 4, 5),
                                       "dev": Fcn({0: True, 1: False, 2: False})})]
    d = divergence(cs)
    assert (d["reference_rank"], d["diverging_ranks"], d["fields"]) == (0, [2], ["a", "b", "c", "dev"])
    # positions in sequences (the first past the shorter one) and page-indexed functions;
    # scalars: none
    assert d["elements"] == {"a": [1], "c": [1], "dev": [1]}
