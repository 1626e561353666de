"""`hicache run`: launch ranks on torch.distributed (gloo) and serve a workload end to end.

Ranks are real processes: CP x PP of them (global rank = stage * cp + cp_rank). They serve a
stream of requests with shared prefixes through the small seeded model, agree at every cache
check (pp_sync, prefix agreement, digests), and report per-tier hits, agreement checks,
violations and the per-layer gather cost with and without overlap.
"""
from __future__ import annotations

import argparse
import time

VERIFY = ("off", "sample", "strict")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cp", type=int, default=2, help="context-parallel ranks per stage (default 2)")
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (default 2)")
    p.add_argument("--requests", type=int, default=24, help="requests to serve (default 24)")
    p.add_argument("--verify", choices=VERIFY, default="strict",
                   help="the engine's own cross-rank checks: off: pp_sync digests only; sample: also every 4th "
                        "check/request; strict: at every one. The spec monitors on each rank follow "
                        "HICACHE_VERIFY=sample|strict (reported as spec_monitors)")
    p.add_argument("--policy", choices=("best_effort", "wait_complete", "timeout"), default="wait_complete",
                   help="storage prefetch stop policy (decided by stage 0)")
    p.add_argument("--page-size", type=int, default=4)
    p.add_argument("--device-pages", type=int, default=4, help="device pages per rank")
    p.add_argument("--host-pages", type=int, default=6, help="host pages per rank")
    p.add_argument("--layers", type=int, default=4, help="model layers (split across --pp stages)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage-fail-p", type=float, default=0.1, help="injected storage failure rate per call, per rank")
    p.add_argument("--transfer-delay", type=float, default=0.004, help="max injected copy delay (s), per rank")
    p.add_argument("--no-overlap", action="store_true", help="gather each layer right before its attention")
    p.add_argument("--bench-iters", type=int, default=5, help="gather benchmark iterations (0: skip)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="bound on every collective and wait (s); the launcher stops the run once no rank "
                        "made progress (finished a collective) for 4x this + 60 s, however long it runs")
    p.add_argument("--draft", choices=("off", "packed", "sidecar"), default="off",
                   help="also serve with a draft model whose KV is a dependent pool of this layout and "
                        "report its acceptance rate with and without cache hits (hicache.dist.draft_accept: "
                        "its own fixed workload of 16 requests, in this process; --seed applies, the "
                        "workload options above do not)")


def _tiers(t: dict) -> dict:
    total = t["input_tokens"] or 1
    out = {name: {"hit_tokens": t[f"{name}_tokens"], "hit_rate": round(t[f"{name}_tokens"] / total, 4)}
           for name in ("device", "host", "storage")}
    out["computed_tokens"] = t["computed_tokens"]
    out["input_tokens"] = t["input_tokens"]
    return out


def summarize(reports: list[dict], seconds: float) -> dict:
    """One JSON object for the whole run; cross-rank consistency is checked here as well."""
    first = reports[0]
    violations = [v for r in reports for v in r["violations"]]
    for key in ("final_digest", "tally", "applied", "cache_checks", "requests"):
        values = {repr(r[key]) for r in reports}
        if len(values) > 1:
            violations.append(f"ranks report different {key}: {sorted(values)}")
    gather_s = sum(r["gather"]["gather_s"] for r in reports)
    wait_s = sum(r["gather"]["wait_s"] for r in reports)
    layers = sum(r["gather"]["layers"] for r in reports)
    events: dict[str, int] = {}
    for r in reports:
        for k, v in r["events"].items():
            events[k] = events.get(k, 0) + v
    out = {
        "ranks": len(reports),
        "requests": first["requests"],
        "agreement_checks": min(r["agreement_checks"] for r in reports),
        "cache_checks": first["cache_checks"],
        "violations": violations,
        "tiers": _tiers(first["tally"]),
        "gather": {
            "overlap_fraction": round(max(0.0, 1.0 - wait_s / gather_s), 4) if gather_s else 0.0,
            "layers_gathered": layers,
            "per_layer_gather_ms": round(gather_s / layers * 1e3, 4) if layers else 0.0,
        },
        "pp_sync": {"cache_checks": first["cache_checks"], "applied": first["applied"]},
        "prefix_agreement": {"prefetches": first["prefetches"], "terminated": first["terminated_prefetches"],
                             "failed_batches_per_rank": [r["prefetch_failed_batches"] for r in reports]},
        "cp_sharding": {"rejected_inserts": first["rejected_inserts"], "evicted_device": first["evicted_device"],
                        "evicted_host": first["evicted_host"]},
        "events": events,
        # the spec monitors each rank ran (HICACHE_VERIFY or hicache.verified: PPSync,
        # PrefixAgreement, CPSharding per rank), None per rank when they were off: whether
        # they ran is otherwise invisible from the command line
        "spec_monitors": [r.get("monitors") for r in reports],
        "seconds": round(seconds, 3),
    }
    benches = [r["gather_bench"] for r in reports if "gather_bench" in r]
    if benches:
        def mean(mode: str, key: str) -> float:
            return round(sum(b[mode][key] for b in benches) / len(benches), 4)
        seq_ms, ovl_ms = mean("sequential", "forward_ms"), mean("overlap", "forward_ms")
        out["gather"]["bench"] = {
            "per_layer_gather_ms": {"sequential": mean("sequential", "per_layer_gather_ms"),
                                    "overlap": mean("overlap", "per_layer_gather_ms")},
            "exposed_wait_ms_per_layer": {
                "sequential": round(sum(b["sequential"]["wait_s"] / b["sequential"]["layers"] for b in benches)
                                    / len(benches) * 1e3, 4),
                "overlap": round(sum(b["overlap"]["wait_s"] / b["overlap"]["layers"] for b in benches)
                                 / len(benches) * 1e3, 4)},
            "forward_ms": {"sequential": seq_ms, "overlap": ovl_ms,
                           "ratio": round(ovl_ms / seq_ms, 4) if seq_ms else None},
            "overlap_fraction": mean("overlap", "overlap_fraction"),
            "prefix_pages": benches[0]["prefix_pages"], "chunk_tokens": benches[0]["chunk_tokens"],
            "iters": benches[0]["iters"],
        }
    return out


