"""Replay drives the real cache; its hit rates must agree with independent computations."""
import contextlib
import json
import os
import re
import subprocess
import sys

import pytest

from hicache.replay.driver import (ReplayConfig, TraceStream, load_requests, open_storage,
                                   replay_requests)
from hicache.replay.trace import BLOCK_TOKENS, read_trace

TRACES = "/work/shared/traces"
CONV = f"{TRACES}/conversation_trace.jsonl"
SYN = f"{TRACES}/synthetic_trace.jsonl"


def ceiling(path: str, ps: int) -> tuple[int, int, int]:
    """Infinite-cache token hits, computed from the block ids alone: a page hits when the
    same page (same block prefix, same offset) was in an earlier request's whole pages and
    so were all pages before it. Returns (hit tokens, input tokens, whole-page tokens)."""
    per_block = BLOCK_TOKENS // ps
    prefix_id: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    hit = total = aligned = 0
    for r in read_trace(path):
        pid = 0
        pids = []
        for b in r.hash_ids:
            pid = prefix_id.setdefault((pid, b), len(prefix_id) + 1)
            pids.append(pid)
        n = r.input_length // ps
        k = 0
        while k < n and (pids[k // per_block], k % per_block) in seen:
            k += 1
        seen.update((pids[p // per_block], p % per_block) for p in range(k, n))
        hit += k * ps
        total += r.input_length
        aligned += n * ps
    return hit, total, aligned


@pytest.mark.parametrize("path", [CONV, SYN])
def test_infinite_capacity_hits_the_ceiling_exactly(path):
    ps = 64
    reqs = TraceStream(path, ps, None)     # streamed: the expanded trace never sits in memory
    hit, total, aligned = ceiling(path, ps)
    out = replay_requests(ReplayConfig(page_size=ps, device_tokens=aligned), reqs)
    assert out["input_tokens"] == total
    assert out["tiers"]["device"]["hit_tokens"] == hit
    assert out["hit_rate"] == hit / total
    assert out["metrics"]["device_evicted_tokens"] == 0


# README table: LRU over 512-token blocks, block hit rate at capacity C blocks
TABLE = {(CONV, 5_000): 0.110, (CONV, 20_000): 0.287, (SYN, 5_000): 0.279, (SYN, 20_000): 0.571}


@pytest.mark.parametrize("path, blocks", sorted(TABLE))
def test_device_lru_lands_near_the_block_lru_table(path, blocks):
    reqs = TraceStream(path, BLOCK_TOKENS, None)
    out = replay_requests(ReplayConfig(page_size=BLOCK_TOKENS, device_tokens=blocks * BLOCK_TOKENS), reqs)
    refs = sum(len(r.hash_ids) for r in read_trace(path))
    rate = out["hit_tokens"] / BLOCK_TOKENS / refs
    # our LRU evicts whole radix nodes (runs of blocks) and caches only whole blocks
    assert abs(rate - TABLE[path, blocks]) < 0.015, rate


def test_small_kv_with_host_and_storage_restores_every_byte():
    reqs = load_requests(SYN, 512, limit=140)
    cfg = ReplayConfig(page_size=512, device_tokens=50_000, host_tokens=150_000,
                       storage="file", kv="small", sync=True)
    with contextlib.ExitStack() as stack:
        out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack))
    t = out["tiers"]
    assert out["corrupt_pages"] == 0
    assert t["device"]["hit_tokens"] > 0 and t["host"]["hit_tokens"] > 0
    assert t["storage"]["hit_tokens"] > 0
    assert out["hit_tokens"] == sum(v["hit_tokens"] for v in t.values())
    with contextlib.ExitStack() as stack:   # sync mode is deterministic: same run, same hits
        again = replay_requests(cfg, reqs, open_storage(cfg.storage, stack))
    assert again["tiers"] == t


def test_cli_json_contract(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--limit", "200",
                           "--device-tokens", "100000", "--host-tokens", "300000", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"requests", "input_tokens", "hit_rate", "tiers", "seconds"} <= set(out)
    assert set(out["tiers"]) == {"device", "host", "storage"}
    assert all({"hit_tokens", "hit_rate"} <= set(v) for v in out["tiers"].values())
    assert out["requests"] == 200


def test_cli_verify_runs_the_replay_under_the_monitors(tmp_path):
    """--verify strict attaches the runtime monitors to the replay's cache (with --cp, the
    CPSharding one too) and reports a clean run; --plot without --evaluate is refused."""
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--verify", "strict",
                           "--limit", "40", "--sync", "--page-size", "16", "--device-tokens", "2048",
                           "--host-tokens", "8192", "--cp", "2", "--violation-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    v = out["verify"]
    assert (v["mode"], v["violations"], out["requests"]) == ("strict", 0, 40)
    # strict: both monitors checked every event they saw
    assert [m["spec"] for m in v["monitors"]] == ["spec/HostTier.tla", "spec/CPSharding.tla"]
    assert all(m["checked"] == m["events"] >= 80 for m in v["monitors"])
    assert not list(tmp_path.iterdir())          # no violation trace written
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--plot", "x.png", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 150 and "--evaluate" in json.loads(proc.stdout.splitlines()[-1])["error"]


def test_cli_verify_sample_reports_what_the_budget_spent_checking(tmp_path):
    """--verify sample: the leader's report (HostTier's) carries the seconds its budget spent
    checking and the seconds it lived, in the JSON and in words; its companion, checked at
    the leader's samples and charged to the leader, carries neither."""
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--verify", "sample",
                           "--limit", "40", "--sync", "--page-size", "16", "--device-tokens", "2048",
                           "--host-tokens", "8192", "--violation-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert "verify sample: no violation (spec/HostTier.tla: " in text
    m = re.search(r"checking took ([0-9.]+) ms of its ([0-9.]+) ms \(([0-9.]+) %\)", text)
    assert m is not None, text
    # (at least the final cache check was charged; the share's arithmetic, on unrounded
    # figures, is describe's test's: test_monitor_runtime.py)
    spent, alive, share = map(float, m.groups())
    assert 0 < spent <= alive and 0 <= share <= 100
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--verify", "sample",
                           "--limit", "40", "--sync", "--page-size", "16", "--device-tokens", "2048",
                           "--host-tokens", "8192", "--violation-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    leader, companion = json.loads(proc.stdout.splitlines()[-1])["verify"]["monitors"]
    assert 0 < leader["checking_s"] <= leader["alive_s"]
    assert "checking_s" not in companion and "alive_s" not in companion


def test_cli_verify_follows_hicache_verify_and_off_holds_over_it(tmp_path):
    """Without --verify, HICACHE_VERIFY decides, and the replay reports it as under the flag
    (its `verify` block; a violation exits 4): the variable alone attached monitors the report
    never mentioned. An explicit --verify off attaches nothing whatever the variable says."""
    base = [sys.executable, "-m", "hicache.cli", "replay", SYN, "--limit", "20", "--page-size", "16",
            "--device-tokens", "2048", "--host-tokens", "8192", "--json"]
    env = dict(os.environ, HICACHE_VERIFY="strict", HICACHE_VIOLATION_DIR=str(tmp_path))
    for extra, mode in (([], "strict"), (["--verify", "off"], None)):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.splitlines()[-1])
        if mode is None:
            assert "verify" not in out and out["monitors"] is None
        else:
            assert out["verify"]["mode"] == mode and out["verify"]["monitors"][0]["checked"] > 0
    proc = subprocess.run(base, capture_output=True, text=True, timeout=120, env=dict(env, HICACHE_VERIFY="bogus"))
    assert proc.returncode == 150
    assert json.loads(proc.stdout.splitlines()[-1])["error"].startswith("HICACHE_VERIFY: 'bogus'")


def test_cli_verify_flag_is_not_blocked_by_a_bad_hicache_verify(tmp_path):
    """--verify strict is the mode: a bad HICACHE_VERIFY, which it replaces, refused the replay
    (at the variable's parse, and again at `hicache.verified`'s import, which enabled from it).
    A fresh process: in this one the pytest plugin's verified mode is in force."""
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--limit", "20", "--page-size", "16",
                           "--device-tokens", "2048", "--host-tokens", "8192", "--json", "--verify", "strict",
                           "--violation-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, HICACHE_VERIFY="bogus"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    v = json.loads(proc.stdout.splitlines()[-1])["verify"]
    assert v["mode"] == "strict" and v["monitors"][0]["checked"] > 0


def test_cli_reports_bad_lines(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"x": 1}\n')
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", str(bad), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 150      # EXIT_USAGE: bad input
    assert json.loads(proc.stdout.splitlines()[-1])["error"].startswith(f"{bad}:2: missing field")


def test_small_kv_through_mooncake_restores_every_byte():
    from hicache.storage.mooncake_server import unavailable_reason
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Mooncake Store cannot run here: {reason}")
    reqs = load_requests(SYN, 512, limit=200)
    cfg = ReplayConfig(page_size=512, device_tokens=50_000, host_tokens=150_000,
                       storage="mooncake", kv="small", sync=True)
    with contextlib.ExitStack() as stack:
        out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack))
    assert out["corrupt_pages"] == 0
    assert out["tiers"]["storage"]["hit_tokens"] > 0


def test_a_dead_mooncake_master_is_counted_failures_not_a_crawl(monkeypatch):
    """The master killed once the client is up: each storage call then took seconds and
    returned "absent", so the replay crawled for tens of minutes and read as a cold cache.
    Now the calls are bounded, the breaker opens after three failures, and the report
    counts them; no byte is wrong."""
    import os
    import signal
    import time

    from hicache.storage import mooncake_store
    from hicache.storage.mooncake_server import MooncakeMaster, unavailable_reason
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Mooncake Store cannot run here: {reason}")
    masters = []
    start, init = MooncakeMaster.start, mooncake_store.MooncakeStorage.__init__

    def start_and_keep(cls, *a, **k):
        masters.append(start.__func__(cls, *a, **k))
        return masters[-1]
    monkeypatch.setattr(MooncakeMaster, "start", classmethod(start_and_keep))

    def init_then_kill(self, *a, **k):
        init(self, *a, **k)
        os.killpg(masters[-1].proc.pid, signal.SIGKILL)      # the master dies under the client
    monkeypatch.setattr(mooncake_store.MooncakeStorage, "__init__", init_then_kill)
    reqs = load_requests(SYN, 512, limit=120)
    cfg = ReplayConfig(page_size=512, device_tokens=20_000, host_tokens=60_000,
                       storage="mooncake", kv="small", sync=True)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack))
    assert time.monotonic() - t0 < 120
    st = out["storage"]
    assert st["circuit_open"] > 0 and st["failed_pages"] > 0
    assert out["corrupt_pages"] == 0 and out["tiers"]["storage"]["hit_tokens"] == 0


