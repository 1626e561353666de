"""The CP gather carries the dependent pools: after a gather every rank holds, for each pool,
exactly the original bytes of the pages its hit policy selects (draft KV on the target's slot
mapping, indexer on all pages, SWA on its window, recurrent state on the last page of that
window); the gather's completion fires after all of them; with the dependent gather skipped
by a fault switch, the DraftState monitor names the violated property."""
from __future__ import annotations

import pytest

from draft_support import draft_config, target_config
from hicache.dist.gather_deps_check import gather_deps_rank
from hicache.dist.launch import launch

CP = 2
#: logical pages of the prefix, in prefix order: both owners, out of order
PAGES = [3, 0, 5, 2, 7, 4]
DRAFT_ORDER = ["draft_indexer", "draft_kv", "draft_state"]


def _case(layout: str, overlap: bool, **kw) -> dict:
    return {"draft": draft_config(target_config(), layout), "local_pages": 4, "pages": PAGES,
            "overlap": overlap, **kw}


def _run(cases, tmp_path):
    res = launch(gather_deps_rank, CP, {"cases": cases, "violation_dir": str(tmp_path)}, timeout_s=120)
    return [[res[r][k] for r in range(CP)] for k in range(len(cases))]


@pytest.fixture(scope="module")
def clean_and_faulty(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gather")
    cases = [_case(lay, ovl, monitor=True) for lay in ("packed", "sidecar") for ovl in (True, False)]
    faulty = [_case(lay, True, monitor=True, actions=act, fault=True)
              for lay in ("packed", "sidecar") for act in (True, False)]
    silent = [_case("sidecar", False, fault=True)]
    out = _run(cases + faulty + silent, tmp)
    return out[:4], out[4:8], out[8]


def test_every_dependent_pool_is_gathered_byte_exact(clean_and_faulty):
    clean, _, _ = clean_and_faulty
    for ranks in clean:
        for res in ranks:
            assert res["violation"] is None
            assert res["wrong"] == {}
            assert res["selected"] == {"draft_kv": PAGES, "draft_indexer": PAGES, "swa": PAGES[-2:],
                                       "draft_state": PAGES[-1:]}
            checked, steps = res["checked"]
            assert checked == steps == len(res["events"])


def test_completion_fires_after_every_dependent_copy(clean_and_faulty):
    clean, _, _ = clean_and_faulty
    for k, ranks in enumerate(clean):
        packed = k < 2
        for res in ranks:
            ev = res["events"]
            fire = ev.index(("CompletionFire", None))
            assert ev[0] == ("TransferLaunch", None)
            target = ev.index(("TargetCopyFinish", None))
            copies = sorted(p for a, p in ev[:fire] if a == "DraftCopyFinish")
            assert copies == sorted(DRAFT_ORDER)
            if packed:      # the packed rows ride with the target's pages
                assert ev[1] == ("DraftCopyFinish", "draft_kv") and target == 2
            # consumers read only after the completion; the gather's close retires it last
            assert ev[-1] == ("TransferRetire", None)
            assert all(a == "BufferRead" for a, _ in ev[fire + 1:-1])
            assert sorted(p for _, p in ev[fire + 1:-1]) == sorted(DRAFT_ORDER + ["target"])


@pytest.mark.parametrize("k,action,prop,conjunct", [
    (0, "TargetCopyFinish", "TargetCopyFinish", "Packed \\subseteq draftDone[t]"),
    (1, "CompletionFire", "CompletionAfterAllCopies", None),
    (2, "CompletionFire", "CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
    (3, "CompletionFire", "CompletionAfterAllCopies", None),
])
def test_skipped_dependent_gather_is_named_by_the_monitor(clean_and_faulty, k, action, prop, conjunct):
    _, faulty, _ = clean_and_faulty
    for res in faulty[k]:
        v = res["violation"]
        assert v is not None
        assert (v["action"], v["property"]) == (action, prop)
        assert v["kind"] == ("action" if k in (0, 2) else "invariant")
        if conjunct is not None:
            assert v["conjunct"] == conjunct
        assert v["location"].startswith("spec/DraftState.tla:")


def test_skipped_dependent_gather_without_monitor_is_silent_and_wrong(clean_and_faulty):
    """Without a monitor the fault goes unnoticed: the completion fires, the target is intact,
    every draft pool the consumer reads is zeros."""
    _, _, silent = clean_and_faulty
    for res in silent:
        assert res["violation"] is None
        assert "target" not in res["wrong"] and "swa" not in res["wrong"]
        assert sorted(res["wrong"]) == sorted(DRAFT_ORDER)
        assert ("CompletionFire", None) in res["events"]
