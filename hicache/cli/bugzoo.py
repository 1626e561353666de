"""`hicache bugzoo`: every seeded fault, the property that caught it, and the clean sweep.

For each bug class the zoo reproduces (REFERENCE.md numbering), the first seeded workload
on which the fault fires is run under a strict monitor; the report gives the property that
caught it and the monitored steps between the faulty step and the alarm (0: at the faulty
step itself; cross-rank entries count cache checks). The same workload without the fault
must raise nothing, and `--clean` more seeded workloads run fault-free under strict
monitors: any alarm there is a false alarm (`clean_alarms`). Exit 0 only when every bug is
caught within one step and there is no false alarm. The clean workloads take five shapes
in turn (`zoo.CLEAN_SHAPES`): the zoo's own; a small tree whose fetches wait for storage and
join; copies that fail now and then (counted misses, no fault of the cache's); acks applied
only every few requests, so ops stay on nodes the next requests split; windows of the
shared production-shaped traces replayed as `hicache replay` serves them, each seed its own
cache configuration (KV bytes or metadata, storage or none, transfers synced or polled).
`--clean N` also runs N/4 two-rank groups and N layer-pipeline schedules fault-free.

`--sample-rate R` (repeatable) adds what a canary in sample mode at rate R would see of each
runtime bug (the single-engine faults, whose cache's monitors have a sample mode): every
workload of the `--seeds` its fault fires in, run under sample mode with no budget (which
steps are checked is then the seed's alone), a cache check after it: caught at a sampled
step, at a cache check, stopped first by the runtime's own check (an error naming no
property), or missed. A measurement, not a verdict: it leaves the exit status alone, but for
a violation raised before a fault fired, a false alarm like the clean sweep's.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from hicache.cli.output import emit, refuse


def _at_least(low: int):
    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v
    return parse


def _rate(raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if not 0.0 < v <= 1.0:       # (NaN fails this too)
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {raw}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=_at_least(1), default=30,
                   help="workloads tried per bug: until its fault fires (each of them with --sample-rate)")
    p.add_argument("--clean", type=_at_least(0), default=200,
                   help="fault-free seeded workloads checked for false alarms")
    p.add_argument("--only", type=int, action="append", help="only this bug class (repeatable)")
    p.add_argument("--violation-dir", default=None, help="where violation traces go (default: a temp dir)")
    p.add_argument("--sample-rate", type=_rate, action="append", default=None, metavar="R",
                   help="also run each runtime bug's workloads under sample mode at rate R, no budget, and "
                        "report caught at a sampled step / at a cache check / runtime error first / missed "
                        "(repeatable; only a false alarm there changes the exit status)")


def clean_sweep(n: int, vdir: str) -> list[dict]:
    """Fault-free seeded runs under strict monitors: n single caches (taking the shapes of
    `CLEAN_SHAPES` in turn), n/4 two-rank groups with digest exchange, n layer-pipeline
    schedules; the alarms raised (should be none)."""
    from hicache.monitors.workload import WorkloadConfig
    from hicache.monitors.zoo import CLEAN_SHAPES, run_clean_shape
    w = WorkloadConfig()
    alarms = []
    for seed in range(1000, 1000 + n):
        k = seed % len(CLEAN_SHAPES)
        shape = CLEAN_SHAPES[k]
        e = run_clean_shape(shape, seed, vdir)     # under strict monitors
        if e is not None:
            # (with what a developer needs to see it again: the workload, its trace, the call)
            alarms.append({"seed": seed, "shape": shape.name, "property": e.property, "action": e.action,
                           "location": e.location, "workload": shape.describe(seed), "trace": e.trace_path,
                           "rerun": f"hicache.monitors.zoo.run_clean_shape(CLEAN_SHAPES[{k}], {seed}, violation_dir)"})
    # two-rank groups exchanging digests: a divergence without a fault is a false alarm too
    from hicache.monitors.zoo import _clean_ranks
    for seed in range(2000, 2000 + n // 4):
        if _clean_ranks(seed, w, vdir):
            alarms.append({"seed": seed, "property": "cross-rank", "action": "cache_check", "location": ""})
    # the layer pipeline guards under the correct adapter schedule (action checks on every step)
    from hicache.monitors.zoo import pipeline_run
    for seed in range(3000, 3000 + n):
        _, e = pipeline_run(seed, False, vdir)
        if e is not None:
            alarms.append({"seed": seed, "property": e.property, "action": e.action, "location": e.location})
    return alarms


def run(args: argparse.Namespace) -> int:
    from hicache.cli.main import EXIT_USAGE
    from hicache.monitors.zoo import CLEAN_SHAPES, bug_classes, run_sample_zoo, run_zoo
    known = bug_classes()
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        return refuse(args, "hicache bugzoo", f"--only: {', '.join(map(str, unknown))} is not a bug class of "
                                              f"the zoo ({min(known)}-{max(known)})", EXIT_USAGE)
    vdir = args.violation_dir or tempfile.mkdtemp(prefix="hicache-bugzoo-")
    try:        # every caught bug writes its trace here: a directory that cannot take one is refused
        Path(vdir).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=vdir).close()
    except OSError as e:
        return refuse(args, "hicache bugzoo", f"--violation-dir: {vdir}: cannot write there ({e.strerror or e})",
                      EXIT_USAGE)
    only = set(args.only) if args.only else None
    results = run_zoo(seeds=args.seeds, vdir=vdir, only=only)
    alarms = clean_sweep(args.clean, vdir)
    rates = tuple(dict.fromkeys(getattr(args, "sample_rate", None) or ()))    # (each rate once)
    sampled = run_sample_zoo(rates, seeds=args.seeds, vdir=vdir, only=only) if rates else []
    clean_twins = [r.name for r in results if r.clean_alarm]
    obj = {
        "bugs": [{"name": r.name, "bug": r.bug, "kind": r.kind, "caught": r.caught, "property": r.property,
                  "steps_after_fault": r.steps_after_fault, "seed": r.seed, "clean_twin_alarm": r.clean_alarm,
                  "detail": r.detail, "trace": r.trace} for r in results],
        # (a sample-mode study's violation before its fault fired is a false alarm too)
        "clean_alarms": len(alarms) + len(clean_twins) + sum(len(r.false_alarms) for r in sampled),
        "clean_runs": args.clean,
        "clean_shapes": [shape.name for shape in CLEAN_SHAPES],     # (taken in turn by seed)
        "clean_rank_groups": args.clean // 4,
        "clean_alarm_list": alarms,
        "caught": sum(r.caught for r in results),
        "total": len(results),
        "violation_dir": vdir,
    }
    lines = [f"{'bug':>3}  {'name':<28} {'kind':<8} {'caught':<6} {'property':<24} steps"]
    for r in results:
        lines.append(f"{r.bug:>3}  {r.name:<28} {r.kind:<8} {str(r.caught):<6} {str(r.property):<24} "
                     f"{'' if r.steps_after_fault is None else r.steps_after_fault}"
                     + ("" if r.caught else f"   ({r.detail})"))
    lines.append(f"caught {obj['caught']}/{obj['total']}; clean workloads: {args.clean}, "
                 f"false alarms: {obj['clean_alarms']}")
    for a in alarms:
        shape = f" ({a['shape']})" if "shape" in a else ""
        lines.append(f"  false alarm: seed {a['seed']}{shape}: {a['property']} at {a['action']}"
                     + (f", {a['location']}" if a["location"] else "")
                     + (f"; workload: {a['workload']}" if a.get("workload") else "")
                     + (f"; trace: {a['trace']}" if a.get("trace") else "")
                     + (f"; again: {a['rerun']}" if a.get("rerun") else ""))
    for name in clean_twins:
        lines.append(f"  false alarm: the clean twin of {name} (its workload without the fault) raised")
    for r in sampled:
        for seed in r.false_alarms:
            lines.append(f"  false alarm: sample mode at rate {r.rate:g}, bug {r.bug}'s workload of seed {seed} "
                         f"raised before its fault fired")
    if rates:
        obj["sample"] = [r.as_dict() for r in sampled]
        lines.extend(_sample_lines(sampled, args.seeds))
    lines.append(f"violation traces (hicache explain TRACE [--html out.html]): {vdir}")
    emit(args, obj, "\n".join(lines))
    ok = all(r.caught and r.steps_after_fault is not None and r.steps_after_fault <= 1 for r in results) \
        and obj["clean_alarms"] == 0
    return 0 if ok else 1


def _sample_lines(results, seeds: int) -> list[str]:
    """The sample-mode study as a table per rate: of the workloads each fault fired in, how
    many were caught at a sampled step, at a cache check, stopped by the runtime's own check
    first, or missed; the monitored steps from the fault to the alarm (median / max); and why
    the alarming steps were checked (a draw, at an event's weight, the map's trigger, a cache
    check)."""
    lines = ["sample mode: the runtime bugs (a cache's monitors; the rank, process and spec entries are strict)"]
    for rate in dict.fromkeys(r.rate for r in results):
        lines.append(f"sample mode at rate {rate:g}, no budget (workloads of seeds 0-{seeds - 1} the fault fired in):")
        lines.append(f"{'bug':>3}  {'name':<28} {'fired':>5} {'step':>5} {'check':>5} {'error':>5} {'missed':>6}  "
                     f"steps to alarm")
        for r in results:
            if r.rate != rate:
                continue
            d = sorted(r.steps_after_fault)
            delay = f"{d[len(d) // 2]} / {d[-1]}" if d else "-"
            errors = f"   (runtime: {', '.join(f'{k} x{v}' for k, v in sorted(r.errors.items()))})" if r.errors else ""
            # (why the caught workloads' alarming steps were checked: a draw, the trigger, ...)
            causes = f"   (checked by: {', '.join(f'{k} x{v}' for k, v in sorted(r.causes.items()))})" \
                if r.causes else ""
            lines.append(f"{r.bug:>3}  {r.name:<28} {r.fired:>5} {r.at_step:>5} {r.at_check:>5} "
                         f"{r.runtime_first:>5} {r.missed:>6}  {delay}{causes}{errors}")
    return lines
