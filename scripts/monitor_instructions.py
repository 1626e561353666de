"""Instructions executed inside the runtime monitors on `hicache bench monitors`' replay,
counted by callgrind: a figure to compare two commits' monitor cost by.

Wall-clock ratios on a shared 2-core machine move by 30 % from run to run (the medians of
one process's replays do); the instructions the scheduler thread executes inside the
monitors' listeners and cache checks repeat to ~0.1 %, so a change of a few percent shows.
They are not time (a cache miss costs more than an add): the ratio targets stay wall-clock
figures, `hicache bench monitors`.

    python scripts/monitor_instructions.py [--mode strict|sample [--rate R] [--no-budget]] [--replay kv_bytes_fitting]
        [--replays 2] [--limit 200]
        [--events RequestMatch,RequestFinish] [--spec HostTier] [--within module:Class.method] [--keep DIR]
    python scripts/monitor_instructions.py --whole --mode off|floor|sample_floor|sample|strict [--rate 0]
        [--cache-sim [--ll-bytes 2097152]] [--around module:Class.method]

prints one JSON object: instructions inside the monitors (their listeners, and cache checks
not nested in one) over `--replays` replays, per replay and per listener call; with the
filters, inside the selected listener calls only (of those events, of that spec's monitor),
or only inside one function's calls made by them: where a monitor's cost goes. Each
collected call also counts the ctypes calls that turn collection on and off around it (~2k
instructions, measured in the same run on calls of a function that does nothing:
`toggle_cost`); `net` is the count without them (a small function's own cost under
--within). `--whole` counts the scheduler thread over whole replays instead (any mode, off
included): two modes' counts make a ratio that repeats to ~2 %, like the benchmark's
scheduler-thread CPU ratio (the transfer threads' copies are not in it, so it reads higher
than the wall-clock one; OpenMP's idle threads are made passive, `OMP_WAIT_POLICY=PASSIVE`,
unless the environment sets it).

`--around` (with --whole) counts only inside one function's outermost calls during the
replays, wherever they come from: attaching the monitors (`hicache.monitors.attach:attach`),
the cache checks (`hicache.monitors.runtime:Monitor.cache_check`), what no listener call
holds; `net` then leaves out its calls' toggles.

`--cache-sim` (with --whole) also runs callgrind's cache simulation and reports each replay's
misses: L1 instruction, L1 data read and write, and last level, a cache of `--ll-bytes`
(default 2 MiB, one core's L2 here: the 260 MiB L3 the cores share would hold all of a
replay's data, so a last-level miss in this simulation is a reach past the core's own
caches). They say why a mode's time grows faster than its instructions: the misses it adds
(counted only; no prefetching nor out-of-order overlap is simulated, so they say where, not
how long).

Needs valgrind with its `valgrind/callgrind.h` header and a C
compiler (a four-line library turns collection on and off around the monitors' code and
dumps the calibrations apart: callgrind client requests, no-ops outside valgrind). Each run
takes ~2.5 min here: valgrind runs the whole process, imports included, and instruments
from the warm-up replay on.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_TOGGLE_C = """#include <valgrind/callgrind.h>
void hicache_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void hicache_cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void hicache_cg_dump(void) { CALLGRIND_DUMP_STATS; }
"""

#: --replay: the bench's replays this script can count, by their bench names (kv_bytes:
#: nodes of ~18 pages; kv_bytes_fitting: ~100, where the monitors' per-page work shows)
REPLAYS = {name: (lambda bm, limit, name=name: bm.REPLAYS[name](limit)) for name in ("kv_bytes", "kv_bytes_fitting")}

#: --whole's floors: a mode's monitors attached with listeners that return at once and no
#: final check (the bench's attached floor is strict's)
FLOORS = {"floor": "strict", "sample_floor": "sample"}

#: toggle pairs around a call that does nothing, counted apart before the replays: what one
#: collected call costs the count besides its own work (the ctypes calls into the toggle),
#: in each of the two shapes the counted calls have
CALIBRATION_CALLS = 500


def build_toggle(folder: Path) -> Path:
    src, lib = folder / "cg_toggle.c", folder / "libcg_toggle.so"
    src.write_text(_TOGGLE_C)
    from hicache.kernels.native import compiler     # (the page-copy library's: $CC, else cc)
    proc = subprocess.run([compiler(), "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.exit(f"monitor_instructions: building the callgrind toggle failed (is valgrind's callgrind.h "
                 f"installed?): {proc.stderr.strip()[-400:]}")
    return lib


def resolve(target: str, option: str = "--within"):
    """(owner, attribute name) of `module:Qualified.name` (a module-level function, or a
    method of a class in that module), refused with a clear error when it does not exist."""
    modname, _, qual = target.partition(":")
    try:
        owner = importlib.import_module(modname)
        *path, name = qual.split(".")
        for part in path:
            owner = getattr(owner, part)
        try:
            found = inspect.getattr_static(owner, name)
        except AttributeError:
            # (getattr_static's error names the attribute alone)
            raise AttributeError(f"{getattr(owner, '__name__', owner)!s} has no attribute {name!r}") from None
        if isinstance(found, classmethod):
            raise ValueError(f"{qual} is a classmethod")
    except (ImportError, AttributeError, ValueError) as e:
        sys.exit(f"monitor_instructions: {option} {target!r}: {e} (expected module:function or "
                 f"module:Class.method)")
    return owner, name


@contextlib.contextmanager
def patched(owner, name: str, wrap):
    """owner.name replaced by wrap(its current value) inside the block, and put back after
    it: patched where its callers look it up (a class attribute, a module's function read
    at each call), a staticmethod kept one; an inherited method's copy is removed again."""
    stored = inspect.getattr_static(owner, name)
    own = name in vars(owner)
    wrapper = wrap(getattr(owner, name))
    setattr(owner, name, staticmethod(wrapper) if isinstance(stored, staticmethod) else wrapper)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, stored)
        else:
            delattr(owner, name)