def test_a_limit_below_one_request_is_refused(tmp_path):
    """--limit 0 or -3 used to replay one request (the generator's count check never fired):
    refused by the config and by read_trace, naming the field."""
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"limit: must be a positive int \\(requests\\), got {bad}"):
            ReplayConfig(limit=bad)
        with pytest.raises(ValueError, match="limit: must be a positive int"):
            next(read_trace(SYN, bad))
    assert len(list(read_trace(SYN, 1))) == 1


def test_on_cache_sees_the_cache_before_it_serves_and_a_failure_there_closes_it():
    """`replay_requests(on_cache=...)`: called once with the cache, built and not yet
    serving (a listener it subscribes sees every request's match); when it raises, the
    replay raises that error and the cache is closed (its workers stopped), not left
    running."""
    from hicache.runtime.events import Recorder
    reqs = load_requests(CONV, 64, 12)
    cfg = ReplayConfig(page_size=64, device_tokens=64 * 32, host_tokens=64 * 64, sync=True)
    rec, seen = Recorder(), []

    def subscribe(cache):
        seen.append(cache)
        assert cache.metrics.requests == 0
        cache.bus.subscribe(rec)
    out = replay_requests(cfg, reqs, on_cache=subscribe)
    assert len(seen) == 1 and out["requests"] == 12
    assert sum(1 for e in rec.events if str(e.action) == "RequestMatch") == 12

    def refuse(cache):
        seen.append(cache)
        raise RuntimeError("no monitor for this cache")
    with pytest.raises(RuntimeError, match="no monitor for this cache"):
        replay_requests(cfg, reqs, on_cache=refuse)
    assert seen[-1]._closed and seen[-1].metrics.requests == 0


def test_load_requests_from_a_start_is_the_same_window_of_the_whole():
    whole = load_requests(SYN, 128, 40)
    assert load_requests(SYN, 128, 40, start=25) == whole[25:] and len(whole[25:]) == 15
    assert load_requests(SYN, 128, 40, start=40) == []
