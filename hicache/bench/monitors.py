"""`hicache bench monitors`: the same trace replay with verify off, sample and strict.

One process, one parsed trace, the replay driver of hicache.replay run three ways (best of
`--runs` each, the modes interleaved so drift hits all alike); ratios are against off.
Two replays:
  kv_bytes       the replay with KV bytes (kv=small: every load, backup and prefetch copies
                 real tensors), what a serving process does per request;
  metadata_only  the metadata-only replay (~30 us per request, no data movement): the worst
                 case for a monitor, whose per-event cost is then all there is.
Targets (issue 6): strict <= 1.5x off, sample <= 1.05x off.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

TRACE = Path("/work/shared/traces/conversation_trace.jsonl")
PAGE = 64
MODES = ("off", "sample", "strict")


def _replay_once(mode: str, cfg, reqs) -> float:
    from hicache import verified
    from hicache.replay.driver import replay_requests
    if mode == "off":
        verified.disable()
    else:
        verified.enable(mode, violation_dir="hicache-violations/bench")
    try:
        t0 = time.perf_counter()
        replay_requests(cfg, reqs)
        return time.perf_counter() - t0
    finally:
        verified.disable()


def _compare(cfg, reqs, runs: int) -> dict:
    best = {m: float("inf") for m in MODES}
    for _ in range(runs):
        for mode in MODES:
            best[mode] = min(best[mode], _replay_once(mode, cfg, reqs))
    off = best["off"]
    return {
        "seconds": best,
        "sample_vs_off": {"sample_s": best["sample"], "off_s": off, "ratio": best["sample"] / off,
                          "target": "ratio <= 1.05"},
        "strict_vs_off": {"strict_s": best["strict"], "off_s": off, "ratio": best["strict"] / off,
                          "target": "ratio <= 1.5"},
    }


def run(args: argparse.Namespace) -> dict:
    from hicache.replay.driver import ReplayConfig, load_requests
    quick = bool(getattr(args, "quick", False))
    runs = max(1, int(getattr(args, "runs", 3)))
    if not TRACE.exists():
        return {"error": f"trace {TRACE} not found"}
    limit = 60 if quick else 200
    reqs = load_requests(str(TRACE), PAGE, limit)
    base = dict(page_size=PAGE, device_tokens=PAGE * 64, host_tokens=PAGE * 128, write_policy="write_through",
                sync=True, limit=limit)
    out = {"trace": str(TRACE), "requests": len(reqs), "runs": runs,
           "config": {"page_size": PAGE, "device_pages": 64, "host_pages": 128, "write_policy": "write_through",
                      "sample_rate": 0.05}}
    out["kv_bytes"] = _compare(ReplayConfig(kv="small", **base), reqs, runs)
    out["metadata_only"] = _compare(ReplayConfig(**base), reqs, runs)
    return out