def calibrate(cg) -> None:
    """CALIBRATION_CALLS collected calls of a function that does nothing in each shape the
    counted calls have, each followed by a dump (its counts go to a part of their own: `.1`
    a listener call's shape, `.2` a --within call's; the final part holds the replays')."""
    toggle = cg.hicache_cg_toggle

    def nothing(*a, **kw):
        return None

    def listener_call(self, action, fields):
        # (as counted_call calls the listener, and counted_check a cache check)
        toggle()
        try:
            return nothing(self, action, fields)
        finally:
            toggle()

    def within_call(*a, **kw):
        # (as counted_within calls its target: the arguments passed on)
        toggle()
        try:
            return nothing(*a, **kw)
        finally:
            toggle()
    args = (object(), "RequestMatch", {})
    for shape in (listener_call, within_call):
        for _ in range(CALIBRATION_CALLS):
            shape(*args)
        cg.hicache_cg_dump()


def whole_replays(cg, bm, args, cfg, reqs) -> None:
    """--whole: collection on around each replay, whatever the mode (off included): the
    scheduler thread's instructions for the whole replay, monitors and cache alike, so that
    two modes' counts give the ratio of the benchmark's scheduler-thread CPU times without
    their noise (the transfer threads' copies, and their waits, are not in it).

    With --around, collection is on inside the outermost calls of that function during the
    replays instead, wherever they come from: what no listener call contains (attaching a
    monitor, a cache's final check), which --within cannot select."""
    around = getattr(args, "around", None)
    # (the replay alone by default: the cache's construction, monitors included, to its
    # close and final check; not the full collection the bench runs before each replay,
    # outside its timing: counted, it added ~58M instructions to every mode alike, a third
    # of off's replay, and read every mode's ratio to off that much lower)
    owner, name = resolve(around, "--around") if around else resolve("hicache.replay.driver:replay_requests")
    state = {"calls": 0, "depth": 0}

    def collecting(target):
        def collected(*a, **kw):
            outer = state["depth"] == 0      # (a nested call is inside the outer one)
            state["depth"] += 1
            if outer:
                state["calls"] += 1
                cg.hicache_cg_toggle()
            try:
                return target(*a, **kw)
            finally:
                state["depth"] -= 1
                if outer:
                    cg.hicache_cg_toggle()
        return collected
    with patched(owner, name, collecting):
        for _ in range(args.replays):
            if args.mode in FLOORS:
                bm._attached_once(cfg, reqs, FLOORS[args.mode])      # (a mode's monitors attached, deaf)
            else:
                bm._replay_once(args.mode, cfg, reqs, rate=getattr(args, "rate", None), **_budget(args))
    Path(args.report).write_text(json.dumps({"listener_calls": 0, "collected_calls": state["calls"],
                                             **({"around_calls": state["calls"]} if around else {})}))


