"""Cost model arithmetic and the long-agentic-session trace generator."""
import math
import tracemalloc

import pytest

from hicache.replay.costmodel import CostModel
from hicache.replay.driver import ReplayConfig, Served, TraceStream, replay_requests
from hicache.replay.synth import AgenticTraceConfig, generate, main, write
from hicache.replay.trace import BLOCK_TOKENS, read_trace
from verify_mode import verified_mode


def test_prefill_time_is_compute_or_load_plus_gather():
    m = CostModel(kv_bytes_per_token=1000, layers=1, attn_dim=1, active_params=1.0,
                  engine_flops=100.0, host_link_GBps=1e-6, storage_link_GBps=1e-6,
                  gather_link_GBps=1e-6, engines=1)
    # 10 tokens, all missed: compute = (2*1*10 + 4*1*1*10*(0 + 5)) / 100 = 2.2 s
    assert m.prefill_seconds(10, 0, 0, 0, cp=4, sharded=True) == pytest.approx(2.2)
    # 4 host tokens, replicated: every rank loads 4000 bytes at 1000 B/s = 4 s > compute
    assert m.prefill_seconds(4, 0, 4, 0, cp=4, sharded=False) == pytest.approx(4.0)
    # sharded: 4 ranks load a quarter each (1 s); gather 3/4 of 4000 bytes at 1000 B/s = 3 s
    assert m.prefill_seconds(4, 0, 4, 0, cp=4, sharded=True) == pytest.approx(1.0 + 3.0)


def test_fifo_queue_over_engines():
    # 10 missed tokens: (2*0.5*10 + 4*1*1*10*5) / 210 = 1 s each
    m = CostModel(active_params=0.5, layers=1, attn_dim=1, engine_flops=210.0, engines=1)
    served = Served()
    for _ in range(3):
        served.add(10, 0, 0, 0)
    assert m.prefill_seconds(10, 0, 0, 0, 1, False) == pytest.approx(1.0)
    out = m.simulate([0, 0, 0], served, cp=1, sharded=False)
    assert out["mean_prefill_s"] == pytest.approx(1.0)
    assert out["mean_queue_s"] == pytest.approx(1.0)          # waits 0, 1, 2
    assert out["max_queue_s"] == pytest.approx(2.0)
    two = CostModel(active_params=0.5, layers=1, attn_dim=1, engine_flops=210.0, engines=2)
    assert two.simulate([0, 0, 0], served, 1, False)["mean_queue_s"] == pytest.approx(1 / 3)
    assert m.simulate([0, 5000, 10000], served, 1, False)["mean_queue_s"] == 0.0   # no overlap


def test_bad_cost_model():
    with pytest.raises(ValueError, match="^host_link_GBps:"):
        CostModel(host_link_GBps=0)


def test_agentic_trace_shape(tmp_path):
    cfg = AgenticTraceConfig(requests=400, seed=3)
    path = str(tmp_path / "agentic.jsonl")
    shape = write(cfg, path)
    reqs = list(read_trace(path))      # validates every line
    assert len(reqs) == shape["requests"] == 400
    lens = [r.input_length for r in reqs]
    assert abs(sum(lens) / len(lens) - 136_000) < 0.01 * 136_000
    assert max(lens) <= 900_000 and shape["max_input_tokens"] == max(lens)
    assert shape["block_refs"] == sum(len(r.hash_ids) for r in reqs)
    assert shape["unique_blocks"] == len({b for r in reqs for b in r.hash_ids})
    assert all(len(r.hash_ids) == math.ceil(r.input_length / BLOCK_TOKENS) for r in reqs)
    assert [r.timestamp for r in reqs] == sorted(r.timestamp for r in reqs)
    # ids form a radix tree: an id always follows the same predecessor at the same position
    seen = {}
    for r in reqs:
        prev = None
        for pos, b in enumerate(r.hash_ids):
            assert seen.setdefault(b, (prev, pos)) == (prev, pos)
            prev = b
    assert list(generate(cfg)) == list(generate(cfg))    # deterministic from the seed


def test_clip_at_max_input():
    cfg = AgenticTraceConfig(requests=200, mean_input_tokens=100_000, max_input_tokens=120_000)
    lens = [r["input_length"] for r in generate(cfg)]
    assert max(lens) == 120_000 and abs(sum(lens) / len(lens) - 100_000) < 1_000


def test_long_prompt_replay_memory_is_bounded_by_capacity_not_trace(tmp_path):
    """300 requests of ~136k tokens (41M tokens): the replay streams the trace, so its peak
    allocation stays near the cached keys (8 bytes a token of capacity) plus one prompt."""
    if verified_mode() != "off":
        # this measures the replay's own allocations; a monitor's history and mapped states
        # (verified mode, --hicache-verify) are the monitor's, not the replay's
        pytest.skip("measures the replay's own memory; verified mode adds the monitor's")
    path = str(tmp_path / "agentic.jsonl")
    shape = write(AgenticTraceConfig(requests=300, seed=1), path)
    cfg = ReplayConfig(page_size=512, device_tokens=1_000_448, host_tokens=4_000_256, cp=4, sync=True)
    tracemalloc.start()
    try:
        out = replay_requests(cfg, TraceStream(path, 512, None))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["requests"] == 300
    assert out["input_tokens"] == sum(r.input_length for r in read_trace(path))
    cached = 8 * (4 * cfg.device_tokens + cfg.host_tokens)   # key bytes the tree may hold
    assert peak < 2 * cached + 16 * 8 * shape["max_input_tokens"]
    assert peak < 8 * out["input_tokens"] / 2                 # far below the trace's key bytes


def test_generator_command_writes_the_same_trace(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main([str(a), "--requests", "30", "--seed", "5"]) == 0
    write(AgenticTraceConfig(requests=30, seed=5), str(b))
    assert a.read_bytes() == b.read_bytes() and len(a.read_text().splitlines()) == 30
