"""CP page accounting in replay: the sharded allocator keeps the protocol's placement, the
sharded cache keeps every chain's rotation, and the evaluation shows the brief's direction."""
import json
import random
import subprocess
import sys

import pytest

from hicache.protocol.cp_alloc import ShardedPageAllocator
from hicache.protocol.cp_layout import CPLayout, chain_owner_class
from hicache.replay.cp import ShardedCache, ShardedDeviceAllocator
from hicache.replay.driver import ReplayConfig, TraceStream, load_requests, replay_requests
from hicache.replay.evaluate import EvalConfig, ceiling, evaluate
from verify_mode import verified_mode

TRACES = "/work/shared/traces"
CONV = f"{TRACES}/conversation_trace.jsonl"
SYN = f"{TRACES}/synthetic_trace.jsonl"


def test_sharded_allocator_places_like_the_protocol_allocator():
    k, per_rank = 4, 20
    layout = CPLayout(cp_size=k, page_size=16)
    ours = ShardedDeviceAllocator(layout, per_rank)
    ref = ShardedPageAllocator(layout, per_rank)
    rng = random.Random(7)
    held = []
    for _ in range(400):
        if held and rng.random() < 0.4:
            pages, ref_pages = held.pop(rng.randrange(len(held)))
            ours.release(pages)
            for p in ref_pages:      # the reference hands out other local pages (heap order)
                ref.free(p)
            continue
        base, start, count = rng.randrange(k), rng.randrange(30), rng.randrange(1, 12)
        got = ours.alloc_chain(base, start, count)
        want = ref.alloc_chain(base, start, count)
        assert (got is None) == (want is None)          # all-or-nothing, same verdict
        assert ours.free_per_class() == ref.free_per_class()
        if got is None:
            continue
        assert [layout.page_owner(p) for p in got] == [layout.page_owner(p) for p in want] == [
            chain_owner_class(base, start + i, k) for i in range(count)]
        assert all(layout.local_page(p) < per_rank for p in got)
        held.append((got, want))
    live = [p for pages, _ in held for p in pages]
    assert len(set(live)) == len(live)
    assert ours.free_set().isdisjoint(live) and len(ours.free_set()) + len(live) == k * per_rank


def test_need_counts_pages_per_class():
    a = ShardedDeviceAllocator(CPLayout(cp_size=4, page_size=1), 10)
    assert a.need(base=3, start=2, count=6) == [1, 2, 2, 1]   # classes 1,2,3,0,1,2
    assert a.alloc_chain(0, 0, 41) is None and a.free == 40


def _rotation_kept(cache: ShardedCache) -> int:
    """Every device page of a chain at position P is in class (base + P) mod K."""
    k = cache.layout.cp_size
    checked = 0
    stack = [(c, 0, cache._bases[key]) for key, c in cache.tree.root.children.items()]
    while stack:
        node, pos, base = stack.pop()
        if node.device is not None:
            for i, p in enumerate(node.device):
                assert cache.layout.page_owner(p) == chain_owner_class(base, pos + i, k), node
                checked += 1
        stack.extend((c, pos + node.n, base) for c in node.children.values())
    return checked


