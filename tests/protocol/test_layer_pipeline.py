import pytest

from hicache.protocol.config_agreement import find_mismatch
from hicache.protocol.events import NULL_LISTENER, EventRecorder
from hicache.protocol.layer_pipeline import IllegalTransition, LayerPipelineGuard, slot_of
from hicache.protocol.vocabulary import LayerPipeline


def test_double_buffered_schedule_is_legal():
    g = LayerPipelineGuard(num_layers=4)
    for l in range(4):
        g.rank_restore_layer(l)
    g.gather_start(0); g.gather_finish(0)
    g.gather_start(1)                       # overlaps attention on layer 0
    g.attention_start(0); g.gather_finish(1); g.attention_finish(0)
    g.gather_start(2)                       # slot 0 is free again
    g.attention_start(1); g.attention_finish(1)
    assert [slot_of(l) for l in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize("script,msg", [
    (["gs0"], "before RankRestoreLayer"),
    (["r0", "as0"], "before GatherFinish"),
    (["r0", "r1", "r2", "gs0", "gf0", "gs1", "gf1", "gs2"], "overwrites slot 0"),
    (["r0", "gf0"], "without GatherStart"),
    (["r0", "gs0", "gs0"], "twice"),
    # attention on a layer whose slot was reused (the gather of layer 2 wrote slot 0): twice
    (["r0", "r1", "r2", "gs0", "gf0", "as0", "af0", "gs1", "gf1", "as1", "af1", "gs2", "gf2", "as0"], "twice"),
    (["r0", "gs0", "gf0", "as0", "as0"], "twice"),
    (["r0", "r1", "gs0", "gf0", "gs1", "gf1", "as1"], r"AttentionStart\(1\) before AttentionStart\(0\)"),
    (["r0", "r1", "gs0", "gf0", "gs1", "gf1", "as0", "as1"], "while attention on layer 0"),
    (["r0", "r1", "gs1"], r"GatherStart\(1\) before GatherStart\(0\)"),
    (["r0", "r1", "gs0", "gs1"], "while the gather of layer 0 is in progress"),
    (["r1"], r"RankRestoreLayer\(1\) before RankRestoreLayer\(0\)"),
    (["r0", "r0"], "twice"),
])
def test_illegal_orders_fail_loudly(script, msg):
    g = LayerPipelineGuard(num_layers=3)
    ops = {"r": g.rank_restore_layer, "gs": g.gather_start, "gf": g.gather_finish, "as": g.attention_start,
           "af": g.attention_finish}
    with pytest.raises(IllegalTransition, match=msg):
        for op in script:
            ops[op[:-1]](int(op[-1]))


@pytest.mark.parametrize("n", [0, -1, 2.0, True])
def test_a_guard_needs_a_layer(n):
    with pytest.raises(ValueError, match="num_layers"):
        LayerPipelineGuard(n)


def test_config_mismatch_names_field_and_ranks():
    assert find_mismatch([{"ps": 4, "cp": 2}, {"ps": 4, "cp": 2}]) is None
    msg = find_mismatch([{"ps": 4, "cp": 2}, {"ps": 8, "cp": 2}, {"ps": 4, "cp": 2}])
    assert "'ps'" in msg and "[0, 2]" in msg and "[1]" in msg


def test_event_listener_hook():
    NULL_LISTENER(LayerPipeline.GatherStart, {})
    rec = EventRecorder()
    rec(LayerPipeline.GatherStart, {"layer": 0})
    assert rec.names() == ["GatherStart"] and rec.count(LayerPipeline.GatherStart) == 1
