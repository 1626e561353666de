"""`hicache replay TRACE`: replay a Mooncake-format trace through the real cache."""
from __future__ import annotations

import argparse
import sys

from hicache.cli.output import emit


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="JSONL trace (timestamp, input_length, output_length, hash_ids)")
    p.add_argument("--page-size", type=int, default=64, help="tokens per page (divides 512)")
    p.add_argument("--device-tokens", type=int, default=2_000_000, help="device tier capacity")
    p.add_argument("--host-tokens", type=int, default=0, help="host tier capacity (0: none)")
    p.add_argument("--storage", choices=["none", "file", "mooncake"], default="none")
    p.add_argument("--kv", choices=["metadata", "small"], default="metadata",
                   help="metadata: skip KV bytes; small: copy real bytes and verify restores")
    p.add_argument("--write-policy", default="write_through",
                   choices=["write_through", "write_through_selective", "write_back"])
    p.add_argument("--prefetch-policy", default="wait_complete",
                   choices=["best_effort", "wait_complete", "timeout"])
    p.add_argument("--limit", type=int, default=None, help="first N requests only")
    p.add_argument("--sync", action="store_true",
                   help="apply every transfer before the next request (deterministic)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel ranks (not yet supported)")
    p.add_argument("--no-shard", action="store_true", help="(not yet supported)")
    p.add_argument("--verify", choices=["off", "sample", "strict"], default="off",
                   help="runtime monitors (not yet supported; use --kv small to verify bytes)")


def run(args: argparse.Namespace) -> int:
    unsupported = []
    if args.cp != 1:
        unsupported.append("--cp (context parallelism lands with the distributed runtime)")
    if args.no_shard:
        unsupported.append("--no-shard (context parallelism lands with the distributed runtime)")
    if args.verify != "off":
        unsupported.append("--verify (runtime monitors are not attached yet)")
    if unsupported:
        msg = "not yet supported: " + "; ".join(unsupported)
        emit(args, {"error": msg}, text=None)
        print(f"hicache replay: {msg}", file=sys.stderr)
        return 2
    from hicache.replay.driver import ReplayConfig, replay
    from hicache.replay.trace import TraceError
    try:
        cfg = ReplayConfig(page_size=args.page_size, device_tokens=args.device_tokens,
                           host_tokens=args.host_tokens, storage=args.storage, kv=args.kv,
                           write_policy=args.write_policy, prefetch_policy=args.prefetch_policy,
                           limit=args.limit, sync=args.sync)
        out = replay(args.trace, cfg)
    except (ValueError, TraceError, OSError) as exc:
        emit(args, {"error": str(exc)}, text=None)
        print(f"hicache replay: {exc}", file=sys.stderr)
        return 1
    t = out["tiers"]
    text = (f"{out['requests']} requests, {out['input_tokens']} input tokens, "
            f"hit rate {out['hit_rate']:.2%} (device {t['device']['hit_rate']:.2%}, "
            f"host {t['host']['hit_rate']:.2%}, storage {t['storage']['hit_rate']:.2%}) "
            f"in {out['seconds']:.2f} s")
    emit(args, out, text)
    return 0 if not out.get("corrupt_pages") else 3