def _text(s: dict) -> str:
    t = s["tiers"]
    lines = [f"ranks {s['ranks']}  requests {s['requests']}  cache checks {s['cache_checks']}  "
             f"agreement checks passed {s['agreement_checks']}  violations {len(s['violations'])}",
             "tiers: " + "  ".join(f"{k} {t[k]['hit_tokens']} tok ({t[k]['hit_rate']:.1%})"
                                   for k in ("device", "host", "storage"))
             + f"  computed {t['computed_tokens']} of {t['input_tokens']}",
             f"gather: {s['gather']['per_layer_gather_ms']} ms/layer, overlap fraction {s['gather']['overlap_fraction']}"]
    if "bench" in s["gather"]:
        b = s["gather"]["bench"]["forward_ms"]
        lines.append(f"gather bench: forward {b['sequential']} ms sequential vs {b['overlap']} ms overlapped "
                     f"(ratio {b['ratio']})")
    ran = [m for m in s.get("spec_monitors", []) if m]
    lines.append(f"spec monitors: {sum(v['checked'] for m in ran for v in m.values())} steps checked on "
                 f"{len(ran)} of {s['ranks']} ranks" if ran else
                 "spec monitors: off (HICACHE_VERIFY=sample|strict runs them on every rank)")
    if "draft" in s:
        a = s["draft"]["acceptance_on_hits"]
        lines.append(f"draft ({s['draft']['layout']}): acceptance on {s['draft']['hit_requests']} hit requests "
                     f"{a['cached']} cached vs {a['recomputed']} recomputed "
                     f"(without the draft restore: {a['cached_without_draft_restore']})")
    lines.extend(f"VIOLATION: {v}" for v in s["violations"])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from hicache.cli.main import EXIT_USAGE
    from hicache.cli.output import emit, refuse
    from hicache.dist.config import RunConfig
    from hicache.dist.launch import LaunchError
    from hicache.dist.model import ModelConfig
    from hicache.dist.runner import run_distributed
    from hicache.monitors.maps.dist import verify_config
    from hicache.protocol.prefix_agreement import StopPolicy

    try:
        # bad options and a bad verified-mode environment (HICACHE_VERIFY, _RATE, _SEED) fail
        # here, before any process starts; the ranks get this config, not their environment
        monitors = verify_config()
        fields = dict(cp=args.cp, pp=args.pp, requests=args.requests, verify=args.verify,
                      policy=StopPolicy(args.policy), page_size=args.page_size,
                      device_pages_per_rank=args.device_pages, host_pages_per_rank=args.host_pages,
                      model=ModelConfig(layers=args.layers), seed=args.seed, storage_fail_p=args.storage_fail_p,
                      transfer_delay_s=args.transfer_delay, overlap=not args.no_overlap, timeout_s=args.timeout)
        RunConfig(storage_dir="validate-only", **fields)
        if args.bench_iters < 0:
            raise ValueError(f"bench_iters must be >= 0, got {args.bench_iters}")
    except ValueError as exc:
        return refuse(args, "hicache run", str(exc), EXIT_USAGE)
    t0 = time.perf_counter()
    try:
        reports = run_distributed(gather_bench_iters=args.bench_iters, launch_timeout_s=args.timeout * 4 + 60,
                                  monitors=monitors, **fields)
    except LaunchError as exc:
        emit(args, {"error": str(exc), "failures": exc.failures}, text=str(exc))
        return 2
    summary = summarize(reports, time.perf_counter() - t0)
    if args.draft != "off":
        from hicache.dist.draft_accept import AcceptConfig, compare
        summary["draft"] = compare(AcceptConfig(layout=args.draft, seed=args.seed))
        if not summary["draft"]["same_with_and_without_hits"]:
            summary["violations"].append("draft acceptance differs with and without cache hits")
    emit(args, summary, text=_text(summary))
    return 0 if not summary["violations"] else 1
