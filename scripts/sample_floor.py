"""Where sample mode's floor goes on `hicache bench monitors`' kv_bytes replay: off against
sample mode with one piece of it added at a time, in interleaved rounds of one process.

    python scripts/sample_floor.py [--rounds 100] [--limit 200]

Each variant is a sample-mode replay at rate 0 (nothing drawn, so no sampled check and no
let-go: the floor) with parts taken away:

  attached   the monitors built and attached, then the cache's bus given no listener:
             no event is published (the runtime's `if bus.listeners:` is false), no
             final check;
  deaf       the events published to a listener that does nothing (`operator.is_`), no
             final check: what publishing costs the runtime and the bus;
  events     the monitors' own listeners (the gate: counting, the history, the weighted
             draws and the trigger; binding only the events it hands on, the map reading
             the requests off the runtime), no final check;
  rate0      as `events`, with the final check at close;
  sample     sample mode at its defaults (rate, budget): the floor and the budgeted checks.

Rounds run in the orders of a Williams square (bench.monitors.williams_orders), after two
rounds of warm-up. Prints one JSON object: for each variant its best-of and paired-median
ratios to off, wall clock and the scheduler thread's CPU, and, of its last replay, the
caches verified mode attached monitors to, the events they published (their buses' `seq`)
and the events their monitors counted (`steps`: none where the listener is not theirs).
The differences of consecutive variants are the parts' shares, within the spread an A/A
comparison shows (the bench's `off_vs_off`). Time, not instructions:
`scripts/monitor_instructions.py --whole` counts those.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import operator
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: the variants, each a step further from off (the module docstring)
VARIANTS = ("off", "attached", "deaf", "events", "rate0", "sample")


@contextlib.contextmanager
def _variant(name: str, caches: list):
    """Verified mode set up for one variant while inside; `caches` gets each cache attached
    (with what its bus was given, kept alive as long as the list: a bus without its
    listeners no longer holds the monitors)."""
    from hicache import verified
    from hicache.monitors import attach as registry
    from hicache.monitors import runtime
    if name == "off":
        verified.disable()
    elif name == "sample":
        verified.enable("sample", violation_dir="hicache-violations/bench")
    else:
        verified.enable("sample", violation_dir="hicache-violations/bench", sample_rate=0.0)
    attach, final = registry.attach, runtime.Monitor.cache_check

    def attached(cache, cfg):
        mon = attach(cache, cfg)
        if mon is None:       # (off: the registry attaches nothing)
            return mon
        caches.append((cache, cache.bus.listeners, mon))
        if name == "attached":
            cache.bus.listeners = []
        elif name == "deaf":
            cache.bus.listeners = [operator.is_]
        return mon
    registry.attach = attached
    if name in ("attached", "deaf", "events"):
        runtime.Monitor.cache_check = lambda self, step=None: None
    try:
        yield
    finally:
        registry.attach, runtime.Monitor.cache_check = attach, final
        verified.disable()


def replay_once(name: str, cfg, reqs) -> tuple[float, float, int, int, int]:
    """(wall seconds, the scheduler thread's CPU seconds, events published, caches
    attached, events their HostTier monitors counted) of one replay in variant `name`."""
    from hicache.replay.driver import replay_requests
    caches: list = []
    with _variant(name, caches):
        gc.collect()      # (an earlier replay's garbage collected now, not in this one)
        s0, t0 = time.thread_time(), time.perf_counter()
        replay_requests(cfg, reqs)
        wall, thread = time.perf_counter() - t0, time.thread_time() - s0
    return wall, thread, sum(c.bus.seq for c, _, _ in caches), len(caches), sum(m.steps for _, _, m in caches)


def measure(rounds: int, limit: int, variants=VARIANTS) -> dict:
    """`rounds` interleaved rounds (after two of warm-up) of each of `variants` (off first:
    the ratios' denominator) on the kv_bytes replay of `limit` requests: the report the
    module docstring describes."""
    from hicache.bench import monitors as bm
    from hicache.replay.driver import load_requests
    if not variants or variants[0] != "off" or len(variants) % 2:
        raise ValueError("the variants: off first, an even number of them (a Williams square's order)")
    reqs = load_requests(str(bm.TRACE), bm.PAGE, limit)
    cfg = bm.REPLAYS["kv_bytes"](limit)
    walls = {v: [] for v in variants}
    threads = {v: [] for v in variants}
    events, attached, seen = {}, {}, {}
    orders = bm.williams_orders(len(variants))
    for r in range(rounds + 2):
        for i in orders[r % len(orders)]:
            v = variants[i]
            wall, thread, events[v], attached[v], seen[v] = replay_once(v, cfg, reqs)
            if r >= 2:
                walls[v].append(wall)
                threads[v].append(thread)

    def ratios(xs: list, off: list) -> dict:
        # (the paired median as the bench computes it: each round's replay against off's)
        return {"best_of": min(xs) / min(off), "paired_median": bm._paired(xs, off)["median"]}
    out = {"requests": len(reqs), "rounds": rounds, "off_best_wall_s": min(walls["off"]), "variants": {}}
    for v in variants:
        out["variants"][v] = {"wall": ratios(walls[v], walls["off"]),
                              "thread_cpu": ratios(threads[v], threads["off"]),
                              "events_published": events[v], "caches_attached": attached[v],
                              "events_monitors_counted": seen[v]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--limit", type=int, default=200, help="requests of the trace replayed (the bench's 200)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.limit < 1:
        ap.error("--rounds and --limit must be at least 1")
    print(json.dumps(measure(args.rounds, args.limit), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