def _budget(args) -> dict:
    """_replay_once's budget argument: none (every drawn sample checked) with --no-budget,
    VerifyConfig's default otherwise."""
    return {"budget": None} if getattr(args, "no_budget", False) else {}


def child(args: argparse.Namespace) -> None:
    """Inside valgrind (or natively, where the toggles do nothing): the replays, collection
    on only inside the monitors; writes the listener calls counted to args.report.

    The filters narrow what is collected to the listener calls of the events in
    `args.events` and of the monitors of spec `args.spec`, and within those, with
    `args.within`, to the calls of one function; cache checks are then not collected."""
    cg = ctypes.CDLL(args.lib)
    from hicache.bench import monitors as bm
    from hicache.monitors import runtime as R
    from hicache.replay.driver import load_requests
    events = frozenset(filter(None, (getattr(args, "events", None) or "").split(",")))
    spec = getattr(args, "spec", None)
    within = resolve(args.within) if getattr(args, "within", None) else None
    whole = not (events or spec or within)      # every listener call and the cache checks
    reqs = load_requests(str(bm.TRACE), bm.PAGE, args.limit)
    cfg = REPLAYS[getattr(args, "replay", "kv_bytes")](bm, args.limit)
    rate = getattr(args, "rate", None)     # (sample mode's; None: VerifyConfig's default)
    mode = FLOORS.get(args.mode, args.mode)
    bm._replay_once(mode, cfg, reqs, rate=rate, **_budget(args))     # imports and first allocations, not instrumented
    cg.hicache_cg_start()
    bm._replay_once(mode, cfg, reqs, rate=rate, **_budget(args))     # once more, instrumented, not collected
    calibrate(cg)
    if getattr(args, "whole", False):
        whole_replays(cg, bm, args, cfg, reqs)
        return
    check, init = R.Monitor.cache_check, R.Monitor.__init__
    toggle = cg.hicache_cg_toggle
    state = {"calls": 0, "depth": 0, "inside": False, "within_calls": 0, "toggled": 0}
    monitors: list = []

    def kept_init(self, *a, **kw):
        init(self, *a, **kw)
        monitors.append(self)

    def counting(call):
        # (each listener a bus calls a monitor through, `runtime.listeners_wrapped`)
        def counted_call(self, action, fields):
            if (events and str(action) not in events) or (spec and self.spec.MODULE != spec):
                return call(self, action, fields)
            state["calls"] += 1
            if within is not None:
                # (collected only inside `within`'s calls made by this listener call)
                state["inside"] = True
                try:
                    return call(self, action, fields)
                finally:
                    state["inside"] = False
            state["toggled"] += 1
            toggle()
            try:
                return call(self, action, fields)
            finally:
                toggle()
        return counted_call

    def counted_check(self, *a, **kw):
        # (a cache check runs its companions' checks inside it: collected once)
        outer = whole and state["depth"] == 0
        state["depth"] += 1
        if outer:
            state["toggled"] += 1
            toggle()
        try:
            return check(self, *a, **kw)
        finally:
            state["depth"] -= 1
            if outer:
                toggle()
    def within_collecting(target):
        def counted_within(*a, **kw):
            if not state["inside"]:
                return target(*a, **kw)
            state["inside"] = False          # (a recursive call is inside the outer one)
            state["within_calls"] += 1
            state["toggled"] += 1
            toggle()
            try:
                return target(*a, **kw)
            finally:
                toggle()
                state["inside"] = True
        return counted_within
    R.Monitor.cache_check, R.Monitor.__init__ = counted_check, kept_init
    try:
        # (--within's target patched where the monitors look it up: a class attribute, a
        # module's function read at each call or when a monitor is built, as the spec
        # module's inc_all is)
        with patched(*within, within_collecting) if within is not None else contextlib.nullcontext(), \
                R.listeners_wrapped(counting):
            for _ in range(args.replays):
                bm._replay_once(args.mode, cfg, reqs, rate=rate, **_budget(args))
    finally:
        R.Monitor.cache_check, R.Monitor.__init__ = check, init
    # (sample mode's budget is wall-clock time: under valgrind it affords other samples than
    # natively, so the steps checked are reported beside the count they cost)
    counts = {"listener_calls": state["calls"], "collected_calls": state["toggled"],
              "steps_checked": sum(m.checked for m in monitors), "cache_checks": sum(m.cache_checks for m in monitors)}
    if within is not None:
        counts["within_calls"] = state["within_calls"]      # (the calls of `within` collected)
    Path(args.report).write_text(json.dumps(counts))


