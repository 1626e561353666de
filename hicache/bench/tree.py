"""`hicache bench tree`: our radix tree and replay against SGLang 0.5.23's RadixCache.

Workloads are those of /work/shared/bench/sglang_tree_bench.py, same sizes, seeds, token
ids and page size (64):
  A  match of a cached 200,000-token prompt (µs per page)
  B  match of 200 prompts of 20,000 tokens sharing 10,000 (µs per page)
  C  the conversation trace through HiCache in metadata-only mode at 2,000,000 device
     tokens (seconds of cache calls, token hit rate over page-aligned tokens)
  L  a 1,000,000-token prompt matched and inserted (ms), extra target
Timing: time.perf_counter; A/B median per call per run, median of runs; C median of runs
(trace expanded untimed, as the harness does). The SGLang harness runs right after ours
in a subprocess when a venv is found (HICACHE_SGLANG_VENV, or .venv-sglang/ in the repo).
"""
from __future__ import annotations

import argparse
import array
import gc
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

PAGE = 64
VOCAB = 151_936
REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(os.environ.get("HICACHE_SGLANG_BENCH", "/work/shared/bench/sglang_tree_bench.py"))
TRACE = Path(os.environ.get("HICACHE_TRACE", "/work/shared/traces/conversation_trace.jsonl"))


def _q(a: np.ndarray) -> array.array:
    out = array.array("q")
    out.frombytes(a.astype("<i8", copy=False).tobytes())
    return out


def _tree():
    from hicache.runtime.hashing import namespace_seed
    from hicache.runtime.radix import RadixTree
    return RadixTree(PAGE, namespace_seed("bench"))


def workload_a(runs: int, calls: int) -> dict:
    from hicache.runtime.radix import encode
    rng = np.random.default_rng(1)
    toks = _q(rng.integers(0, VOCAB, size=200_000))
    pages = 200_000 // PAGE
    tree = _tree()
    tree.insert(encode(toks, PAGE), list(range(pages)))
    for _ in range(20):
        m = tree.match(encode(toks, PAGE))
    assert m.device_pages == pages
    pc = time.perf_counter
    meds = []
    for _ in range(runs):
        gc.collect()
        ts = []
        for _ in range(calls):
            t0 = pc()
            m = tree.match(encode(toks, PAGE))
            ts.append(pc() - t0)
        assert m.device_pages == pages
        meds.append(statistics.median(ts))
    per_call = statistics.median(meds)
    return {"pages": pages, "match_us_per_page": per_call * 1e6 / pages,
            "match_us_per_call": per_call * 1e6}


def workload_b(runs: int) -> dict:
    from hicache.runtime.radix import encode
    rng = np.random.default_rng(2)
    common = rng.integers(0, VOCAB, size=10_000)
    prompts = [_q(np.concatenate([common, rng.integers(0, VOCAB, size=10_000)])) for _ in range(200)]
    pages = 20_000 // PAGE
    tree = _tree()
    t0 = time.perf_counter()
    for p in prompts:
        tree.insert(encode(p, PAGE), list(range(pages)))
    insert_s = time.perf_counter() - t0
    for p in prompts:
        assert tree.match(encode(p, PAGE)).device_pages == pages
    pc = time.perf_counter
    meds = []
    for _ in range(runs):
        gc.collect()
        ts = []
        for p in prompts:
            t0 = pc()
            tree.match(encode(p, PAGE))
            ts.append(pc() - t0)
        meds.append(statistics.median(ts))
    per_call = statistics.median(meds)
    return {"pages_per_prompt": pages, "match_us_per_page": per_call * 1e6 / pages,
            "insert_all_ms": insert_s * 1e3}


