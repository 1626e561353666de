"""`hicache replay TRACE`: replay a Mooncake-format trace through the real cache.

`--cp K [--no-shard]` replays one context-parallel setup (device tokens are per rank);
`--verify sample|strict` runs it under the runtime monitors (hicache.verified);
`--evaluate --cp K` runs the brief's comparisons (replicate vs shard at equal memory, and
without vs with `--storage`), with `--cost-model` and `--plot out.png` optional.
Bad input or options (a malformed trace, a capacity out of range) exit EXIT_USAGE (150) with
a message; a store that cannot run here, or a plot that cannot be written, exits 1.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys

from hicache.cli.main import EXIT_USAGE
from hicache.cli.output import emit, refuse


def _describe(m: dict) -> str:
    from hicache.monitors.attach import describe     # (loaded only under --verify)
    return describe(m)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="JSONL trace (timestamp, input_length, output_length, hash_ids)")
    p.add_argument("--page-size", type=int, default=64, help="tokens per page (divides 512)")
    p.add_argument("--device-tokens", type=int, default=2_000_000, help="device tier capacity")
    p.add_argument("--host-tokens", type=int, default=0, help="host tier capacity (0: none)")
    p.add_argument("--storage", choices=["none", "file", "mooncake", "memory"], default="none",
                   help="storage tier (memory: in-process dict, same protocol, no I/O)")
    p.add_argument("--kv", choices=["metadata", "small"], default="metadata",
                   help="metadata: skip KV bytes; small: copy real bytes and verify restores")
    p.add_argument("--write-policy", default="write_through",
                   choices=["write_through", "write_through_selective", "write_back"])
    p.add_argument("--prefetch-policy", default="wait_complete",
                   choices=["best_effort", "wait_complete", "timeout"])
    p.add_argument("--limit", type=int, default=None, help="first N requests only")
    p.add_argument("--sync", action="store_true",
                   help="apply every transfer before the next request (deterministic; "
                        "--evaluate always runs this way, its config reports sync: true)")
    p.add_argument("--cp", type=int, default=1,
                   help="context-parallel ranks; --device-tokens is then memory per rank")
    p.add_argument("--no-shard", action="store_true",
                   help="CP ranks replicate every page (default: shard pages over owner ranks)")
    p.add_argument("--evaluate", action="store_true",
                   help="compare replicate vs shard (and without vs with --storage)")
    p.add_argument("--cost-model", action="store_true",
                   help="with --evaluate: estimated prefill and queueing time (costmodel.py)")
    p.add_argument("--plot", default=None, metavar="OUT.PNG",
                   help="with --evaluate: hit rate per tier against device memory (matplotlib)")
    p.add_argument("--sweep", default=None, metavar="F,F,...",
                   help="device-memory factors for --plot (default 0.25,0.5,1,2,4)")
    p.add_argument("--verify", choices=["off", "sample", "strict"], default=None,
                   help="runtime monitors on every cache of the replay (HostTier; with --cp, "
                        "CPSharding too): a violation stops the replay (exit 4) and writes its "
                        "trace for `hicache explain` (default: HICACHE_VERIFY, else off; off "
                        "holds over the variable)")
    p.add_argument("--violation-dir", default=None,
                   help="where --verify writes a violation's ITF trace (default: "
                        "HICACHE_VIOLATION_DIR, else ./hicache-violations)")


#: config field -> the flag that sets it: the configs' errors name fields ("host_tokens: ..."),
#: a command-line user needs the flag
_FLAGS = {"page_size": "--page-size", "device_tokens": "--device-tokens",
          "host_tokens": "--host-tokens", "limit": "--limit", "cp": "--cp", "sweep": "--sweep",
          # (VerifyConfig's: only the flag gives a bad one; an empty HICACHE_VIOLATION_DIR is the default)
          "violation_dir": "--violation-dir"}
_FIELD = re.compile(r"^(\w+): ")


def _flagged(msg: str) -> str:
    """`msg` with a leading config field name replaced by its flag."""
    m = _FIELD.match(msg)
    return f"{_FLAGS[m[1]]}: {msg[m.end():]}" if m and m[1] in _FLAGS else msg


def _fail(args: argparse.Namespace, msg: str, rc: int) -> int:
    return refuse(args, "hicache replay", msg, rc, {})


def _expected_errors(args: argparse.Namespace) -> tuple[type[BaseException], ...]:
    """Errors reported as a message, not a traceback: bad input or options (ValueError, its
    TraceError; exit EXIT_USAGE), an OS error, and a storage that cannot run here (exit 1)."""
    errs: tuple[type[BaseException], ...] = (ValueError, OSError)
    if args.storage == "mooncake":
        from hicache.storage.mooncake_server import MooncakeUnavailable
        errs += (MooncakeUnavailable,)
    return errs


def _report(args: argparse.Namespace, exc: BaseException) -> int:
    """Report an expected error: EXIT_USAGE for bad input or options, 1 for the environment."""
    if isinstance(exc, ValueError):
        # a trace's error starts with the trace's path, which may read like a field name (a
        # trace file named `limit`): only a config's own errors name a field to rewrite
        from hicache.replay.trace import TraceError
        return _fail(args, str(exc) if isinstance(exc, TraceError) else _flagged(str(exc)), EXIT_USAGE)
    return _fail(args, str(exc), 1)


def _plot_path(raw: str) -> str:
    """--plot's file: `.png` appended when it has no suffix (matplotlib would append it and
    the report would name a file that does not exist); a directory is refused."""
    path = raw if os.path.splitext(raw)[1] else raw + ".png"
    for p in (raw, path):
        if os.path.isdir(p):
            raise ValueError(f"--plot: {p} is a directory; name the image file to write (OUT.PNG)")
    return path


def _sweep_factors(raw: str) -> tuple[float, ...]:
    """--sweep F,F,...: the capacity factors (ValueError naming the flag and the item that is
    not a number; EvalConfig checks their range)."""
    out = []
    for item in raw.split(","):
        try:
            out.append(float(item))
        except ValueError:
            raise ValueError(f"--sweep: {item.strip()!r} is not a number (F,F,...: capacity factors)") from None
    return tuple(out)


def _evaluate(args: argparse.Namespace) -> int:
    from hicache.replay.costmodel import CostModel
    from hicache.replay.evaluate import EvalConfig, evaluate, render
    if args.kv != "metadata":
        # the comparison replays at trace scale in metadata-only mode; small KV would be
        # ignored, and the run read as byte-verified
        return _fail(args, "--kv small: --evaluate replays metadata-only (no KV bytes); "
                           "drop --kv small, or drop --evaluate to replay one setup with bytes", EXIT_USAGE)
    try:
        plot_path = _plot_path(args.plot) if args.plot else None
        factors = (0.25, 0.5, 1.0, 2.0, 4.0) if args.plot and args.sweep is None else ()
        if args.sweep:
            factors = _sweep_factors(args.sweep)
        cfg = EvalConfig(page_size=args.page_size, cp=args.cp, device_tokens=args.device_tokens,
                         host_tokens=args.host_tokens, storage=args.storage,
                         storage_on_shard=not args.no_shard, write_policy=args.write_policy,
                         prefetch_policy=args.prefetch_policy, limit=args.limit,
                         cost_model=CostModel() if args.cost_model else None, sweep=factors)
        out = evaluate(args.trace, cfg)
    except _expected_errors(args) as exc:
        return _report(args, exc)
    text = render(out)
    if args.verify != "off":
        runs = {"baseline": out["setups"]["baseline"], "sharded": out["setups"]["sharded"]}
        if out["storage"] is not None:
            runs["with storage"] = out["storage"]["with"]
        mons = {name: run.pop("monitors", None) or [] for name, run in runs.items()}
        out["verify"] = {"mode": args.verify, "violations": 0, "monitors": mons}
        text += f"\nverify {args.verify}: no violation (" + "; ".join(
            f"{name}: " + ", ".join(_describe(m) for m in ms)
            for name, ms in mons.items()) + ")"
    if plot_path:
        from hicache.replay.plot import plot
        try:
            out["plot"] = plot(out, plot_path)
            text += f"\nplot: {out['plot']}"
        except ModuleNotFoundError:
            out["plot"] = None
            out["plot_error"] = "matplotlib is not installed (pip install 'hicache[plot]')"
            text += f"\nplot skipped: {out['plot_error']}"
        except OSError as e:
            # the evaluation is still reported (nothing lost); the plot's failure is named
            out["plot"] = None
            out["plot_error"] = f"{plot_path}: {e.strerror or e}"
            emit(args, out, text + f"\nplot not written: {out['plot_error']}")
            print(f"hicache replay: --plot: cannot write {out['plot_error']}", file=sys.stderr)
            return 1
    emit(args, out, text)
    return 0


def _verify_config(args: argparse.Namespace):
    """The replay's verified mode: --verify when given (off too: it holds over everything
    else), else a mode chosen in this process (`hicache.verified.enable`, the pytest option),
    else HICACHE_VERIFY's; rate, seed and budget from HICACHE_VERIFY_RATE/_SEED/_BUDGET/_BUDGET_WINDOW, the directory from
    --violation-dir, else HICACHE_VIOLATION_DIR. A replay monitored because of the variable
    reports like one under the flag (its `verify` block, exit 4 on a violation): the variable
    alone attached monitors behind the replay's back, a violation was a traceback. A flag's
    variable is not read (a bad HICACHE_VERIFY refused `--verify strict`)."""
    from hicache.monitors.maps.dist import verify_config
    from hicache.monitors.runtime import VerifyConfig
    if args.verify == "off":
        return VerifyConfig()              # (the variables are not read: nothing of them is used)
    given = {}
    if args.verify is not None:
        given["mode"] = args.verify
    if args.violation_dir is not None:     # (an empty one too: refused, naming the flag)
        given["violation_dir"] = args.violation_dir
    return verify_config(**given)          # (as `hicache run`; a bad variable: ValueError naming it)


@contextlib.contextmanager
def _verified_mode(cfg):
    """Verified mode `cfg` for the replay's caches, and the process's own state (a mode
    enabled in code, or none) restored after it: the replay must not tear down a mode its
    caller enabled, nor leave its own on."""
    from hicache.monitors import attach
    chosen = attach.chosen()
    loaded = sys.modules.get("hicache.verified")
    prev = loaded.current() if loaded is not None and loaded.enabled() else None
    try:
        if cfg.mode.value == "off":
            if loaded is not None:
                loaded.disable()           # (a mode enabled in code: off now)
            attach.choose(cfg)             # (a choice: the variable attaches nothing either)
        else:
            # (imported without its own enable() from HICACHE_VERIFY: --verify is the choice)
            attach.verified_module().enable(**dataclasses.asdict(cfg))
        yield
    finally:
        verified = sys.modules.get("hicache.verified")
        if prev is not None:
            verified.enable(**dataclasses.asdict(prev))
        elif verified is not None:
            verified.disable()
        attach.choose(chosen)


def run(args: argparse.Namespace) -> int:
    try:
        vcfg = _verify_config(args)
    except ValueError as e:
        return _fail(args, _flagged(str(e)), EXIT_USAGE)
    args.verify = vcfg.mode.value
    from hicache.monitors.runtime import ProtocolViolation
    with _verified_mode(vcfg):
        try:
            return _run(args)
        except ProtocolViolation as e:
            out = {"error": f"{e.spec}: {e.kind} {e.property} violated at step {e.step} by {e.action}",
                   "violation": {"spec": e.spec, "kind": e.kind, "property": e.property, "step": e.step,
                                 "action": e.action, "conjunct": e.conjunct, "location": e.location,
                                 "trace": e.trace_path}}
            emit(args, out, text=None)
            print(f"hicache replay: {e}", file=sys.stderr)
            return 4


def _run(args: argparse.Namespace) -> int:
    if args.evaluate:
        return _evaluate(args)
    if args.plot or args.cost_model or args.sweep:
        return _fail(args, "--plot, --cost-model and --sweep need --evaluate", EXIT_USAGE)
    from hicache.replay.driver import ReplayConfig, replay
    try:
        cfg = ReplayConfig(page_size=args.page_size, device_tokens=args.device_tokens,
                           host_tokens=args.host_tokens, storage=args.storage, kv=args.kv,
                           write_policy=args.write_policy, prefetch_policy=args.prefetch_policy,
                           limit=args.limit, sync=args.sync, cp=args.cp, shard=not args.no_shard)
        out = replay(args.trace, cfg)
    except _expected_errors(args) as exc:
        return _report(args, exc)
    t = out["tiers"]
    text = (f"{out['requests']} requests, {out['input_tokens']} input tokens, "
            f"hit rate {out['hit_rate']:.2%} (device {t['device']['hit_rate']:.2%}, "
            f"host {t['host']['hit_rate']:.2%}, storage {t['storage']['hit_rate']:.2%}) "
            f"in {out['seconds']:.2f} s")
    if out["uncached_requests"]:
        # their tokens were computed and not cached: the hit rate undercounts the cache
        text += f"; {out['uncached_requests']} requests served uncached (every device page locked)"
    st = out.get("storage") or {}
    m = out["metrics"]
    # (a store that fails or stopped answering must not read as a cold one): the backend's
    # and SafeStorage's failure counters, and the cache's own count of failed storage work
    failed = {k: st.get(k, 0) for k in ("call_error", "call_none", "call_timeout", "circuit_open",
                                        "set_fail", "get_corrupt")}
    failed |= {k: m.get(k, 0) for k in ("storage_failures", "storage_backup_failures")}
    if any(failed.values()):
        text += "; storage failures: " + ", ".join(f"{k} {v}" for k, v in failed.items() if v)
        if st.get("failed_pages"):
            text += f" ({st['failed_pages']} pages missed)"
    if args.cp > 1:
        c = out["cp"]
        text += (f"; CP{c['ranks']} {'sharded' if c['shard'] else 'replicated'}, "
                 f"logical device capacity {c['logical_device_tokens']:,} tokens")
    if args.verify != "off":
        out["verify"] = {"mode": args.verify, "violations": 0, "monitors": out.get("monitors") or []}
        if out["verify"]["monitors"]:
            text += f"; verify {args.verify}: no violation (" + ", ".join(
                _describe(m) for m in out["verify"]["monitors"]) + ")"
        else:
            # nothing was attached (no host tier, no sharding): say so, not "no violation"
            text += f"; verify {args.verify}: nothing to check (no host tier: HostTier has no step here)"
    emit(args, out, text)
    return 0 if not out.get("corrupt_pages") else 3