def _header(path: Path) -> list[str]:
    """A callgrind output file's header lines: its `desc:` lines, `events:` and `summary:`, which
    it writes before the cost lines (the whole file, a megabyte or more, is not read for them;
    a file with no summary line is read to its end)."""
    out = []
    with path.open() as f:
        for line in f:
            out.append(line.rstrip("\n"))
            if line.startswith("summary:"):
                break
    return out


def totals(path: Path) -> dict[str, int]:
    """Each event a callgrind output file counted, by its name (`events:` and `summary:`
    lines): Ir, the instructions, always; with the cache simulation also its misses."""
    names = values = None
    for line in _header(path):
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            values = [int(x) for x in line.split()[1:]]
    # (callgrind's format leaves out a line's trailing zero counts: a calibration part that
    # missed nothing in the last level has a shorter summary)
    if names is None or values is None or not values or len(values) > len(names) or "Ir" not in names:
        raise ValueError(f"{path}: no summary line (an events line, Ir among them, and a summary no longer)")
    return dict(zip(names, values + [0] * (len(names) - len(values))))


def summary(path: Path) -> int:
    """The instructions a callgrind output file counted."""
    return totals(path)["Ir"]


#: --cache-sim's report: callgrind's miss events by what they count
MISSES = {"I1mr": "L1_instruction", "D1mr": "L1_data_read", "D1mw": "L1_data_write",
          "ILmr": "LL_instruction", "DLmr": "LL_data_read", "DLmw": "LL_data_write"}