def workload_c(runs: int, limit: int | None) -> dict:
    from hicache.replay.driver import ReplayConfig, load_requests, replay_requests
    reqs = load_requests(str(TRACE), PAGE, limit)
    cfg = ReplayConfig(page_size=PAGE, device_tokens=2_000_000)
    outs = []
    for _ in range(runs + 1):   # the first pass is the warm-up, as in the harness
        gc.collect()
        outs.append(replay_requests(cfg, reqs))
    outs = outs[1:]
    aligned = sum(len(k) // 8 for k, _ in reqs)
    secs = [o["seconds"] for o in outs]
    return {"requests": len(reqs), "seconds": statistics.median(secs), "seconds_runs": secs,
            "token_hit_rate": outs[0]["hit_tokens"] / aligned,
            "hit_rate_raw_tokens": outs[0]["hit_rate"]}


def workload_l(runs: int) -> dict:
    """1,000,000-token prompt: match + allocate + insert + finish through HiCache."""
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig
    rng = np.random.default_rng(3)
    toks = _q(rng.integers(0, VOCAB, size=1_000_000))
    pages = 1_000_000 // PAGE
    ts, ms = [], []
    for _ in range(runs):
        cache = HiCache(CacheConfig(page_size=PAGE, device_pages=pages, metadata_only=True))
        gc.collect()
        t0 = time.perf_counter()
        req = cache.match(toks)
        cache.insert(req, cache.alloc(pages - req.device_hit))
        cache.finish(req)
        t1 = time.perf_counter()
        req = cache.match(toks)
        t2 = time.perf_counter()
        assert req.device_hit == pages
        cache.finish(req)
        ts.append(t1 - t0)
        ms.append(t2 - t1)
    return {"tokens": 1_000_000, "match_insert_ms": statistics.median(ts) * 1e3,
            "rematch_ms": statistics.median(ms) * 1e3, "target_ms": 10.0}


def sglang_python() -> Path | None:
    env = os.environ.get("HICACHE_SGLANG_VENV")
    for venv in ([Path(env)] if env else []) + [REPO / ".venv-sglang"]:
        py = venv / "bin" / "python"
        if py.exists():
            return py
    return None


def run_sglang(py: Path, runs: int, limit: int | None) -> dict:
    cmd = [str(py), str(HARNESS), "--runs", str(runs), "--trace", str(TRACE)]
    if limit:
        cmd += ["--trace-limit", str(limit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "errors": {"run": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}}


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours is not None and theirs else None


def run(args: argparse.Namespace) -> dict:
    runs = max(1, args.runs)
    quick = bool(getattr(args, "quick", False))
    limit = 1000 if quick else None
    ours = {
        "A": workload_a(runs, 50 if quick else 200),
        "B": workload_b(runs),
        "C": workload_c(1 if quick else runs, limit),
        "L": workload_l(max(runs, 11)),   # a few ms each: more runs steady the median
    }
    py = sglang_python()
    base = run_sglang(py, runs, limit) if py is not None and HARNESS.exists() else None
    s = (base or {}).get("summary", {}) if base else {}
    cmp = {
        "A_match_us_per_page": {"ours": ours["A"]["match_us_per_page"],
                                "sglang": s.get("A_match_us_per_page"),
                                "ratio": _ratio(ours["A"]["match_us_per_page"], s.get("A_match_us_per_page")),
                                "target": "ratio <= 1.0"},
        "B_match_us_per_page": {"ours": ours["B"]["match_us_per_page"],
                                "sglang": s.get("B_match_us_per_page"),
                                "ratio": _ratio(ours["B"]["match_us_per_page"], s.get("B_match_us_per_page")),
                                "target": "ratio <= 1.0"},
        "C_seconds": {"ours": ours["C"]["seconds"], "sglang": s.get("C_seconds"),
                      "ratio": _ratio(ours["C"]["seconds"], s.get("C_seconds")),
                      "target": "ratio <= 2.0"},
        "C_token_hit_rate": {"ours": ours["C"]["token_hit_rate"], "sglang": s.get("C_token_hit_rate"),
                             "ratio": _ratio(ours["C"]["token_hit_rate"], s.get("C_token_hit_rate")),
                             "points_apart": (abs(ours["C"]["token_hit_rate"] - s["C_token_hit_rate"]) * 100
                                              if s.get("C_token_hit_rate") is not None else None),
                             "target": "within 0.1 point"},
        "L_1M_match_insert_ms": {"ours": ours["L"]["match_insert_ms"], "target": 10.0,
                                 "ratio": ours["L"]["match_insert_ms"] / 10.0},
    }
    return {"bench": "tree", "quick": quick, "runs": runs, "ours": ours,
            "comparisons": cmp, "baseline": base,
            "baseline_python": str(py) if py else None}