def test_sharded_cache_keeps_rotations_through_evictions_and_load_backs():
    cfg = ReplayConfig(page_size=128, device_tokens=40_000, host_tokens=400_000, cp=4, sync=True)
    cache = cfg.make_cache()
    assert isinstance(cache, ShardedCache) and cache.cfg.device_pages == 4 * (40_000 // 128)
    pb = 128 * 8
    for key, n in load_requests(SYN, 128, limit=400):
        req = cache.match(key, n_tokens=n)
        cache.load_back(req)
        for op in req.loads:
            op.wait()
        new = cache.alloc(len(key) // pb - len(cache.prefix_pages(req)))
        assert new is not None
        cache.insert(req, new)
        cache.finish(req)
        cache.drain()
        assert max(cache.owner_pages()) <= 40_000 // 128
    cache.tree.check()
    assert _rotation_kept(cache) == cache.tree.device_pages > 0
    m = cache.metrics
    assert m.device_evicted_tokens > 0 and m.host_hit_tokens > 0   # both paths exercised
    cache.close()


def test_replicate_is_the_plain_cache_at_one_ranks_memory():
    reqs = load_requests(SYN, 64, limit=600)
    plain = replay_requests(ReplayConfig(device_tokens=300_000, host_tokens=1_000_000, sync=True), reqs)
    rep = replay_requests(ReplayConfig(device_tokens=300_000, host_tokens=1_000_000, sync=True,
                                       cp=4, shard=False), reqs)
    one = replay_requests(ReplayConfig(device_tokens=300_000, host_tokens=1_000_000, sync=True,
                                       cp=1, shard=True), reqs)
    assert rep["tiers"] == plain["tiers"] == one["tiers"]
    assert rep["cp"]["logical_device_tokens"] == 300_000 - 300_000 % 64


def test_evaluation_on_the_conversation_trace_shows_the_briefs_direction():
    if verified_mode() == "strict":
        # 2,000 requests twice at full capacity: strict monitors checking every event of it
        # (CPSharding's map is O(pages) per event) run for tens of minutes; sample mode runs
        pytest.skip("a whole-trace evaluation; strict monitors would take tens of minutes")
    cfg = EvalConfig(page_size=64, cp=4, device_tokens=500_000, host_tokens=8_000_000,
                     storage="memory", limit=2000)
    out = evaluate(CONV, cfg)
    b, s = out["setups"]["baseline"], out["setups"]["sharded"]
    c = out["comparisons"]
    assert b["input_tokens"] == s["input_tokens"]
    assert s["logical_device_tokens"] == 4 * b["logical_device_tokens"]
    assert s["device_hit_rate"] > b["device_hit_rate"]
    assert s["host_served_tokens"] < b["host_served_tokens"]
    assert c["host_served_tokens"]["reduction"] == 1 - s["host_served_tokens"] / b["host_served_tokens"]
    assert c["device_hit_rate"]["delta_points"] == pytest.approx(
        100 * (s["device_hit_rate"] - b["device_hit_rate"]))
    # the host budget is equal: device+host hits move far less than the device tier
    assert abs(c["device_host_hit_rate"]["delta_points"]) < c["device_hit_rate"]["delta_points"] / 4
    g = c["storage_hit_rate"]
    ceil = ceiling(CONV, 64, 2000)["hit_rate"]
    assert g["without"] == s["hit_rate"] and g["ceiling"] == ceil
    assert s["hit_rate"] < g["with"] <= ceil      # storage raises the hit rate, never past the ceiling
    assert out["storage"]["with"]["storage_served_tokens"] > 0


def test_file_storage_tier_raises_the_hit_rate_as_the_memory_backend_does():
    outs = []
    for storage in ("file", "memory"):
        cfg = EvalConfig(page_size=512, cp=2, device_tokens=20_480, host_tokens=102_400,
                         storage=storage, limit=250)
        outs.append(evaluate(SYN, cfg))
    g = outs[0]["comparisons"]["storage_hit_rate"]
    assert g["without"] < g["with"] <= g["ceiling"]
    # same protocol, deterministic replay: the two backends serve the same tokens
    keys = ("hit_rate", "device_tokens_served", "host_served_tokens", "storage_served_tokens")
    assert [{k: o["storage"]["with"][k] for k in keys} for o in outs][0] == \
        {k: outs[1]["storage"]["with"][k] for k in keys}


def test_infinite_sharded_capacity_hits_the_ceiling():
    if verified_mode() == "strict":
        # a capacity of the whole trace: CPSharding's strict map is O(pages) per event
        pytest.skip("whole-trace capacity; strict monitors would take tens of minutes")
    reqs = TraceStream(SYN, 64, 1500)
    ceil = ceiling(SYN, 64, 1500)
    out = replay_requests(ReplayConfig(page_size=64, device_tokens=ceil["input_tokens"] // 4 + 64,
                                       cp=4), reqs)
    assert out["tiers"]["device"]["hit_tokens"] == ceil["hit_tokens"]


def test_cli_cp_and_evaluate_json(tmp_path):
    base = [sys.executable, "-m", "hicache.cli", "replay", SYN, "--limit", "300", "--json"]
    proc = subprocess.run(base + ["--cp", "4", "--device-tokens", "50000", "--host-tokens", "400000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    one = json.loads(proc.stdout.strip().splitlines()[-1])
    assert one["cp"] == {"ranks": 4, "shard": True, "device_tokens_per_rank": 49_984,
                         "logical_device_tokens": 4 * 49_984}
    proc = subprocess.run(base + ["--evaluate", "--cp", "4", "--device-tokens", "50000",
                                  "--host-tokens", "400000", "--storage", "memory", "--cost-model"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ev = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(ev["setups"]) == {"baseline", "sharded"}
    for name in ("device_hit_rate", "device_host_hit_rate", "host_served_tokens", "storage_hit_rate",
                 "mean_prefill_s", "mean_queue_s"):
        assert "ratio" in ev["comparisons"][name], name
    assert "reduction" in ev["comparisons"]["host_served_tokens"]
    proc = subprocess.run(base + ["--plot", str(tmp_path / "x.png")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 150 and "--evaluate" in json.loads(proc.stdout.splitlines()[-1])["error"]


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from hicache.replay.plot import plot
    cfg = EvalConfig(page_size=512, cp=2, device_tokens=51_200, host_tokens=204_800, limit=200,
                     sweep=(0.5, 1.0))
    out = evaluate(SYN, cfg)
    assert [r["device_tokens_per_rank"] for r in out["sweep"]] == [25_600, 51_200]
    path = plot(out, str(tmp_path / "hit.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("kwargs, field", [
    ({"cp": 1}, "cp"), ({"host_tokens": 0}, "host_tokens"), ({"sweep": (0.0,)}, "sweep"),
    ({"page_size": 100}, "page_size")])
def test_bad_eval_config(kwargs, field):
    with pytest.raises(ValueError) as exc:
        EvalConfig(**kwargs)
    assert str(exc.value).startswith(field + ":")


def test_sharded_small_kv_restores_every_byte_through_host_and_storage():
    import contextlib
    from hicache.replay.driver import open_storage
    reqs = load_requests(SYN, 512, limit=150)
    cfg = ReplayConfig(page_size=512, device_tokens=20_480, host_tokens=153_600, storage="file",
                       kv="small", sync=True, cp=4)
    with contextlib.ExitStack() as stack:
        out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack))
    t = out["tiers"]
    assert out["corrupt_pages"] == 0
    assert min(t["device"]["hit_tokens"], t["host"]["hit_tokens"], t["storage"]["hit_tokens"]) > 0


@pytest.mark.parametrize("sweep, msg", [("abc", "--sweep: 'abc' is not a number"),
                                        ("1,-2", "--sweep: factors must be positive and finite, got -2.0"),
                                        ("1,nan", "--sweep: factors must be positive and finite, got nan"),
                                        ("1e308", "--sweep: factor 1e+308 gives inf device tokens")])
def test_cli_evaluate_refuses_a_bad_sweep(capsys, sweep, msg):
    from hicache.cli.main import main
    code = main(["replay", SYN, "--limit", "3", "--cp", "2", "--host-tokens", "100000", "--evaluate",
                 "--sweep", sweep, "--json"])
    assert code == 150 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"].startswith(msg)


def test_cli_evaluate_plot_that_cannot_be_written_keeps_the_evaluation(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from hicache.cli.main import main
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    code = main(["replay", SYN, "--limit", "30", "--cp", "2", "--host-tokens", "100000", "--evaluate",
                 "--plot", str(blocked / "x.png"), "--json"])
    out, err = capsys.readouterr()
    ev = json.loads(out.strip().splitlines()[-1])
    assert code == 1 and set(ev["setups"]) == {"baseline", "sharded"} and ev["plot"] is None
    assert ev["plot_error"].startswith(str(blocked / "x.png")) and "--plot: cannot write" in err
