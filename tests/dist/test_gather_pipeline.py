"""The per-layer prefix gather on 2 gloo processes, each rank with its own strict
LayerPipeline monitor (`RankLayerPipelineMap`): legal runs raise nothing and every step is
checked; the seeded bug 11 (`GatherFaults.gather_before_restore`: rank 1 gathers a layer it
has not restored, so the gather runs when only rank 0 restored it) is stopped by rank 1's
monitor at that GatherStart, and by rank 0's guard, which learns from rank 1's part of the
collective that rank 1 had not restored the layer. Without the checks the bytes are stale."""
from __future__ import annotations

import pytest

from hicache.dist.launch import launch
from hicache.dist.pipeline_check import pipeline_rank
from hicache.protocol.cp_layout import CPLayout
from hicache.tla.itf import read_itf

CP, LAYERS = 2, 4
#: logical pages of the prefix, in prefix order: both owners, out of order, unequal shares
PAGES = [3, 0, 5, 2, 4]


def _case(overlap: bool, verify: str | None = "strict", fault: tuple[int, int] | None = None) -> dict:
    return {"layers": LAYERS, "local_pages": 3, "pages": PAGES, "overlap": overlap, "verify": verify,
            "fault": fault}


CASES = {
    "strict_overlap": _case(True),
    "strict_serial": _case(False),
    "off_overlap": _case(True, verify=None),
    "fault_overlap": _case(True, fault=(1, 2)),
    "fault_serial_first_layer": _case(False, fault=(1, 0)),
    # no monitor; at the last layer, so rank 1 has no later collective to wait in
    "fault_unmonitored": _case(True, verify=None, fault=(1, LAYERS - 1)),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    vdir = tmp_path_factory.mktemp("pipeline")
    res = launch(pipeline_rank, CP, {"cases": list(CASES.values()), "violation_dir": str(vdir), "timeout_s": 20.0},
                 timeout_s=60)
    return {name: [res[r][k] for r in range(CP)] for k, name in enumerate(CASES)}


def _restores_before_gathers(events: list) -> None:
    """Each rank learned every rank's restore of a layer, once and in layer order, before it
    started that layer's gather (the spec's GatherStart guard, on this rank's knowledge)."""
    seen: dict[int, int] = {}
    for action, rank, layer in events:
        if action == "RankRestoreLayer":
            assert layer == seen.get(rank, 0), (rank, layer)
            seen[rank] = layer + 1
        elif action == "GatherStart":
            assert all(seen.get(r, 0) > layer for r in range(CP)), (layer, seen)
    assert seen == {r: LAYERS for r in range(CP)}


@pytest.mark.parametrize("name", ["strict_overlap", "strict_serial"])
def test_legal_gathers_pass_every_action_check(runs, name):
    for me, res in enumerate(runs[name]):
        assert (res["violation"], res["illegal"], res["wrong"]) == (None, None, [])
        checked, steps = res["checked"]
        # 2 restores, GatherStart/Finish, AttentionStart/Finish per layer: every one a checked step
        assert checked == steps == len(res["events"]) == 6 * LAYERS
        assert all(rank == me for a, rank, _ in res["events"] if a != "RankRestoreLayer")
        _restores_before_gathers(res["events"])


def test_the_monitor_changes_no_step(runs):
    for res, off in zip(runs["strict_overlap"], runs["off_overlap"]):
        assert off["checked"] is None and (off["violation"], off["illegal"], off["wrong"]) == (None, None, [])
        _restores_before_gathers(off["events"])
        assert sorted(off["events"]) == sorted(res["events"])


@pytest.mark.parametrize("name,layer", [("fault_overlap", 2), ("fault_serial_first_layer", 0)])
def test_gather_before_every_rank_restored_is_stopped_at_its_step(runs, name, layer):
    r0, r1 = runs[name]
    v = r1["violation"]
    assert (v["kind"], v["property"], v["action"]) == ("action", "GatherStart", "GatherStart"), v
    assert v["conjunct"] == "BugSkipRestoreWait \\/ \\A r \\in Ranks : restored[r] > l"
    assert v["location"].startswith("spec/LayerPipeline.tla:90:")
    # at the faulty step: rank 1's GatherStart of that layer is the step that failed, and the
    # monitor's last (the attention thread may still release an earlier layer after it, which
    # a tripped monitor no longer counts); rank 0's restore of the layer was known, rank 1's not
    assert r1["events"][v["step"] - 1] == ("GatherStart", 1, layer) and v["step"] == r1["checked"][1]
    before = r1["events"][:v["step"]]
    assert ("RankRestoreLayer", 0, layer) in before and ("RankRestoreLayer", 1, layer) not in r1["events"]
    assert all(a in ("AttentionStart", "AttentionFinish") for a, _, _ in r1["events"][v["step"]:])
    trace = read_itf(v["trace"])
    assert trace["#meta"]["violation"]["action"] == "GatherStart"
    # rank 0 learned from rank 1's part that it had restored `layer` layers only: its guard
    # refuses to write the slot (no GatherStart of that layer, no stale bytes read)
    assert r0["violation"] is None and r0["illegal"].startswith(f"GatherStart({layer}) before rank 1 restored")
    assert ("GatherStart", 0, layer) not in r0["events"] and r0["wrong"] == []
    assert r1["wrong"] == []      # stopped before its attention read the slot


def test_without_the_checks_the_faulty_rank_reads_stale_bytes(runs):
    r0, r1 = runs["fault_unmonitored"]
    layout = CPLayout(cp_size=CP, page_size=2)
    last = LAYERS - 1
    # rank 1 sent its pages of the last layer before restoring them; with no monitor its own
    # guard lets the gather through, and attention reads zeros for rank 1's pages
    assert r1["illegal"] is None and r1["violation"] is None
    assert r1["wrong"] == [(last, p) for p in PAGES if layout.page_owner(p) == 1]
    assert r0["illegal"].startswith(f"GatherStart({last}) before rank 1 restored")
