"""The DraftState monitor over a long run: does a step's cost stay flat as transfers add up?

A speculative-decoding cache (target KV plus two sidecar pools: a draft KV of the target's
row shape and an fp8 indexer) serves requests in a loop. Each iteration writes a fresh 2-page
prefix and backs it up to host (a backup transfer), evicts the device copy, then a second
request matches it, loads it back, reads the draft KV and ends (a load-back transfer, read
after its completion). So each iteration makes two transfers, each of its 6-7 steps
monitored, and retires both. The run is timed per block of iterations, in each mode
(`off`, `sample`, `strict`); a monitor whose step cost grows with the transfers made shows
a last block slower than its first (`growth`), one that keeps a bounded window shows ~1.
"""
from __future__ import annotations

import time

MODES = ("off", "sample", "strict")
PS = 4


def _make():
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig, KVKind
    from hicache.runtime.draft import DependentSet, DependentSpec, DraftConfig, Role
    target = CacheConfig(page_size=PS, device_pages=16, host_pages=32, layers=2, heads=2, head_dim=4,
                         dtype="float16", model="draft-long-run")
    deps = DependentSet(DraftConfig(target, (
        DependentSpec(role=Role.DRAFT_KV, layout="sidecar", layers=1, heads=2, head_dim=4, dtype="float16"),
        DependentSpec(role=Role.DRAFT_INDEXER, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=4,
                      dtype="float8_e4m3fn"))))
    return HiCache(target, deps=deps), deps


def _iteration(cache, deps, i: int) -> None:
    tokens = [1_000_000 + 16 * i + j for j in range(2 * PS)]
    req = cache.match(tokens)
    pages = cache.alloc(2)
    cache.insert(req, pages)
    cache.backup(req.node)
    cache.finish(req)
    cache.drain()
    cache.evict_device(cache.cfg.device_pages)
    req = cache.match(tokens)
    op = cache.load_back(req)
    if op is None or not op.wait(30) or op.error is not None:
        raise RuntimeError(f"draft long run: iteration {i}'s load-back failed ({op and op.error})")
    deps.read(req, "draft_kv")
    cache.finish(req)
    cache.poll()


def _run_mode(mode: str, blocks: int, per_block: int) -> dict:
    from hicache import verified
    if mode == "off":
        verified.disable()
    else:
        verified.enable(mode, violation_dir="hicache-violations/bench")
    cache = None
    try:
        cache, deps = _make()
        times, i = [], 0
        for _ in range(blocks):
            t0 = time.perf_counter()
            for _ in range(per_block):
                _iteration(cache, deps, i)
                i += 1
            times.append(time.perf_counter() - t0)
        mon = verified.monitor_of(deps) if mode != "off" else None
        out = {"block_seconds": [round(t, 4) for t in times], "growth": times[-1] / times[0],
               "records_left": len(deps.transfers)}
        if mon is not None:
            out.update(steps=mon.steps, checked=mon.checked, window=mon.rmap.capacity)
        return out
    finally:
        if cache is not None:
            cache.close()       # (its workers stop even when an iteration failed)
        verified.disable()


def run(blocks: int = 4, per_block: int = 250) -> dict:
    """Each mode's seconds per block of `per_block` iterations (2 transfers each)."""
    out = {"blocks": blocks, "iterations_per_block": per_block, "transfers_per_iteration": 2}
    for mode in MODES:
        out[mode] = _run_mode(mode, blocks, per_block)
    return out
