"""Python bytecodes the scheduler thread executes in one replay of `hicache bench monitors`'
replay, off against a verify mode, per function: where a mode's Python work goes, exactly.

Counted by `sys.settrace` with per-opcode events on the thread that replays (the transfer
threads are not traced), around the replay alone (the cache's construction, monitors
included, to its close and final check), after one untraced warm-up replay per mode. The
counts repeat exactly from run to run for strict mode and for sample mode at --rate 0 or
with --no-budget (at the default rate, what the wall-clock budget affords decides which
samples run), where the maps' native loops serve (the default); on their Python twins
(`HICACHE_NATIVE=0`, no compiler) strict mode's count moves by a few dozen opcodes between
runs, since `loops.py_walk_journaled` visits the journal (a set of nodes, ordered by their
addresses) in as many passes as that order takes. They count bytecodes, not time: work done in C (allocating, hashing,
copying KV bytes, the GIL) is not in them, which `scripts/monitor_instructions.py` counts,
at ~1.5 % of noise between equal runs and minutes under valgrind a run. Opcodes say where
Python work is, not what a change saves: bytecodes differ in cost by tens of times, and a
loop moved into C builtins (`map`, `zip`, `dict.update`) runs fewer of them in as much time
or more (docs/monitors-bench-log.md, 2026-12-03 16:52: -450k opcodes, +15 % instructions); judge a
change by instructions.

    python scripts/monitor_opcodes.py [--mode sample|strict] [--rate R] [--no-budget]
        [--replay kv_bytes|kv_bytes_fitting|metadata_only] [--limit 200] [--top 30] [--by-event]

prints one JSON object: the opcodes of the off replay and of the mode's, their ratio, and
the `--top` functions by opcodes the mode adds (file:function@first line, off, mode, extra).
With `--by-event`, instead: each monitor's listener calls by event (spec module, action),
with the opcodes and the Python calls (frames) one listener call runs on average, inside
the listener only (what a monitor's event costs in bytecode, and in how many calls).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(code) -> str:
    path = Path(code.co_filename)
    try:
        path = path.resolve().relative_to(ROOT)
    except ValueError:
        pass
    return f"{path}:{code.co_name}@{code.co_firstlineno}"


def by_name(counts: collections.Counter) -> dict[str, int]:
    """The counts per function name (code objects of one name summed: every dataclass's
    generated `__init__` is `<string>:__init__@2`)."""
    out: dict[str, int] = {}
    for code, n in counts.items():
        key = _name(code)
        out[key] = out.get(key, 0) + n
    return out


def traced_replay(bm, mode: str, cfg, reqs, **kw) -> collections.Counter:
    """Opcodes per code object of one replay in `mode` (bm._replay_once's: verified mode on
    for it, the garbage of the one before collected first), after an untraced one."""
    from hicache.replay import driver
    bm._replay_once(mode, cfg, reqs, **kw)
    counts: collections.Counter = collections.Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            counts[frame.f_code] += 1
        return tracer
    replay = driver.replay_requests

    def traced(*a, **k):
        before = sys.gettrace()     # (a coverage tool's or a debugger's: put back after)
        sys.settrace(tracer)
        try:
            return replay(*a, **k)
        finally:
            sys.settrace(before)
    driver.replay_requests = traced
    try:
        bm._replay_once(mode, cfg, reqs, **kw)
    finally:
        driver.replay_requests = replay
    return counts


def traced_events(bm, mode: str, cfg, reqs, **kw) -> dict[tuple[str, str], list[int]]:
    """(spec module, action) -> [listener calls, opcodes, Python calls] of one replay in
    `mode`, counted inside each monitor's listener (`Monitor.listener`, the bound method
    verified mode subscribes), after an untraced replay."""
    from hicache.monitors import runtime
    bm._replay_once(mode, cfg, reqs, **kw)
    out: dict[tuple[str, str], list[int]] = {}
    at: list = [None]           # the counts of the listener call running, None outside one

    def tracer(frame, event, arg):
        row = at[0]
        if row is None:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "call":
            row[2] += 1
        elif event == "opcode":
            row[1] += 1
        return tracer
    def counting(listener):
        def counted(self, action, fields):
            row = out.setdefault((self.spec.MODULE, str(action)), [0, 0, 0])
            row[0] += 1
            before = sys.gettrace()
            at[0] = row
            sys.settrace(tracer)
            try:
                return listener(self, action, fields)
            finally:
                sys.settrace(before)
                at[0] = None
        return counted
    with runtime.listeners_wrapped(counting):
        bm._replay_once(mode, cfg, reqs, **kw)
    return out


def events(mode: str, replay: str, limit: int, rate: float | None = None, no_budget: bool = False) -> dict:
    """`--by-event`: each (spec, action)'s listener calls, opcodes and Python calls a call,
    most opcodes in all first."""
    bm, cfg, reqs, kw = _setup(replay, limit, rate, no_budget)
    rows = traced_events(bm, mode, cfg, reqs, **kw)
    order = sorted(rows.items(), key=lambda kv: (-kv[1][1], kv[0]))
    return {"replay": replay, "mode": mode, "rate": rate, "no_budget": no_budget, "requests": limit,
            "listener_calls": sum(r[0] for r in rows.values()), "opcodes": sum(r[1] for r in rows.values()),
            "by_event": [{"spec": spec, "action": action, "calls": n, "opcodes": ops,
                          "opcodes_per_call": round(ops / n, 1), "python_calls_per_call": round(calls / n, 2)}
                         for (spec, action), (n, ops, calls) in order]}


def _setup(replay: str, limit: int, rate: float | None, no_budget: bool):
    from hicache.bench import monitors as bm
    from hicache.replay.driver import load_requests
    if not bm.TRACE.exists():
        raise FileNotFoundError(f"trace {bm.TRACE} not found")
    reqs = load_requests(str(bm.TRACE), bm.PAGE, limit)
    kw = {}
    if rate is not None:
        kw["rate"] = rate
    if no_budget:
        kw["budget"] = None
    return bm, bm.REPLAYS[replay](limit), reqs, kw


def compare(mode: str, replay: str, limit: int, top: int, rate: float | None = None, no_budget: bool = False) -> dict:
    bm, cfg, reqs, kw = _setup(replay, limit, rate, no_budget)
    off = by_name(traced_replay(bm, "off", cfg, reqs))
    on = by_name(traced_replay(bm, mode, cfg, reqs, **kw))
    total_off, total_on = sum(off.values()), sum(on.values())
    extra = sorted(((k, off.get(k, 0), on.get(k, 0)) for k in off.keys() | on.keys()),
                   key=lambda r: (r[1] - r[2], r[0]))
    return {"replay": replay, "mode": mode, "rate": rate, "no_budget": no_budget, "requests": limit,
            "off": total_off, "mode_opcodes": total_on, "extra": total_on - total_off,
            "ratio": total_on / total_off if total_off else None,
            "by_function": [{"function": k, "off": a, "mode": b, "extra": b - a} for k, a, b in extra[:top]]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("sample", "strict"), default="sample")
    ap.add_argument("--rate", type=float, help="sample mode's rate (default VerifyConfig's); 0: nothing drawn")
    ap.add_argument("--no-budget", action="store_true", help="sample mode with no checking budget")
    from hicache.bench.monitors import REPLAYS
    ap.add_argument("--replay", choices=tuple(REPLAYS), default="kv_bytes", help="which of the bench's replays")
    ap.add_argument("--limit", type=int, default=200, help="requests of the trace replayed (the bench's 200)")
    ap.add_argument("--top", type=int, default=30, help="functions listed, by opcodes the mode adds")
    ap.add_argument("--by-event", action="store_true",
                    help="each monitor's listener calls by event instead: opcodes and Python calls a call")
    args = ap.parse_args(argv)
    if args.rate is not None and (args.mode != "sample" or not 0.0 <= args.rate <= 1.0):
        ap.error("--rate is sample mode's, between 0 and 1")
    if args.no_budget and args.mode != "sample":
        ap.error("--no-budget is sample mode's")
    if args.limit < 1 or args.top < 0:
        ap.error("--limit must be at least 1 and --top at least 0")
    try:
        out = events(args.mode, args.replay, args.limit, args.rate, args.no_budget) if args.by_event else \
            compare(args.mode, args.replay, args.limit, args.top, args.rate, args.no_budget)
    except FileNotFoundError as e:
        sys.exit(f"monitor_opcodes: {e}")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