def simulated_caches(path: Path) -> dict[str, str]:
    """The caches callgrind simulated (its `desc: I1 cache: ...` lines), as it names them."""
    out = {}
    for line in _header(path):
        if line.startswith("desc:") and " cache:" in line:
            name, _, what = line[len("desc:"):].partition(" cache:")
            out[name.strip()] = what.strip()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("strict", "sample", "off", *FLOORS), default="strict",
                    help="verify mode of the replays (off, and floor: strict's monitors attached with listeners "
                         "that return at once, the bench's attached floor; sample_floor: sample mode's, the same way: "
                         "only with --whole)")
    ap.add_argument("--rate", type=float,
                    help="sample mode's rate (default VerifyConfig's); 0: nothing drawn, so the count does not "
                         "depend on what the wall-clock budget affords under valgrind")
    ap.add_argument("--no-budget", action="store_true",
                    help="sample mode with no checking budget: every drawn sample is checked, so the count does "
                         "not depend on what the wall-clock budget affords under valgrind (the rate decides)")
    ap.add_argument("--whole", action="store_true",
                    help="count the scheduler thread's whole replays, not only inside the monitors (no filters)")
    ap.add_argument("--replay", choices=tuple(REPLAYS), default="kv_bytes",
                    help="which of the bench's replays (default kv_bytes; kv_bytes_fitting: a device tier that "
                         "holds the requests, nodes of ~100 pages)")
    ap.add_argument("--replays", type=int, default=2)
    ap.add_argument("--limit", type=int, default=200, help="requests of the trace replayed (the bench's 200)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds the run under valgrind may take (~150 s for the defaults here)")
    ap.add_argument("--events", help="only the listener calls of these events (comma-separated action names, "
                                     "e.g. RequestMatch,RequestFinish); cache checks then not collected")
    ap.add_argument("--spec", help="only the listener calls of the monitors of this spec module (HostTier, "
                                   "CPSharding); cache checks then not collected")
    ap.add_argument("--within", help="only inside this function's calls made by the listener calls selected "
                                     "(module:function or module:Class.method, patched where it is looked up)")
    ap.add_argument("--around", help="with --whole: only inside the outermost calls of this function during the "
                                     "replays, wherever they come from (module:function or module:Class.method; "
                                     "e.g. hicache.monitors.attach:attach, hicache.monitors.runtime:Monitor.cache_check)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="with --whole: also simulate the caches and report each replay's misses (L1 instruction, "
                         "L1 data, last level), ~1.5x the run's time")
    ap.add_argument("--ll-bytes", type=int, default=2 * 1024 * 1024,
                    help="--cache-sim's last-level cache in bytes (16-way, 64-byte lines; default 2 MiB, the L2 "
                         "of one core here; a power of two of at least 64 KiB)")
    ap.add_argument("--keep", metavar="DIR",
                    help="also copy the counted thread's callgrind output to DIR (its path is printed as `kept`): "
                         "`callgrind_annotate --inclusive=no FILE` then names the C functions the count went to")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    filters = {k: v for k, v in (("events", args.events), ("spec", args.spec), ("within", args.within)) if v}
    if args.whole and filters:
        sys.exit("monitor_instructions: --whole counts whole replays: no --events, --spec or --within")
    if args.around and not args.whole:
        sys.exit("monitor_instructions: --around counts inside whole replays: add --whole")
    if args.around:
        resolve(args.around, "--around")
    if args.cache_sim and not args.whole:
        sys.exit("monitor_instructions: --cache-sim counts whole replays: add --whole")
    # (callgrind refuses a cache whose set count is not a power of two: said here, before
    # minutes under valgrind)
    if args.ll_bytes < 64 * 1024 or args.ll_bytes & (args.ll_bytes - 1):
        sys.exit(f"monitor_instructions: --ll-bytes {args.ll_bytes}: a power of two of at least 65536")
    if args.rate is not None and (args.mode != "sample" or not 0.0 <= args.rate <= 1.0):
        sys.exit("monitor_instructions: --rate is sample mode's, between 0 and 1")
    if args.no_budget and args.mode != "sample":
        sys.exit("monitor_instructions: --no-budget is sample mode's")
    if (args.mode == "off" or args.mode in FLOORS) and not args.whole:
        sys.exit(f"monitor_instructions: --mode {args.mode} checks nothing: count it with --whole")
    # (a misspelt spec or target is refused before minutes under valgrind)
    if args.spec:
        from hicache.monitors.generated import MODULES
        if args.spec not in MODULES:
            sys.exit(f"monitor_instructions: --spec {args.spec!r}: no such spec (one of {', '.join(MODULES)})")
    if args.within:
        resolve(args.within)
    if shutil.which("valgrind") is None:
        sys.exit("monitor_instructions: valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="hicache-cg-") as tmp:
        folder = Path(tmp)
        lib = build_toggle(folder)
        report = folder / "report.json"
        sim = ["--cache-sim=yes", f"--LL={args.ll_bytes},16,64"] if args.cache_sim else []
        cmd = ["valgrind", "--tool=callgrind", *sim, "--instr-atstart=no", "--collect-atstart=no",
               "--separate-threads=yes",
               f"--callgrind-out-file={folder}/cg.%p", sys.executable, __file__, "--child", "--lib", str(lib),
               "--report", str(report), "--mode", args.mode, "--replay", args.replay, "--replays", str(args.replays),
               "--limit", str(args.limit),
               *[f"--{k}={v}" for k, v in filters.items()], *(["--whole"] if args.whole else []),
               *([f"--around={args.around}"] if args.around else []),
               *([f"--rate={args.rate}"] if args.rate is not None else []),
               *(["--no-budget"] if args.no_budget else [])]
        try:
            # (OpenMP's idle threads passive unless the caller says otherwise: spinning, they
            # moved a --whole count by up to 25 % with the machine's load; passive, two off
            # runs agreed to 0.01 %)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  env={"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "TRITON_INTERPRET": "1"})
        except subprocess.TimeoutExpired:
            sys.exit(f"monitor_instructions: the run under valgrind took more than {args.timeout:.0f} s (--timeout)")
        if proc.returncode != 0 or not report.exists():
            sys.exit(f"monitor_instructions: the run under valgrind failed ({proc.returncode}): "
                     f"{proc.stderr.strip()[-800:]}")
        # thread 1 is the scheduler's (the replay's) thread, where the monitors run: parts 1
        # and 2 (cg.PID.1-01, cg.PID.2-01) the calibration, the final part (cg.PID-01) the replays
        parts = [sorted(folder.glob(pattern)) for pattern in ("cg.*.1-01", "cg.*.2-01")]
        main_thread = sorted(p for p in folder.glob("cg.*-01") if "." not in p.name[3:])
        if len(main_thread) != 1 or any(len(p) != 1 for p in parts):
            sys.exit(f"monitor_instructions: expected one thread-1 output of each part, found "
                     f"{sorted(p.name for p in folder.glob('cg.*'))}")
        whole = totals(main_thread[0])
        n = whole["Ir"]
        caches = simulated_caches(main_thread[0]) if args.cache_sim else {}
        per_call, per_within = (summary(p[0]) / CALIBRATION_CALLS for p in parts)
        counts = json.loads(report.read_text())
        kept = {}
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            kept = {"kept": str(shutil.copy(main_thread[0], Path(args.keep) / main_thread[0].name))}
    calls = counts["listener_calls"]
    if args.whole:
        print(json.dumps({"mode": args.mode, "replay": args.replay, "replays": args.replays, "requests": args.limit,
                          "whole": True,
                          **({"rate": args.rate} if args.rate is not None else {}),
                          "instructions": n, "per_replay": n // max(args.replays, 1),
                          **({"around": args.around, "around_calls": counts["around_calls"],
                              "net": max(0, round(n - per_within * counts["around_calls"]))}
                             if args.around else {}),
                          **({"caches": caches,
                              "misses_per_replay": {label: whole[e] // max(args.replays, 1)
                                                    for e, label in MISSES.items() if e in whole}}
                             if args.cache_sim else {}),
                          **kept}))
        return
    if filters and not calls:
        sys.exit(f"monitor_instructions: no listener call matched {filters} (--events takes action names such "
                 f"as RequestMatch, --spec a spec module such as HostTier or CPSharding)")
    # (each collected call also counts the ctypes calls into the toggles around it, ~2k
    # instructions measured apart: `net` leaves them out, so a small function's --within
    # figure is its own cost; `instructions` is the raw count, comparable to earlier runs)
    per_toggle = per_within if args.within else per_call
    net = max(0, round(n - per_toggle * counts["collected_calls"]))
    print(json.dumps({"mode": args.mode, "replay": args.replay, "replays": args.replays, "requests": args.limit,
                      **filters,
                      **({"rate": args.rate} if args.rate is not None else {}), "instructions": n,
                      "per_replay": n // max(args.replays, 1), **counts,
                      "per_listener_call": round(n / max(calls, 1), 1), "toggle_cost": round(per_toggle, 1),
                      "net": net, "net_per_listener_call": round(net / max(calls, 1), 1), **kept}))


if __name__ == "__main__":
    main()
